// Address → segment, readable without a lock: a four-level radix tree over
// 2 MiB pages (the whole 64-bit space: 7 + 12 + 12 + 12 bits of page number).
// Every segment is at least one page long, so a page overlaps at most two
// segments (one ending in it, one starting in it) and each leaf entry has two
// slots. Writers are serialised by the caller; nodes are only ever added and
// live as long as the map, so a reader never follows a dangling pointer.
// Readers must re-check what they find under the owning sub-pool's lock.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cumemtrace/pool/upstream.h"

namespace cumemtrace::pool::detail {

struct Segment;

// The range a segment covers, readable racily (its record may be recycled
// while a reader looks at it; the reader re-checks under a lock).
struct SegmentRange {
  std::atomic<DevicePtr> base{0};
  std::atomic<std::size_t> size{0};
  bool contains(DevicePtr p) const {
    const DevicePtr b = base.load(std::memory_order_acquire);
    const std::size_t s = size.load(std::memory_order_acquire);
    return s != 0 && p >= b && p - b < s;
  }
};

class SegmentMap {
 public:
  static constexpr unsigned kPageShift = 21;

  SegmentMap() = default;
  ~SegmentMap();
  SegmentMap(const SegmentMap&) = delete;
  SegmentMap& operator=(const SegmentMap&) = delete;

  // `range_of(s)` must give the segment's range; passed in so that this file
  // does not need the Segment definition.
  template <class RangeOf>
  Segment* find(DevicePtr p, RangeOf range_of) const {
    const Slots* slots = leaf_slots(p >> kPageShift, /*create=*/false);
    if (!slots) return nullptr;
    for (const auto& slot : *slots) {
      Segment* s = slot.load(std::memory_order_acquire);
      if (s && range_of(s).contains(p)) return s;
    }
    return nullptr;
  }

  // Registers [base, base+size) for `s` (size ≥ one page). False when the
  // nodes could not be allocated or a page already has two segments.
  bool insert(Segment* s, DevicePtr base, std::size_t size);
  // Removes `s` from the pages of [base, base+size).
  void erase(Segment* s, DevicePtr base, std::size_t size);

 private:
  static constexpr unsigned kBits = 12;
  static constexpr std::size_t kFanout = std::size_t{1} << kBits;
  using Slots = std::array<std::atomic<Segment*>, 2>;
  struct Leaf { std::array<Slots, kFanout> slots{}; };
  struct Mid { std::array<std::atomic<Leaf*>, kFanout> child{}; };
  struct Upper { std::array<std::atomic<Mid*>, kFanout> child{}; };

  Slots* leaf_slots(std::uint64_t page, bool create) const;

  std::array<std::atomic<Upper*>, 128> root_{};
};

}  // namespace cumemtrace::pool::detail
