// The instrumented caching pool of one CUDA device: pure C++, memory from an
// injected Upstream (upstream.h), policy from PoolConfig (pool_config.h),
// facts for the trace through PoolStats / PoolObserver (pool_stats.h).
//
// Design (why it is shaped like this):
// - Sub-pools. Blocks live in segments; each segment belongs to one sub-pool
//   and each sub-pool has its own lock, free index and live table. There is a
//   sub-pool per stream for stream-ordered calls (cudaMallocAsync), because a
//   block freed in stream order is safe at once for later work on the same
//   stream but not for other streams. The device-wide calls (cudaMalloc) use
//   `device_shards` sub-pools for small blocks, picked per thread, plus one
//   for larger blocks, so threads do not serialise on one lock. The hit path
//   takes exactly one uncontended lock: no global lock, no shared counter.
// - Finding a pointer's segment is lock-free: a radix map over 2 MiB pages,
//   written only when segments come and go. Segment records are never freed
//   while the pool lives (only recycled), so a racing lookup reads stale but
//   valid memory and re-checks under the sub-pool's lock.
// - Best fit in O(log n): each sub-pool keeps free blocks in ordered sets by
//   (size, address), one for small-segment blocks and one for the others.
//   Blocks that split or merge keep their place in the set when their new key
//   still sorts between their neighbours (the common case), so a cache hit
//   usually costs no tree rebalancing and no heap allocation.
// - Safety: a block freed with cudaFree semantics is pending until a device
//   synchronisation that began after the free has completed (a ticket
//   counter; one synchronise releases every pending block of every sub-pool).
//   A block freed in stream order on its own stream is free at once; freed on
//   another stream it waits for a fence recorded on that stream. Memory
//   cached for one stream reaches another only through the upstream: whole
//   free segments (or free pages of expandable ones) are given back, and the
//   upstream's release waits for the device, when the ladder or the tight
//   policy needs the room.
// - Out-of-memory ladder (DESIGN.md): best fit → reclaim completed pending
//   frees (one batched synchronise when pending memory could serve the
//   request, before growing, so a malloc/free loop never grows without
//   bound) → grow → release whole free segments of every sub-pool and retry
//   → synchronise, release everything cached and retry → fail with the
//   upstream's code and an OomReport.
// - Policy (pool_config.h): PyTorch's size classes and segment sizes; the
//   default `tight` policy also gives cached memory back before growth would
//   raise the peak of reserved memory, its own sub-pool's first, then any
//   other sub-pool's whose lock is free (so memory cached for one stream or
//   size class serves another); `expandable_segments` (the default where the
//   upstream has virtual memory) puts large blocks in one growing virtual
//   range per sub-pool.
// - Questions about an allocation (find_containing): the live block holding
//   an address, so the hooks answer cuMemGetAddressRange, pointer attributes
//   and IPC handles for the program's block, never the segment around it.
//
// How libcumemtrace.so drives it (one DevicePool per device, made on first
// use over an Upstream of the real driver):
//   cudaMalloc       → allocate(size); the alloc event gets `block`. On
//                      failure: the oom event from Allocation::oom, then the
//                      upstream's code is returned.
//   cudaFree(p)      → p == 0: forward (it creates the context). Else the
//                      pool that owns(p): free(p). not_owned: forward to the
//                      real cudaFree; invalid_pointer: cudaErrorInvalidValue,
//                      never forwarded.
//   cudaMallocAsync  → allocate_async(size, stream)  } a per-thread default
//   cudaFreeAsync    → free_async(p, stream)         } stream needs a handle
//                                                      unique to its thread
//   cudaStreamDestroy → stream_destroyed(stream), before the real call
//   cudaDeviceSynchronize → t = sync_ticket(); real call; device_synchronized(t)
//   cudaMemGetInfo   → application_memory_info(real free, real total)
//   cudaDeviceReset  → device_reset() once the real reset succeeded; the
//                      alloc event's context_bound is !survives_reset
//   `pool` samples   → stats(); fragmentation_of(stats)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>

