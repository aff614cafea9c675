// The pool's only door to the device: an interface injected per device, so
// the same pool runs inside libcumemtrace.so (over the real driver), inside
// `cumemtrace replay` (over a simulated capacity) and in unit tests (over a
// fake with traps). No CUDA header is needed to implement or use it.
//
// Error codes are opaque: `code` is whatever the implementation's API
// returned (a cudaError_t, a CUresult, a test's number). The pool never
// invents one; when it fails a request it hands back the code of the upstream
// call that failed, so the application sees exactly the real runtime's error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cumemtrace::pool {

// A device address (a CUdeviceptr / void* bit pattern).
using DevicePtr = std::uintptr_t;
// A stream handle's bit pattern (cudaStream_t). Opaque to the pool: it only
// compares handles and passes them back to the upstream.
using StreamHandle = std::uintptr_t;
// An event recorded on a stream (a cudaEvent_t's bit pattern).
using FenceHandle = std::uintptr_t;

enum class UpstreamStatus : std::uint8_t {
  ok,
  out_of_memory,  // the device has no room: the pool's ladder may retry
  error,          // anything else: passed straight back to the caller
};

struct UpstreamResult {
  UpstreamStatus status = UpstreamStatus::ok;
  int code = 0;  // the upstream API's own code, meaningful when !ok()

  bool ok() const { return status == UpstreamStatus::ok; }
  static UpstreamResult success() { return {}; }
  static UpstreamResult out_of_memory(int code) { return {UpstreamStatus::out_of_memory, code}; }
  static UpstreamResult failure(int code) { return {UpstreamStatus::error, code}; }
};

enum class FenceState : std::uint8_t { complete, pending, error };

// One device's memory, as the pool needs it. Calls come from the pool's slow
// paths only (growth, release, reclaim, out-of-memory, a free on another
// stream), never from a cache hit, so a virtual call is cheap enough. The
// pool may call from any thread that calls into it, but never two calls at
// once on one upstream: an implementation needs no lock of its own.
class Upstream {
 public:
  virtual ~Upstream() = default;

  // Obtain `size` bytes (cuMemAlloc / cudaMalloc). On success *ptr is set.
  virtual UpstreamResult allocate(std::size_t size, DevicePtr* ptr) = 0;
  // Give back a segment obtained from allocate(). Must not let the memory be
  // reused before device work issued earlier completed (the real cudaFree
  // synchronises, so it qualifies).
  virtual UpstreamResult release(DevicePtr ptr, std::size_t size) = 0;
  // The driver's view of the device (cuMemGetInfo): free and total bytes.
  virtual UpstreamResult memory_info(std::size_t* free_bytes, std::size_t* total_bytes) = 0;
  // Wait for all work on the device (cudaDeviceSynchronize). Afterwards every
  // block freed before the call started is safe to hand out again.
  virtual UpstreamResult synchronize() = 0;
  // The code this upstream reports for out-of-memory (cudaErrorMemoryAllocation
  // and CUDA_ERROR_OUT_OF_MEMORY are both 2). Used only when the pool itself
  // runs out of host memory for its records, or for a size no device holds.
  virtual int out_of_memory_code() { return 2; }

  // Stream-ordered frees: record an event on `stream` (cudaEventRecord on a
  // cudaEventDisableTiming event), ask whether it has completed
  // (cudaEventQuery), and destroy it. Used when a block freed on one stream
  // may be reused on another.
  virtual UpstreamResult record_fence(StreamHandle stream, FenceHandle* fence) = 0;
  virtual FenceState query_fence(FenceHandle fence) = 0;
  virtual void destroy_fence(FenceHandle fence) = 0;

  // --- Stream-ordered segments (optional) ---
  // Where a device reset leaves memory alive, the sub-pools of stream-ordered
  // calls take their segments from here, so that the pool's memory survives
  // exactly what the application's own would have. CUDA 13's
  // cuda_runtime_api.h: "cudaDeviceReset() will not destroy memory
  // allocations by cudaMallocAsync() and cudaMallocFromPoolAsync(). These
  // memory allocations need to be destroyed explicitly"; cuda.h: "cuCtxDestroy()
  // will not destroy memory allocations by cuMemCreate(), cuMemAllocAsync()
  // and cuMemAllocFromPoolAsync(). These memory allocations are not
  // associated with any CUDA context"; and the pool they come from outlives
  // the reset too (cudaMemPoolDestroy: "A device's default memory pool
  // cannot be destroyed"). False: allocate() serves every sub-pool and a
  // reset frees all of it.
  virtual bool has_stream_ordered_segments() { return false; }
  // Obtain `size` bytes in `stream`'s order (cuMemAllocAsync from the pool
  // current to the stream's device: the pool the application's
  // cudaMallocAsync would have used). Only called when
  // has_stream_ordered_segments().
  virtual UpstreamResult allocate_stream_ordered(std::size_t size, StreamHandle /*stream*/, DevicePtr* ptr) {
    return allocate(size, ptr);
  }
  // Give back a segment from allocate_stream_ordered(), with release()'s
  // safety rule. Its stream may be gone (destroyed, or a device reset).
  virtual UpstreamResult release_stream_ordered(DevicePtr ptr, std::size_t size) { return release(ptr, size); }

