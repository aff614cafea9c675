// DevicePool's state, shared by the files that implement it:
//   device_pool.cpp   routing to sub-pools, allocate and free (the hot path),
//                     queries, statistics, segment records
//   expandable.cpp    expandable segments (virtual memory grown in pages)
//   release.cpp       giving memory back: reclaiming pending frees, releasing
//                     free segments
//   oom_ladder.cpp    the out-of-memory ladder and its report
//   device_reset.cpp  what a device reset leaves
// See the design notes at the top of include/cumemtrace/pool/device_pool.h.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "block_ops.h"
#include "cumemtrace/pool/device_pool.h"
#include "pool_internal.h"
#include "segment_map.h"

namespace cumemtrace::pool {

using detail::Block;
using detail::PoolKind;
using detail::Segment;
using detail::SubPool;

class DevicePool::Impl {
 public:
  Impl(Upstream& upstream, const PoolConfig& config, int device, PoolObserver* observer);
  ~Impl();

  Allocation allocate(std::size_t size, bool stream_ordered, StreamHandle stream);
  FreeResult free(DevicePtr ptr, bool stream_ordered, StreamHandle stream);
  bool owns(DevicePtr ptr) const;
  bool find(DevicePtr ptr, BlockInfo* info) const;
  Containing find_containing(DevicePtr ptr, ContainingBlock* out) const;
  std::size_t block_size_for(std::size_t size) const;
  std::uint64_t sync_ticket();
  void device_synchronized(std::uint64_t ticket);
  void stream_destroyed(StreamHandle stream);
  MemoryInfo application_memory_info(std::size_t driver_free, std::size_t driver_total) const;
  UpstreamResult release_cached();
  void device_reset();
  PoolStats stats() const;
  std::size_t stream_ordered_reserved() const;
  std::string check_invariants() const;

  const PoolConfig& config() const { return config_; }
  int device() const { return device_; }

 private:
  static constexpr std::size_t kMaxSubPools = 4096;

  // --- routing (device_pool.cpp) ---
  SubPool* device_pool_for(PoolKind kind);
  SubPool* stream_pool(StreamHandle stream);
  SubPool* add_sub_pool(bool stream_ordered, StreamHandle stream);  // streams_mu held
  // Locks and returns the sub-pool owning the segment that contains ptr;
  // null when no segment contains it.
  SubPool* lock_owner(DevicePtr ptr, std::unique_lock<FutexLock>& lock, Segment** segment) const;
  template <class Fn>
  void for_each_sub_pool(Fn fn) const;

  // --- slow paths of allocate (device_pool.cpp; sub-pool lock held unless said otherwise) ---
  // Best fit after reclaiming what is safe, synchronising first when pending
  // memory could serve the request, then growing.
  // A borrowed block (borrow_in_order) comes back in *borrowed, already
  // taken, with null returned.
  Block* refill(SubPool& sp, PoolKind kind, std::size_t rounded, std::size_t size, bool stream_ordered,
                UpstreamResult* error, Allocation* borrowed);
  Block* grow(SubPool& sp, PoolKind kind, std::size_t rounded, UpstreamResult* error);
  Allocation finish(SubPool& sp, Block* free_block, std::size_t rounded, std::size_t size,
                    bool stream_ordered);

