#include "stacks/stack_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>

namespace cumemtrace::preload {
namespace {

// Reserves zeroed memory without touching it: a process that records few
// stacks pays only for the pages its stacks land on. MAP_NORESERVE keeps the
// reservation out of the overcommit accounting.
void* reserve_zeroed(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// The 64-bit finaliser of MurmurHash3: every input bit affects every output bit.
std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace

// Runs for every captured stack: one multiply per frame (the multiply
// carries each address's low bits, where return addresses differ, upwards;
// the rotation brings them back down), and the finaliser once.
std::uint64_t StackTable::default_hash(std::span<const std::uintptr_t> ips) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ ips.size();
  for (std::uintptr_t ip : ips) h = std::rotl((h ^ ip) * 0x9e3779b97f4a7c15ull, 31);
  return mix(h);
}

StackTable::StackTable(std::size_t slots, std::size_t frame_capacity, Hasher hasher)
    : hasher_(hasher),
      mask_(std::bit_ceil(std::max<std::size_t>(slots, 4)) - 1),
      max_claimed_((mask_ + 1) / 4 * 3),
      frame_capacity_(frame_capacity) {
  static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free &&
                std::atomic_ref<std::uint32_t>::is_always_lock_free);
  static_assert(alignof(Slot) >= std::atomic_ref<std::uint64_t>::required_alignment);
  slots_ = static_cast<Slot*>(reserve_zeroed((mask_ + 1) * sizeof(Slot)));
  frames_ = static_cast<std::uintptr_t*>(reserve_zeroed(frame_capacity_ * sizeof(std::uintptr_t)));
  by_id_ = static_cast<std::uint64_t*>(reserve_zeroed((max_claimed_ + 1) * sizeof(std::uint64_t)));
}

StackTable::~StackTable() {
  if (slots_) ::munmap(slots_, (mask_ + 1) * sizeof(Slot));
  if (frames_) ::munmap(frames_, frame_capacity_ * sizeof(std::uintptr_t));
  if (by_id_) ::munmap(by_id_, (max_claimed_ + 1) * sizeof(std::uint64_t));
}

std::span<const std::uintptr_t> StackTable::frames_of(std::uint32_t id) const {
  if (id == 0 || id > max_claimed_ || !by_id_ || !frames_) return {};
  const std::uint64_t entry = std::atomic_ref(by_id_[id]).load(std::memory_order_acquire);
  const std::size_t depth = entry & 0xffff;
  if (depth == 0) return {};
  return {frames_ + (entry >> 16), depth};
}

std::uint32_t StackTable::intern_impl(std::span<const std::uintptr_t> ips, NewStackCallback on_new,
                                      void* context) {
  if (ips.empty() || ips.size() > kMaxDepth || !slots_ || !frames_) return 0;
  std::uint64_t h = hasher_(ips);
  if (h == kEmpty) h = 1;
  std::size_t i = h & mask_;
  for (std::size_t probes = 0; probes <= mask_; ++probes, i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    std::uint64_t seen = hash_of(slot).load(std::memory_order_acquire);
    if (seen == kEmpty) {
      // Slots are never emptied, so an empty slot ends the search: the stack
      // is new. Claim the slot, unless the table is as full as it may get.
      if (claimed_.load(std::memory_order_relaxed) >= max_claimed_) {
        overflowed_.store(true, std::memory_order_relaxed);
        return 0;
      }
      if (hash_of(slot).compare_exchange_strong(seen, h, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        claimed_.fetch_add(1, std::memory_order_relaxed);
        return fill(slot, ips, on_new, context);
      }
      // Another thread claimed it first; `seen` now holds its hash.
    }
    if (seen != h) continue;
    const std::uint32_t state = wait_until_published(slot);
    if (state == kAbandoned) return 0;
    if (slot.depth == ips.size() &&
        std::equal(ips.begin(), ips.end(), frames_ + slot.first_frame)) {
      return state;
    }
    // A different stack with the same hash: keep probing.
  }
  return 0;
}

std::uint32_t StackTable::fill(Slot& slot, std::span<const std::uintptr_t> ips,
                               NewStackCallback on_new, void* context) {
  const std::size_t first = frames_used_.fetch_add(ips.size(), std::memory_order_relaxed);
  if (first + ips.size() > frame_capacity_) {
    overflowed_.store(true, std::memory_order_relaxed);
    publish(slot, kAbandoned);
    return 0;
  }
  std::copy(ips.begin(), ips.end(), frames_ + first);
  slot.first_frame = first;
  slot.depth = static_cast<std::uint32_t>(ips.size());
  const std::uint32_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  // Ids stay at most max_claimed_: one per claimed slot. Depth fits 16 bits
  // (kMaxDepth).
  if (by_id_ && id <= max_claimed_) {
    std::atomic_ref(by_id_[id]).store(std::uint64_t{first} << 16 | ips.size(), std::memory_order_release);
  }
  try {
    on_new(context, id, ips);
  } catch (...) {
    // Its event may not have been written: the id must never be used.
    publish(slot, kAbandoned);
    throw;
  }
  publish(slot, id);
  return id;
}

std::uint32_t StackTable::wait_until_published(Slot& slot) {
  std::uint32_t state = state_of(slot).load(std::memory_order_acquire);
  while (state == kFilling) {
    state_of(slot).wait(kFilling, std::memory_order_acquire);  // futex: no spinning for long
    state = state_of(slot).load(std::memory_order_acquire);
  }
  return state;
}

void StackTable::publish(Slot& slot, std::uint32_t state) {
  state_of(slot).store(state, std::memory_order_release);
  state_of(slot).notify_all();
}

}  // namespace cumemtrace::preload
