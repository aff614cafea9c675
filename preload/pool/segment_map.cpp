#include "segment_map.h"

#include <new>

namespace cumemtrace::pool::detail {

SegmentMap::~SegmentMap() {
  for (auto& r : root_) {
    Upper* upper = r.load(std::memory_order_relaxed);
    if (!upper) continue;
    for (auto& m : upper->child) {
      Mid* mid = m.load(std::memory_order_relaxed);
      if (!mid) continue;
      for (auto& l : mid->child) delete l.load(std::memory_order_relaxed);
      delete mid;
    }
    delete upper;
  }
}

// Walks (and with `create`, builds) the path to a page's slots. Building
// happens only under the caller's writer lock; readers see a node either
// absent or complete (release store after construction).
SegmentMap::Slots* SegmentMap::leaf_slots(std::uint64_t page, bool create) const {
  auto* self = const_cast<SegmentMap*>(this);
  constexpr std::uint64_t mask = kFanout - 1;
  auto& top = self->root_[(page >> (3 * kBits)) & 127];
  Upper* upper = top.load(std::memory_order_acquire);
  if (!upper) {
    if (!create || !(upper = new (std::nothrow) Upper())) return nullptr;
    top.store(upper, std::memory_order_release);
  }
  auto& mid_ref = upper->child[(page >> (2 * kBits)) & mask];
  Mid* mid = mid_ref.load(std::memory_order_acquire);
  if (!mid) {
    if (!create || !(mid = new (std::nothrow) Mid())) return nullptr;
    mid_ref.store(mid, std::memory_order_release);
  }
  auto& leaf_ref = mid->child[(page >> kBits) & mask];
  Leaf* leaf = leaf_ref.load(std::memory_order_acquire);
  if (!leaf) {
    if (!create || !(leaf = new (std::nothrow) Leaf())) return nullptr;
    leaf_ref.store(leaf, std::memory_order_release);
  }
  return &leaf->slots[page & mask];
}

bool SegmentMap::insert(Segment* s, DevicePtr base, std::size_t size) {
  const std::uint64_t first = base >> kPageShift;
  const std::uint64_t last = (base + size - 1) >> kPageShift;
  for (std::uint64_t page = first; page <= last; ++page) {
    Slots* slots = leaf_slots(page, /*create=*/true);
    bool placed = false;
    if (slots) {
      // An expandable segment registers its extent piece by piece; a page
      // it already holds stays as it is.
      for (auto& slot : *slots) placed = placed || slot.load(std::memory_order_relaxed) == s;
      for (auto& slot : *slots) {
        if (placed) break;
        if (slot.load(std::memory_order_relaxed) == nullptr) {
          slot.store(s, std::memory_order_release);
          placed = true;
          break;
        }
      }
    }
    if (!placed) {
      if (page > first) erase(s, base, (page - first) << kPageShift);
      return false;
    }
  }
  return true;
}

void SegmentMap::erase(Segment* s, DevicePtr base, std::size_t size) {
  const std::uint64_t first = base >> kPageShift;
  const std::uint64_t last = (base + size - 1) >> kPageShift;
  for (std::uint64_t page = first; page <= last; ++page) {
    Slots* slots = leaf_slots(page, /*create=*/false);
    if (!slots) continue;
    for (auto& slot : *slots) {
      if (slot.load(std::memory_order_relaxed) == s) slot.store(nullptr, std::memory_order_release);
    }
  }
}

}  // namespace cumemtrace::pool::detail