  // --- expandable segments (expandable.cpp) ---
  // Small or large. With expandable segments in use the small class ends at
  // 256 KiB instead of PyTorch's 1 MiB: small blocks live in 2 MiB segments
  // that one long-lived block keeps from going back, while blocks in the
  // expandable range strand at most the partial pages at their ends. On a
  // KV-cache workload whose chunks live long (varlen_workloads kv_cache),
  // 27% of the small segments' memory sat unused at the peak; with the
  // lower bound reserved / live fell from 1.084 to 1.061 (replay; eor_nn's
  // snapshot 1.046 to 1.027, the others unchanged).
  PoolKind kind_for(std::size_t rounded) const {
    constexpr std::size_t kExpandableSmallRequest = std::size_t{256} << 10;
    const bool expandable = vm_granularity_ != 0 && !vmm_refused_.load(std::memory_order_relaxed);
    return rounded <= (expandable ? kExpandableSmallRequest : detail::kSmallRequest) ? detail::kSmall
                                                                                     : detail::kLarge;
  }
  // Whether blocks of `kind` grow expandable ranges now.
  bool expandable_for(PoolKind kind) const {
    return vm_granularity_ != 0 && kind == detail::kLarge && !vmm_refused_.load(std::memory_order_relaxed);
  }
  // A map failed: out-of-memory is the ladder's business; any other error
  // is a refusal of virtual memory, remembered, and reported as "no fit".
  bool note_map_refusal(UpstreamResult* error);
  // Best fit, with the block's pages mapped when it lies in an expandable
  // segment; null with *error set when mapping failed.
  Block* fit(SubPool& sp, PoolKind kind, std::size_t rounded, UpstreamResult* error);
  std::size_t expandable_va_size();
  // Extends sp's expandable segment (made on first use) so that a free block
  // of `rounded` bytes exists, mapped. Null with *error ok: no virtual memory
  // or the range is full (the caller falls back to ordinary segments).
  Block* grow_expandable(SubPool& sp, std::size_t rounded, UpstreamResult* error);
  UpstreamResult map_pages(SubPool& sp, Segment* seg, DevicePtr addr, std::size_t size);
  UpstreamResult map_missing_pages(SubPool& sp, Segment* seg, std::size_t first_page, std::size_t end_page);
  std::size_t unmapped_bytes(const Segment* seg, DevicePtr addr, std::size_t size) const;
  // The mapped stretch of a free block where `rounded` bytes need no new
  // page (split off at its start), the smallest such block; null if none.
  Block* mapped_stretch(SubPool& sp, PoolKind kind, std::size_t rounded);
  // The same without the split: the block, and where the stretch starts.
  Block* find_mapped_stretch(SubPool& sp, PoolKind kind, std::size_t rounded, DevicePtr* at) const;

  // --- memory of another sub-pool, reused in device order (borrow.cpp) ---
  // A free mapped stretch of another sub-pool's expandable range for this
  // request, taken there (tight policy): after an ordering of the device
  // if its last use may be another stream's. Empty when there is none.
  Allocation borrow_in_order(SubPool& sp, PoolKind kind, std::size_t rounded, std::size_t size,
                             bool stream_ordered);
  // Which busy pages a move may take by aliasing (Upstream::alias_keep):
  // none; those whose reuse an ordering made safe for any stream; or every
  // busy page, when the memory moves within the sub-pool that freed it.
  enum class Alias : std::uint8_t { none, ordered, own_sub_pool };
  // Unmaps whole idle pages under free blocks (outside [keep_begin,
  // keep_end)) until `goal` bytes went back; returns the bytes unmapped.
  // `keep`: the physical memory stays with the upstream for the map that
  // follows (a move), rather than going back to the driver; with `alias`,
  // busy pages may move too, their old mapping retiring later.
  std::size_t unmap_free_pages(SubPool& sp, Segment* seg, std::size_t goal, DevicePtr keep_begin,
                               DevicePtr keep_end, UpstreamResult* first_error, bool keep = false,
                               Alias alias = Alias::none);
  void unmap_run(SubPool& sp, Segment* seg, std::size_t first_page, std::size_t end_page,
                 UpstreamResult* first_error, bool keep, bool alias);
  // Unmaps the old mappings of aliased pages whose queued work completed.
  void retire_aliases(Segment* seg);
  // Pages of [addr, addr+size) still mapped for queued work after an
  // aliasing move; the end of the last such page in it (0: none).
  std::size_t retiring_in(const Segment* seg, DevicePtr addr, std::size_t size) const;
  DevicePtr last_retiring_end(const Segment* seg, DevicePtr addr, std::size_t size) const;
  // A wholly free expandable segment: everything unmapped (after a
  // synchronisation if some page is still busy), the range returned.
  void release_expandable(SubPool& sp, Segment* seg, UpstreamResult* first_error);
  bool page_idle(const Segment* seg, std::size_t page) const {
    return seg->page_busy[page] <= sync_done_.load(std::memory_order_acquire);
  }