#include "cumemtrace/pool/pool_config.h"
#include "cumemtrace/pool/pool_stats.h"
#include "cumemtrace/pool/upstream.h"

namespace cumemtrace::pool {

// An OomReport that exists only after a failure, like std::optional but
// with its storage left untouched when empty: GCC fills a std::optional's
// whole storage with zeros when it constructs an empty one, and those 150
// bytes cost a tenth of a cache hit (pool_bench).
class MaybeOomReport {
 public:
  MaybeOomReport() {}
  MaybeOomReport(const OomReport& r) : present_(true) { new (&report_) OomReport(r); }  // NOLINT: implicit
  MaybeOomReport(const MaybeOomReport& o) : present_(o.present_) {
    if (present_) new (&report_) OomReport(o.report_);
  }
  MaybeOomReport& operator=(const MaybeOomReport& o) {
    present_ = o.present_;
    if (present_) new (&report_) OomReport(o.report_);
    return *this;
  }
  ~MaybeOomReport() {}

  explicit operator bool() const { return present_; }
  bool has_value() const { return present_; }
  const OomReport& operator*() const { return report_; }
  const OomReport* operator->() const { return &report_; }
  const OomReport& value() const {
    if (!present_) throw std::bad_optional_access();
    return report_;
  }

 private:
  static_assert(std::is_trivially_destructible_v<OomReport>);
  bool present_ = false;
  union {
    OomReport report_;
  };
};

// The result of an allocation. On failure `result` is the upstream's error
// (out_of_memory or error, with its code), ptr is 0, and for out_of_memory
// `oom` explains it.
struct Allocation {
  DevicePtr ptr = 0;
  std::size_t block = 0;  // bytes set aside for it (the trace's `block`)
  UpstreamResult result;
  MaybeOomReport oom;  // set when result.status == out_of_memory
  // The block lies in memory a device reset does not free (a stream's
  // sub-pool over Upstream::allocate_stream_ordered, or its expandable
  // range): it stays live, and freeable, across device_reset().
  bool survives_reset = false;

  bool ok() const { return result.ok(); }
};

enum class FreeStatus : std::uint8_t {
  ok,
  // Not inside any segment of this pool: the caller forwards it (to another
  // device's pool, then to the real free).
  not_owned,
  // Inside this pool's memory but not the start of a live block (a double
  // free, or a pointer into a block): never forward it — the real free would
  // release a whole segment under the pool. cudaFree returns
  // cudaErrorInvalidValue for such pointers.
  invalid_pointer,
};

struct FreeResult {
  FreeStatus status = FreeStatus::not_owned;
  std::size_t size = 0;   // the size the application asked for at allocation
  std::size_t block = 0;  // the block that is now free or pending
  bool stream_ordered = false;  // it was allocated with allocate_async
};

// A live block's facts, for a caller that needs them without freeing.
struct BlockInfo {
  std::size_t size = 0;
  std::size_t block = 0;
  bool stream_ordered = false;
  StreamHandle stream = 0;
};

// The live block that contains an address, as the driver's questions about
// an allocation must see it (cuMemGetAddressRange, pointer attributes, IPC
// handles): the block is the application's allocation, not the segment.
enum class Containing : std::uint8_t {
  not_owned,  // not this pool's memory: the driver answers
  not_live,   // pool memory, but in no live block (freed, or never handed out)
  live,
};

struct ContainingBlock {
  DevicePtr base = 0;          // the block's start: what the allocation call returned
  std::size_t size = 0;        // what the application asked for
  DevicePtr segment_base = 0;  // the driver allocation or mapped range it lies in
  // An IPC handle of this memory (cuIpcGetMemHandle describes the driver
  // allocation containing the pointer, and its opener gets that
  // allocation's base) opens exactly at `base`: the block starts an
  // ordinary segment from Upstream::allocate(). Not for expandable ranges
  // (cuMemCreate memory has no legacy IPC handle) nor stream-ordered
  // segments (pool memory of cuMemAllocAsync needs cuMemPoolExportPointer).
  bool shareable = false;
};

// The application's view of cudaMemGetInfo.
struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

class DevicePool {
 public:
  // `upstream` and `observer` (may be null) must outlive the pool.
  DevicePool(Upstream& upstream, const PoolConfig& config, int device = 0,
             PoolObserver* observer = nullptr);
  // Forgets everything without calling the upstream: at process exit the
  // driver reclaims the memory, and calling CUDA from a destructor is unsafe.
  // Call release_cached() first to give memory back while running.
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // cudaMalloc / cuMemAlloc: not stream-ordered. size 0 succeeds with ptr 0
  // and touches nothing (what cudaMalloc does).
  Allocation allocate(std::size_t size);
  // cudaMallocAsync / cuMemAllocAsync on `stream`.
  Allocation allocate_async(std::size_t size, StreamHandle stream);

