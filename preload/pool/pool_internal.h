// The pool's records: blocks, segments, sub-pools. Internal to preload/pool.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <map>
#include <set>
#include <vector>

#include "cumemtrace/pool/pool_config.h"
#include "cumemtrace/pool/upstream.h"
#include "live_map.h"
#include "segment_map.h"
#include "futex_lock.h"

namespace cumemtrace::pool::detail {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kMinBlock = 512;           // every size rounds to this
inline constexpr std::size_t kSmallRequest = 1 * kMiB;  // ≤ this: small pool
inline constexpr std::size_t kSmallSegment = 2 * kMiB;
inline constexpr std::size_t kMidRequest = 10 * kMiB;   // < this: 20 MiB segments
inline constexpr std::size_t kMidSegment = 20 * kMiB;
inline constexpr std::size_t kLargeRounding = 2 * kMiB;

// Small blocks come from small segments only and large from the others, so a
// long-lived small tensor never pins a large segment (PyTorch's split).
enum PoolKind : std::uint8_t { kSmall = 0, kLarge = 1 };

enum class BlockState : std::uint8_t { free, allocated, pending };

struct Block;
struct Segment;
struct SubPool;

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const;
};
using FreeSet = std::set<Block*, BlockOrder, std::pmr::polymorphic_allocator<Block*>>;

struct Block {
  DevicePtr addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // while allocated: what the application asked for
  Segment* segment = nullptr;
  Block* prev = nullptr;  // address neighbours inside the segment
  Block* next = nullptr;
  BlockState state = BlockState::free;
  bool stream_ordered = false;  // allocated with allocate_async
  // While pending: the sync ticket taken at free time, or a fence.
  std::uint64_t ticket = 0;
  FenceHandle fence = 0;
  bool fenced = false;
  Block* pending_next = nullptr;  // FIFO of sync-pending blocks
  FreeSet::iterator where;        // valid while free
};

inline bool BlockOrder::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->addr < b->addr;
}

struct Segment {
  SegmentRange range;                 // what the radix map points into
  std::atomic<SubPool*> owner{nullptr};
  PoolKind kind = kLarge;
  // From Upstream::allocate_stream_ordered: a device reset does not free it.
  bool stream_ordered_memory = false;
  std::size_t used = 0;               // bytes in allocated + pending blocks
  Block* first = nullptr;             // lowest-address block
  Segment* prev_in_pool = nullptr;    // the owner's list of segments
  Segment* next_in_pool = nullptr;
  Segment* next_record = nullptr;     // recycling list
  // Expandable segments: a reserved address range of `va_size` bytes whose
  // first range.size bytes (the extent) are tiled by blocks. Pages of the
  // extent are mapped on demand (`pages`, one flag per granularity page);
  // allocated and pending blocks are always fully mapped, free blocks may
  // have unmapped pages. `runs` are the mapped ranges as the observer was
  // told about them (segment_alloc/segment_free pairs must match).
  bool expandable = false;
  std::size_t mapped = 0;
  std::size_t va_size = 0;
  std::size_t page_size = 0;
  std::vector<bool> pages;
  // Per page: the sync ticket stamp after which no device work uses it
  // (idle once the pool's completed ticket reached it; 0: never used since
  // mapped). Set when a block over it becomes free; only idle pages are
  // unmapped, because cuMemUnmap does not wait for queued work.
  std::vector<std::uint64_t> page_busy;
  // Per page: its memory was moved while device work queued before the
  // move may still use it here (an aliasing move, Upstream::alias_keep):
  // unmapped for the pool, still mapped at the driver until that work has
  // completed (page_busy says when), so not mappable until then.
  std::vector<bool> retiring;
  std::size_t retiring_pages = 0;
  std::map<DevicePtr, std::size_t> runs;

  DevicePtr base() const { return range.base.load(std::memory_order_relaxed); }
  std::size_t size() const { return range.size.load(std::memory_order_relaxed); }
  // Bytes that count as reserved.
  std::size_t backed() const { return expandable ? mapped : size(); }
};

// Relaxed counters written under the sub-pool's lock and read by stats()
// without one: a plain load+store, no read-modify-write on the hit path.
struct Counter {
  std::atomic<std::size_t> value{0};
  void add(std::size_t d) { value.store(value.load(std::memory_order_relaxed) + d, std::memory_order_relaxed); }
  void sub(std::size_t d) { value.store(value.load(std::memory_order_relaxed) - d, std::memory_order_relaxed); }
  void set(std::size_t v) { value.store(v, std::memory_order_relaxed); }
  std::size_t get() const { return value.load(std::memory_order_relaxed); }
};

struct alignas(64) SubPool {
  FutexLock mu;
  bool stream_ordered = false;
  StreamHandle stream = 0;
  // The stream was destroyed: nothing is allocated here any more; frees
  // release whole segments straight to the upstream (whose release waits for
  // the device, so no pending state is needed).
  bool orphan = false;

  std::pmr::unsynchronized_pool_resource nodes;
  FreeSet free_sets[2]{FreeSet(&nodes), FreeSet(&nodes)};
  LiveMap<Block> live;
  Block* pending_head = nullptr;  // sync-pending blocks, tickets ascending
  Block* pending_tail = nullptr;
  std::vector<Block*> fenced;     // fence-pending blocks
  std::size_t pending_bytes[2] = {0, 0};
  Segment* segments = nullptr;
  Segment* expandable = nullptr;  // this sub-pool's growing range for large blocks
  // Block records: a free list refilled a chunk at a time, so splitting a
  // block does not call malloc.
  Block* spare_blocks = nullptr;
  std::vector<std::unique_ptr<Block[]>> block_chunks;

  Counter allocated, requested, reserved, pending, free_bytes, free_blocks, inactive_split,
      live_blocks, segment_count;
  Counter largest[2];

  Block* new_block() {
    if (!spare_blocks) refill_blocks();
    Block* b = spare_blocks;
    spare_blocks = b->pending_next;
    // Field by field: `*b = Block{}` compiles to a `rep stos` over the whole
    // record, a measurable part of a cache hit. `where` is set whenever the
    // block enters the free index.
    b->addr = 0;
    b->size = 0;
    b->requested = 0;
    b->segment = nullptr;
    b->prev = b->next = nullptr;
    b->state = BlockState::free;
    b->stream_ordered = false;
    b->ticket = 0;
    b->fence = 0;
    b->fenced = false;
    b->pending_next = nullptr;
    return b;
  }
  void recycle(Block* b) {
    b->pending_next = spare_blocks;
    spare_blocks = b;
  }
  void refill_blocks() {
    constexpr std::size_t kChunk = 256;
    block_chunks.push_back(std::make_unique<Block[]>(kChunk));
    for (std::size_t i = 0; i < kChunk; ++i) recycle(&block_chunks.back()[i]);
  }
  void raise_largest(PoolKind k, std::size_t size) {
    if (size > largest[k].get()) largest[k].set(size);
  }
  void refresh_largest(PoolKind k) {
    const FreeSet& s = free_sets[k];
    largest[k].set(s.empty() ? 0 : (*s.rbegin())->size);
  }
};

}  // namespace cumemtrace::pool::detail