  // --- giving memory back (release.cpp) ---
  std::size_t reclaim(SubPool& sp);
  std::size_t reclaim_fences(SubPool& sp);
  // Bytes in sp's wholly free segments.
  static std::size_t whole_free_bytes(const SubPool& sp);
  // `synchronized`: the pool just synchronised the device.
  void trim_to_release_threshold(SubPool& sp, bool synchronized);
  // Whether a mapped page under a free block of sp may still be in use.
  bool busy_free_pages(const SubPool& sp) const;
  // Whether an ordering could let make_room give more pages back: frees
  // pending in a sub-pool with an expandable range, or busy free pages.
  bool idle_pages_would_help(SubPool& sp);
  // How a release may give memory back. `step`: on the program's step
  // path, where the host must never wait for the device: only idle pages of
  // expandable segments are unmapped (an ordinary segment's cuMemFree
  // synchronises the device). `wait`: off it (the ladder, an explicit
  // trim, a destroyed stream), where whole free segments go back too.
  enum class Release : std::uint8_t { step, step_keep, wait };
  // Gives back whole free segments of sp (and free pages of expandable
  // ones) until `goal` bytes went back; returns the bytes released.
  std::size_t release_free(SubPool& sp, std::size_t goal, UpstreamResult* first_error, Release how);
  // The same in other sub-pools than `self` (whose lock the caller holds),
  // each only if its lock is free at once.
  std::size_t release_elsewhere(SubPool& self, std::size_t goal, Release how);
  // The tight policy's guard, before growth that would raise the peak of
  // reserved memory by `goal`: idle free pages of `seg` outside
  // [keep_begin, keep_end) (kept for the map that follows), or with seg
  // null idle pages of sp's expandable range, then other sub-pools'. Never
  // waits for the device: pages whose last use may still be queued stay,
  // and the pool grows instead. Returns the bytes given back.
  std::size_t make_room(SubPool& sp, std::size_t goal, Segment* seg, DevicePtr keep_begin, DevicePtr keep_end);
  // freed_by_reset: the memory is gone already (a device reset freed it);
  // only the records and the observer are told.
  void release_segment(SubPool& sp, Segment* seg, UpstreamResult* first_error, bool freed_by_reset = false);

  // --- the out-of-memory ladder (oom_ladder.cpp) ---
  void garbage_collect(SubPool& sp, std::size_t needed);
  // No lock held: the steps of the ladder that touch every sub-pool.
  Allocation out_of_memory_ladder(SubPool& sp, PoolKind kind, std::size_t size, std::size_t rounded,
                                  bool stream_ordered, StreamHandle stream, UpstreamResult error);
  void release_everywhere();
  Allocation borrow_from_other_sub_pools(const SubPool& sp, PoolKind kind, std::size_t size, std::size_t rounded,
                                         bool stream_ordered);
  UpstreamResult synchronize_device();
  // Makes every block freed so far reusable without waiting
  // (Upstream::order_device), or synchronises where the upstream cannot
  // order the device. Its fence says later when that work has completed.
  // *synchronized (optional): set when it had to synchronise.
  UpstreamResult order_device(bool* synchronized = nullptr);
  // Advances sync_done_ past the orderings whose fences completed (queries
  // them; never waits).
  void poll_orderings();
  std::size_t largest_mapped_free() const;
  OomReport make_report(std::size_t size, std::size_t rounded, bool stream_ordered,
                        StreamHandle stream, UpstreamResult error);

  // --- device reset (device_reset.cpp; survives_reset inline below) ---
  bool survives_reset(const SubPool& sp, const Segment* seg) const;

  // --- records (device_pool.cpp) ---
  Segment* new_segment();                 // takes segments_mu
  void recycle_segment(Segment* segment);  // takes segments_mu
  bool register_segment(Segment* segment);  // radix insert, segments_mu
  void note_reserved(std::ptrdiff_t delta);
  std::size_t device_total();