  // cudaFree: the block stays pending until a device synchronisation that
  // began after this call has completed. ptr 0 is not_owned (the caller
  // still forwards cudaFree(NULL): it creates the context).
  FreeResult free(DevicePtr ptr);
  // cudaFreeAsync(ptr, stream): free at once for `stream` when the block was
  // allocated on it; otherwise pending behind a fence recorded on `stream`.
  FreeResult free_async(DevicePtr ptr, StreamHandle stream);

  // Whether ptr lies inside this pool's memory (lock-free).
  bool owns(DevicePtr ptr) const;
  // The live block starting at ptr, if any.
  bool find(DevicePtr ptr, BlockInfo* info) const;
  // The live block containing ptr (any address inside it), locking its
  // sub-pool; walks the segment's blocks, so for rare queries only.
  Containing find_containing(DevicePtr ptr, ContainingBlock* out) const;
  // The block size an allocation of `size` would get from a fresh segment.
  std::size_t block_size_for(std::size_t size) const;

  // The application synchronised the whole device itself
  // (cudaDeviceSynchronize): take a ticket before calling the real function
  // and hand it back after it succeeded, so blocks freed before the ticket
  // become reusable without another synchronise.
  std::uint64_t sync_ticket() const;
  void device_synchronized(std::uint64_t ticket);

  // The stream is being destroyed (cudaStreamDestroy): its cached blocks can
  // no longer be reused in its order; they become pending like cudaFree'd
  // blocks, and a new stream with the same handle starts fresh.
  void stream_destroyed(StreamHandle stream);

  // cudaMemGetInfo as the application should see it: the driver's free plus
  // memory the pool caches but nobody uses, never more than total.
  MemoryInfo application_memory_info(std::size_t driver_free, std::size_t driver_total) const;

  // Trim: synchronise, then give every whole free segment back to the
  // upstream (emptyCache). Returns the upstream's first error, if any.
  UpstreamResult release_cached();
  // The device was reset (cudaDeviceReset, cuDevicePrimaryCtxReset): the
  // pool keeps exactly what real CUDA keeps. Segments from
  // Upstream::allocate() are dropped without calling the upstream (the reset
  // freed them) and their live pointers become not_owned; a device-wide
  // expandable range, which the reset leaves mapped, is unmapped and given
  // back. Segments of stream sub-pools from allocate_stream_ordered() (and
  // their expandable ranges) survive with their live blocks, which are then
  // freed as a destroyed stream's are (every stream died with the context).
  // Pending frees become free (the work they waited for is gone). The
  // observer sees a segment_free for everything dropped.
  void device_reset();

  // Cheap: sums a few relaxed counters per sub-pool, takes no lock.
  PoolStats stats() const;
  // Bytes reserved by the sub-pools of stream-ordered calls (the memory the
  // pool holds for cudaMallocAsync), the same way.
  std::size_t stream_ordered_reserved() const;
  FragmentationMetrics fragmentation() const { return fragmentation_of(stats()); }

  const PoolConfig& config() const;
  int device() const;

  // For tests: walks every structure and checks the invariants (blocks tile
  // their segments, no two free neighbours, 512-byte alignment, index and
  // counters agree). Slow; returns "" or the first violation found.
  std::string check_invariants() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumemtrace::pool
