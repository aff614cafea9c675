// Block-level operations on one sub-pool: best fit, split, coalesce, pending
// frees. Every function here requires the sub-pool's lock and calls nothing
// outside the sub-pool (no upstream, no other sub-pool).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pool_internal.h"

namespace cumemtrace::pool::detail {

// Size rounding and segment sizing, from the configuration.
class SizePolicy {
 public:
  explicit SizePolicy(const PoolConfig& config) : config_(config) {}
  // The block size for a request: 512-byte multiples, or one of N steps per
  // power-of-two interval with roundup_power2_divisions. 0 when the size is
  // beyond anything a device holds (the caller reports out-of-memory).
  std::size_t round(std::size_t size) const;
  static PoolKind kind_of(std::size_t rounded) { return rounded <= kSmallRequest ? kSmall : kLarge; }
  // PyTorch's segment sizes: 2 MiB for small blocks, 20 MiB below 10 MiB,
  // else the request rounded up to 2 MiB.
  static std::size_t segment_size(std::size_t rounded);
  // Whether taking `rounded` out of a free block of `block_size` leaves a
  // remainder worth a block of its own.
  bool should_split(const Segment* seg, std::size_t block_size, std::size_t rounded) const;
  // The oversize rule: may a request of `rounded` take a free block of
  // `block_size`?
  bool may_use(std::size_t block_size, std::size_t rounded) const;
  const PoolConfig& config() const { return config_; }

 private:
  const PoolConfig& config_;
};

// The best free block for `rounded` in `kind` (smallest size, then lowest
// address), or null.
Block* best_fit(SubPool& sp, const SizePolicy& policy, PoolKind kind, std::size_t rounded);

// Hands out `rounded` bytes at the start of free block `f` (splitting off the
// rest when worth it) and registers it as live. Returns the live block.
Block* take_block(SubPool& sp, const SizePolicy& policy, Block* f, std::size_t rounded,
                  std::size_t requested, bool stream_ordered);

// Adds a new free block covering [addr, addr+size) of `seg` at the segment's
// end (a fresh segment, or the newly mapped tail of an expandable one),
// merged with a free block before it. Returns the resulting free block.
Block* add_free_tail(SubPool& sp, Segment* seg, DevicePtr addr, std::size_t size);

// Splits free block `f` at `at` (inside it, 512-byte aligned): f keeps
// [f->addr, at) and a new free block [at, end) is returned. The two are
// adjacent free blocks until the caller takes the second; `at` == f->addr
// returns f unchanged.
Block* split_free(SubPool& sp, Block* f, DevicePtr at);

// Turns an allocated or pending block into free space, merged with free
// neighbours. Returns the resulting free block. `busy_until`: the sync
// ticket stamp after which no device work uses the block's memory (0: none
// does), kept per page in expandable segments.
Block* make_free(SubPool& sp, Block* b, std::uint64_t busy_until);

// Raises the busy stamp of the pages under [addr, addr+size) of an
// expandable segment to `busy_until`.
void stamp_pages(Segment* seg, DevicePtr addr, std::size_t size, std::uint64_t busy_until);

// Marks a block the application freed as pending until sync ticket
// `ticket` has completed (cudaFree semantics).
void make_sync_pending(SubPool& sp, Block* b, std::uint64_t ticket);
// Marks it pending behind a fence (a cross-stream cudaFreeAsync).
void make_fence_pending(SubPool& sp, Block* b, FenceHandle fence);
// Frees sync-pending blocks whose ticket is below `ordered` (a
// synchronisation or an ordering of the device began after their free);
// returns bytes. Their pages stay busy until the ticket after theirs
// completes.
std::size_t reclaim_synced(SubPool& sp, std::uint64_t ordered);

// Moves an application-freed block out of the live accounting.
void unaccount_live(SubPool& sp, Block* b);

// A segment whose only block is free.
inline bool segment_is_free(const Segment* seg) {
  const Block* b = seg->first;
  return b && b->state == BlockState::free && b->next == nullptr;
}

// Removes a wholly free segment's block from the free index and its bytes
// from the counters; the caller releases the memory and the records.
void detach_free_segment(SubPool& sp, Segment* seg);

// Links a segment into the sub-pool's list and adds its backed bytes.
void attach_segment(SubPool& sp, Segment* seg);

// An expandable segment's mapped bytes change by `delta`: keeps reserved and
// inactive-split counters right.
void change_mapped(SubPool& sp, Segment* seg, std::ptrdiff_t delta);

// Sets the used bytes of a segment (allocated + pending), keeping the
// inactive-split counter right.
void set_used(SubPool& sp, Segment* seg, std::size_t used);

// Checks every structural invariant of the sub-pool (tests call it through
// DevicePool's debug hook); returns an empty string or the first violation.
std::string check_sub_pool(SubPool& sp);

}  // namespace cumemtrace::pool::detail