  // --- Virtual memory, for expandable segments (optional) ---
  // Page size for map/unmap (cuMemGetAllocationGranularity, recommended);
  // 0 means virtual memory is not supported and expandable mode falls back
  // to ordinary segments.
  virtual std::size_t vm_granularity() { return 0; }
  // Reserve an address range without memory (cuMemAddressReserve).
  virtual UpstreamResult reserve_range(std::size_t /*size*/, DevicePtr* /*base*/) {
    return UpstreamResult::failure(-1);
  }
  // Return a reserved range; everything in it was unmapped before.
  virtual UpstreamResult release_range(DevicePtr /*base*/, std::size_t /*size*/) {
    return UpstreamResult::failure(-1);
  }
  // Back [addr, addr+size) with new physical memory and make it accessible
  // (cuMemCreate + cuMemMap + cuMemSetAccess). addr and size are multiples of
  // vm_granularity(). out_of_memory when the device is full.
  virtual UpstreamResult map(DevicePtr /*addr*/, std::size_t /*size*/) {
    return UpstreamResult::failure(-1);
  }
  // Undo map() for exactly a range earlier mapped, or a granularity-aligned
  // part of one (cuMemUnmap + cuMemRelease). The pool calls it only for
  // pages no device work uses any more (their last use completed, as a
  // fence or a synchronisation showed), so it must not wait for the device
  // itself: cuMemUnmap does not wait for queued kernels either (an unmap
  // under queued work is an illegal memory access, pytorch/pytorch#196258),
  // and a wait here would stop the host from running ahead of the GPU.
  virtual UpstreamResult unmap(DevicePtr /*addr*/, std::size_t /*size*/) {
    return UpstreamResult::failure(-1);
  }
  // The same, but the physical memory is kept for the next map() (which then
  // needs no cuMemCreate, and this no cuMemRelease): how the pool moves
  // pages from free holes to where a request needs them. Memory kept and not
  // mapped again goes back with drop_kept(). Default: a plain unmap.
  virtual UpstreamResult unmap_keep(DevicePtr addr, std::size_t size) { return unmap(addr, size); }
  virtual void drop_kept() {}
  // Bytes kept by unmap_keep() and not mapped again yet: device memory that
  // the driver's free figure does not show as free, but map() can use.
  virtual std::size_t kept_bytes() { return 0; }
  // An aliasing move: like unmap_keep(), the physical memory behind [addr,
  // addr+size) is kept for the next map(), but this mapping of it stays, for
  // device work queued before the move that may still use it here (the
  // memory then has two addresses, as GMLake's stitched blocks do). The
  // pool hands the memory out again only where that is safe in device order
  // (the same stream, or after an ordering), and calls unmap_alias() once
  // the queued work completed: cuMemUnmap of this mapping, the memory stays
  // with its new one. Memory kept this way and dropped (drop_kept) is freed
  // only when its old mapping goes. supports_aliasing() false: the pool
  // moves only pages no queued work may use.
  virtual bool supports_aliasing() { return false; }
  virtual UpstreamResult alias_keep(DevicePtr /*addr*/, std::size_t /*size*/) { return UpstreamResult::failure(-1); }
  virtual UpstreamResult unmap_alias(DevicePtr /*addr*/, std::size_t /*size*/) { return UpstreamResult::failure(-1); }

  // --- Ordering without waiting (optional) ---
  // Makes all device work issued after this call run after all device work
  // issued before it, on every stream the pool's memory may be used on,
  // without making the host wait (on a GPU: an event on each stream that the
  // legacy default stream does not order, waited for by the legacy stream,
  // whose own event each of those streams then waits for; CUDA Runtime API,
  // "Stream synchronization behavior"). A block freed with cudaFree before
  // the call can then be handed out again at once: whatever uses it next
  // runs after whatever used it before, which is all that cudaFree's own
  // synchronisation guaranteed. On success *fence completes (query_fence)
  // when all the earlier work has finished, and later fences complete only
  // after earlier ones; the pool destroys it. A failure means the upstream
  // cannot order every stream here, and the pool synchronises instead.
  virtual UpstreamResult order_device(FenceHandle* /*fence*/) { return UpstreamResult::failure(-1); }
};

}  // namespace cumemtrace::pool