  Upstream& upstream_;
  const PoolConfig config_;
  const detail::SizePolicy policy_;
  const int device_;
  PoolObserver* const observer_;
  const std::uint64_t uid_;  // tells this pool apart in thread-local caches
  const std::size_t vm_granularity_;
  // The upstream refused a map with an error other than out-of-memory
  // (CUDA_ERROR_NOT_SUPPORTED from cuMemCreate under an interposer such as
  // HAMi-core, or a device that advertises VMM but cannot back it): no
  // expandable growth from then on; ordinary segments serve large blocks.
  std::atomic<bool> vmm_refused_{false};
  const bool aliasing_;  // upstream_.supports_aliasing()
  const bool stream_ordered_segments_;  // upstream_.has_stream_ordered_segments()

  // Lock order: slow_mu_ → streams_mu_ → one sub-pool's mu → segments_mu_ →
  // upstream_mu_. Never waits for a second sub-pool lock while holding one:
  // release_elsewhere only tries one (try_lock), so it cannot deadlock.
  std::mutex slow_mu_;
  mutable std::mutex streams_mu_;
  mutable std::mutex segments_mu_;
  std::mutex upstream_mu_;

  // Every sub-pool ever made, append-only, so stats() and the ladder can walk
  // them without the stream lock.
  std::array<std::atomic<SubPool*>, kMaxSubPools> sub_pools_{};
  std::atomic<std::size_t> sub_pool_count_{0};
  std::vector<std::unique_ptr<SubPool>> owned_sub_pools_;  // streams_mu_
  std::vector<SubPool*> device_shards_;                    // small blocks, per thread
  SubPool* device_large_ = nullptr;
  std::unordered_map<StreamHandle, SubPool*> streams_;     // streams_mu_
  std::vector<SubPool*> orphans_;  // streams_mu_: destroyed streams' sub-pools
  std::atomic<std::uint64_t> stream_generation_{1};

  detail::SegmentMap segment_map_;
  std::vector<std::unique_ptr<Segment[]>> segment_chunks_;  // segments_mu_
  Segment* spare_segments_ = nullptr;                       // segments_mu_

  // Sync tickets. A block freed when sync_begun_ was T may be handed out
  // again once reuse_done_ > T (a synchronisation, or an ordering of the
  // device, began after the free), and its pages unmapped once sync_done_ >
  // T (such a synchronisation or ordering has completed on the device).
  std::atomic<std::uint64_t> sync_begun_{0};
  std::atomic<std::uint64_t> reuse_done_{0};
  std::atomic<std::uint64_t> sync_done_{0};
  // Orderings whose fences have not been seen complete, oldest first
  // (upstream_mu_). A later one completes only after the earlier ones.
  struct Ordering {
    std::uint64_t ticket;
    FenceHandle fence;
  };
  std::vector<Ordering> orderings_;

  std::atomic<std::size_t> reserved_total_{0};
  std::atomic<std::size_t> peak_reserved_{0};
  std::atomic<std::uint64_t> upstream_allocs_{0};
  std::atomic<std::uint64_t> upstream_frees_{0};
  std::atomic<std::uint64_t> synchronizes_{0};
  std::atomic<std::uint64_t> orderings_made_{0};
  std::atomic<std::uint64_t> ooms_{0};
  std::size_t device_total_ = 0;  // upstream_mu_; 0 until asked
};

// x + y, or kUnlimited where that would overflow.
inline std::size_t saturating_add(std::size_t a, std::size_t b) { return a > kUnlimited - b ? kUnlimited : a + b; }

// Every sub-pool made so far, without the stream lock (sub_pools_ is
// append-only).
template <class Fn>
void DevicePool::Impl::for_each_sub_pool(Fn fn) const {
  const std::size_t n = sub_pool_count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) fn(*sub_pools_[i].load(std::memory_order_acquire));
}

// Inline: finish() asks it for every allocation.
inline bool DevicePool::Impl::survives_reset(const SubPool& sp, const Segment* seg) const {
  // Stream-ordered memory and cuMemCreate'd pages are not the context's
  // (upstream.h cites CUDA 13's notes). An expandable range of a device-wide
  // sub-pool survives too, but its blocks were cudaMalloc's, which the
  // application must see destroyed: device_reset gives it back.
  return seg->stream_ordered_memory || (seg->expandable && sp.stream_ordered);
}

}  // namespace cumemtrace::pool
