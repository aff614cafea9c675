// Driver API memory functions (libcuda.so.1): the exported hooks a program
// linked to the driver binds to, and the wrappers cuGetProcAddress and dlsym
// hand out (hooks/entry_points.cpp, hooks/dlsym.cpp). Every ABI the driver
// exports is hooked: the legacy 32-bit cuMemAlloc/cuMemFree/cuMemAllocPitch/
// cuMemAllocHost/cuMemGetInfo (CUDA < 3.2) next to their _v2, and the
// per-thread-default-stream (_ptsz) forms of the stream-ordered calls.
//
// Virtual memory (PyTorch's expandable segments, NCCL): cuMemCreate is an
// `alloc` of kind `vmm` (ptr = the handle; physical memory the process holds)
// and cuMemRelease its `free`, once every reference is released
// (cuMemRetainAllocationHandle adds one). What is usable at an address is
// what cuMemMap mapped: each mapping is a `segment_alloc` (api cuMemMap),
// each cuMemUnmap writes a `segment_free` per range. So `reserved` is mapped
// memory, and a handle released while still mapped stays reserved until it
// is unmapped, as the driver keeps it (cuMemRelease: "freed when all
// mappings are unmapped"). cuMemAddressFree is not hooked: the driver refuses
// to free a reservation with a mapping left in it (tests/apps/sim_driver_probe
// on an H100), so it never unmaps anything.
#define __CUDA_API_VERSION_INTERNAL 1  // declares the legacy and _ptsz ABIs too
#include <cuda.h>

#include <array>
#include <cstdint>

#include "hooks/hook_support.h"
#include "hooks/tables.h"
#include "hooks/real_cuda.h"

using cumemtrace::format::MemoryKind;
using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

static_assert(CUDA_SUCCESS == 0, "allocate()/release() take 0 for success");

namespace {

// No driver defines the function: the program reached our export without a
// libcuda.so.1 loaded. "A link to a shared object failed to resolve."
constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;

// ---- device memory ----------------------------------------------------------

CUresult mem_alloc_v2(decltype(&::cuMemAlloc_v2) real, CUdeviceptr* dptr, size_t size) {
  if (!real) return kNoDriver;
  return allocate<CUresult>({.api = "cuMemAlloc_v2", .size = size, .pooled = true}, dptr,
                            [&](std::size_t n) { return obtained(real(dptr, n), dptr); });
}

// Never from the caching pool: a 32-bit CUdeviceptr_v1 cannot hold its
// addresses (the driver serves these from low memory).
CUresult mem_alloc_v1(decltype(&::cuMemAlloc) real, CUdeviceptr_v1* dptr, unsigned int size) {
  if (!real) return kNoDriver;
  return allocate<CUresult>({.api = "cuMemAlloc", .size = size}, [&](std::size_t) {
    return obtained(real(dptr, size), dptr);
  });
}

CUresult mem_alloc_pitch_v2(decltype(&::cuMemAllocPitch_v2) real, CUdeviceptr* dptr, size_t* pitch,
                            size_t width, size_t height, unsigned int element_size) {
  if (!real) return kNoDriver;
  // The allocation spans pitch × height bytes, all addressable by the program.
  return allocate<CUresult>({.api = "cuMemAllocPitch_v2", .size = width * height}, [&](std::size_t) {
    const CUresult rc = real(dptr, pitch, width, height, element_size);
    return obtained(rc, dptr, rc == CUDA_SUCCESS && pitch ? *pitch * height : 0);
  });
}

CUresult mem_alloc_pitch_v1(decltype(&::cuMemAllocPitch) real, CUdeviceptr_v1* dptr,
                            unsigned int* pitch, unsigned int width, unsigned int height,
                            unsigned int element_size) {
  if (!real) return kNoDriver;
  return allocate<CUresult>(
      {.api = "cuMemAllocPitch", .size = std::size_t{width} * height}, [&](std::size_t) {
        const CUresult rc = real(dptr, pitch, width, height, element_size);
        return obtained(rc, dptr, rc == CUDA_SUCCESS && pitch ? std::size_t{*pitch} * height : 0);
      });
}

CUresult mem_alloc_managed(decltype(&::cuMemAllocManaged) real, CUdeviceptr* dptr, size_t size,
                           unsigned int flags) {
  if (!real) return kNoDriver;
  return allocate<CUresult>({.api = "cuMemAllocManaged", .kind = MemoryKind::managed, .size = size},
                            [&](std::size_t n) { return obtained(real(dptr, n, flags), dptr); });
}

CUresult mem_free_v2(decltype(&::cuMemFree_v2) real, CUdeviceptr dptr) {
  if (!real) return kNoDriver;
  return release<CUresult>({.api = "cuMemFree_v2", .releases = Releases::device, .ptr = dptr},
                           [&] { return real(dptr); }, [] { return CUDA_ERROR_INVALID_VALUE; });
}

CUresult mem_free_v1(decltype(&::cuMemFree) real, CUdeviceptr_v1 dptr) {
  if (!real) return kNoDriver;
  return release<CUresult>({.api = "cuMemFree", .releases = Releases::device, .ptr = dptr},
                           [&] { return real(dptr); }, [] { return CUDA_ERROR_INVALID_VALUE; });
}

// ---- pinned host memory -----------------------------------------------------

CUresult mem_alloc_host_v2(decltype(&::cuMemAllocHost_v2) real, void** pp, size_t size) {
  if (!real) return kNoDriver;
  return allocate<CUresult>({.api = "cuMemAllocHost_v2", .kind = MemoryKind::host_pinned, .size = size},
                            [&](std::size_t n) { return obtained(real(pp, n), pp); });
}

CUresult mem_alloc_host_v1(decltype(&::cuMemAllocHost) real, void** pp, unsigned int size) {
  if (!real) return kNoDriver;
  return allocate<CUresult>({.api = "cuMemAllocHost", .kind = MemoryKind::host_pinned, .size = size},
                            [&](std::size_t) { return obtained(real(pp, size), pp); });
}

CUresult mem_host_alloc(decltype(&::cuMemHostAlloc) real, void** pp, size_t size, unsigned int flags) {
  if (!real) return kNoDriver;
  return allocate<CUresult>({.api = "cuMemHostAlloc", .kind = MemoryKind::host_pinned, .size = size},
                            [&](std::size_t n) { return obtained(real(pp, n, flags), pp); });
}

CUresult mem_free_host(decltype(&::cuMemFreeHost) real, void* p) {
  if (!real) return kNoDriver;
  return release<CUresult>({.api = "cuMemFreeHost",
                            .releases = Releases::host_pinned,
                            .ptr = reinterpret_cast<std::uintptr_t>(p)},
                           [&] { return real(p); });
}

// ---- stream-ordered allocation ----------------------------------------------

template <bool PerThread>
CUresult mem_alloc_async(decltype(&::cuMemAllocAsync) real, CUdeviceptr* dptr, size_t size,
                         CUstream stream) {
  if (!real) return kNoDriver;
  return allocate<CUresult>({.api = PerThread ? "cuMemAllocAsync_ptsz" : "cuMemAllocAsync",
                             .size = size,
                             .stream = stream_handle(stream, PerThread),
                             .context_bound = false,
                             .pooled = true},
                            dptr, [&](std::size_t n) { return obtained(real(dptr, n, stream), dptr); });
}

template <bool PerThread>
CUresult mem_alloc_from_pool_async(decltype(&::cuMemAllocFromPoolAsync) real, CUdeviceptr* dptr,
                                   size_t size, CUmemoryPool pool, CUstream stream) {
  if (!real) return kNoDriver;
  // The pool's device, which need not be the current one.
  return allocate<CUresult>(
      {.api = PerThread ? "cuMemAllocFromPoolAsync_ptsz" : "cuMemAllocFromPoolAsync",
       .size = size,
       .stream = stream_handle(stream, PerThread),
       .context_bound = false,
       .dev = kDeviceOfPointer},
      [&](std::size_t n) { return obtained(real(dptr, n, pool, stream), dptr); });
}

template <bool PerThread>
CUresult mem_free_async(decltype(&::cuMemFreeAsync) real, CUdeviceptr dptr, CUstream stream) {
  if (!real) return kNoDriver;
  // Recorded when the program calls it: from then on the program may not
  // use the memory, and the address can only be reused after it.
  return release<CUresult>({.api = PerThread ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync",
                            .releases = Releases::device,
                            .ptr = dptr,
                            .stream = stream_handle(stream, PerThread)},
                           [&] { return real(dptr, stream); },
                           // The real refusal: in a capture it also invalidates it.
                           [&] { return real(reinterpret_cast<CUdeviceptr>(not_a_device_pointer()), stream); });
}

// ---- virtual memory management ----------------------------------------------

CUresult mem_create(decltype(&::cuMemCreate) real, CUmemGenericAllocationHandle* handle, size_t size,
                    const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!real) return kNoDriver;
  const bool on_device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  return allocate<CUresult>({.api = "cuMemCreate",
                             .kind = MemoryKind::vmm,
                             .size = size,
                             .context_bound = false,
                             .dev = on_device ? prop->location.id : kCurrentDevice},
                            [&](std::size_t n) { return obtained(real(handle, n, prop, flags), handle); });
}

CUresult mem_release(decltype(&::cuMemRelease) real, CUmemGenericAllocationHandle handle) {
  if (!real) return kNoDriver;
  return release<CUresult>({.api = "cuMemRelease", .releases = Releases::vmm_handle, .ptr = handle},
                           [&] { return real(handle); });
}

CUresult mem_retain_allocation_handle(decltype(&::cuMemRetainAllocationHandle) real,
                                      CUmemGenericAllocationHandle* handle, void* addr) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  const CUresult rc = real(handle, addr);
  if (guard.outermost() && rc == CUDA_SUCCESS && handle) note_vmm_retain(*handle);
  return rc;
}

CUresult mem_map(decltype(&::cuMemMap) real, CUdeviceptr ptr, size_t size, size_t offset,
                 CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  const CUresult rc = real(ptr, size, offset, handle, flags);
  if (guard.outermost() && rc == CUDA_SUCCESS) note_map("cuMemMap", ptr, size, handle);
  return rc;
}

CUresult mem_unmap(decltype(&::cuMemUnmap) real, CUdeviceptr ptr, size_t size) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  // Before the real call, so the segment_free precedes any remapping.
  if (guard.outermost()) note_unmap(ptr, size);
  return real(ptr, size);
}

// ---- streams and synchronisation (what the caching pool must know) ----------

template <int Abi>
CUresult stream_destroy(decltype(&::cuStreamDestroy_v2) real, CUstream stream) {
  if (!real) return kNoDriver;
  return destroy_stream<CUresult>(reinterpret_cast<std::uintptr_t>(stream), [&] { return real(stream); });
}

CUresult ctx_synchronize_v1(decltype(&::cuCtxSynchronize) real) {
  if (!real) return kNoDriver;
  return synchronize<CUresult>(nullptr, [&] { return real(); });
}

// CUDA 13: the context named (NULL: the current one).
CUresult ctx_synchronize_v2(decltype(&::cuCtxSynchronize_v2) real, CUcontext ctx) {
  if (!real) return kNoDriver;
  return synchronize<CUresult>(ctx, [&] { return real(ctx); });
}

// ---- memory information and resets ------------------------------------------

CUresult mem_get_info_v2(decltype(&::cuMemGetInfo_v2) real, size_t* free_bytes, size_t* total_bytes) {
  if (!real) return kNoDriver;
  return memory_info<CUresult>(free_bytes, total_bytes, [&] { return real(free_bytes, total_bytes); });
}

CUresult mem_get_info_v1(decltype(&::cuMemGetInfo) real, unsigned int* free_bytes,
                         unsigned int* total_bytes) {
  if (!real) return kNoDriver;
  return memory_info<CUresult>(free_bytes, total_bytes, [&] { return real(free_bytes, total_bytes); });
}

template <int Abi>
CUresult primary_ctx_reset(decltype(&::cuDevicePrimaryCtxReset_v2) real, CUdevice dev) {
  if (!real) return kNoDriver;
  return reset_device<CUresult>(Abi == 2 ? "cuDevicePrimaryCtxReset_v2" : "cuDevicePrimaryCtxReset",
                                [&] { return static_cast<int>(dev); }, [&] { return real(dev); });
}

}  // namespace

// ---- the exported hooks -------------------------------------------------------
// Each resolves the real function once (NextSymbol) and runs the same body as
// the wrappers above.

#define CUMEMTRACE_DRIVER_EXPORT(NAME, BODY, PARAMS, ...)                \
  static NextSymbol<decltype(&::NAME)> next_##NAME{#NAME};               \
  CUMEMTRACE_HOOK CUresult CUDAAPI NAME PARAMS {                         \
    note_hook_caller(__builtin_return_address(0));                       \
    return BODY(next_##NAME.get(), __VA_ARGS__);                         \
  }

CUMEMTRACE_DRIVER_EXPORT(cuMemAlloc_v2, mem_alloc_v2, (CUdeviceptr * dptr, size_t size), dptr, size)
CUMEMTRACE_DRIVER_EXPORT(cuMemAlloc, mem_alloc_v1, (CUdeviceptr_v1 * dptr, unsigned int size), dptr,
                         size)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocPitch_v2, mem_alloc_pitch_v2,
                         (CUdeviceptr * dptr, size_t* pitch, size_t width, size_t height,
                          unsigned int element_size),
                         dptr, pitch, width, height, element_size)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocPitch, mem_alloc_pitch_v1,
                         (CUdeviceptr_v1 * dptr, unsigned int* pitch, unsigned int width,
                          unsigned int height, unsigned int element_size),
                         dptr, pitch, width, height, element_size)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocManaged, mem_alloc_managed,
                         (CUdeviceptr * dptr, size_t size, unsigned int flags), dptr, size, flags)
CUMEMTRACE_DRIVER_EXPORT(cuMemFree_v2, mem_free_v2, (CUdeviceptr dptr), dptr)
CUMEMTRACE_DRIVER_EXPORT(cuMemFree, mem_free_v1, (CUdeviceptr_v1 dptr), dptr)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocHost_v2, mem_alloc_host_v2, (void** pp, size_t size), pp, size)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocHost, mem_alloc_host_v1, (void** pp, unsigned int size), pp, size)
CUMEMTRACE_DRIVER_EXPORT(cuMemHostAlloc, mem_host_alloc, (void** pp, size_t size, unsigned int flags),
                         pp, size, flags)
CUMEMTRACE_DRIVER_EXPORT(cuMemFreeHost, mem_free_host, (void* p), p)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocAsync, mem_alloc_async<false>,
                         (CUdeviceptr * dptr, size_t size, CUstream stream), dptr, size, stream)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocAsync_ptsz, mem_alloc_async<true>,
                         (CUdeviceptr * dptr, size_t size, CUstream stream), dptr, size, stream)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocFromPoolAsync, mem_alloc_from_pool_async<false>,
                         (CUdeviceptr * dptr, size_t size, CUmemoryPool pool, CUstream stream), dptr,
                         size, pool, stream)
CUMEMTRACE_DRIVER_EXPORT(cuMemAllocFromPoolAsync_ptsz, mem_alloc_from_pool_async<true>,
                         (CUdeviceptr * dptr, size_t size, CUmemoryPool pool, CUstream stream), dptr,
                         size, pool, stream)
CUMEMTRACE_DRIVER_EXPORT(cuMemFreeAsync, mem_free_async<false>, (CUdeviceptr dptr, CUstream stream),
                         dptr, stream)
CUMEMTRACE_DRIVER_EXPORT(cuMemFreeAsync_ptsz, mem_free_async<true>,
                         (CUdeviceptr dptr, CUstream stream), dptr, stream)
CUMEMTRACE_DRIVER_EXPORT(cuMemCreate, mem_create,
                         (CUmemGenericAllocationHandle * handle, size_t size,
                          const CUmemAllocationProp* prop, unsigned long long flags),
                         handle, size, prop, flags)
CUMEMTRACE_DRIVER_EXPORT(cuMemRelease, mem_release, (CUmemGenericAllocationHandle handle), handle)
CUMEMTRACE_DRIVER_EXPORT(cuMemRetainAllocationHandle, mem_retain_allocation_handle,
                         (CUmemGenericAllocationHandle * handle, void* addr), handle, addr)
CUMEMTRACE_DRIVER_EXPORT(cuMemMap, mem_map,
                         (CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags),
                         ptr, size, offset, handle, flags)
CUMEMTRACE_DRIVER_EXPORT(cuMemUnmap, mem_unmap, (CUdeviceptr ptr, size_t size), ptr, size)
CUMEMTRACE_DRIVER_EXPORT(cuMemGetInfo_v2, mem_get_info_v2, (size_t * free_bytes, size_t* total_bytes),
                         free_bytes, total_bytes)
CUMEMTRACE_DRIVER_EXPORT(cuMemGetInfo, mem_get_info_v1,
                         (unsigned int* free_bytes, unsigned int* total_bytes), free_bytes,
                         total_bytes)
CUMEMTRACE_DRIVER_EXPORT(cuDevicePrimaryCtxReset_v2, primary_ctx_reset<2>, (CUdevice dev), dev)
CUMEMTRACE_DRIVER_EXPORT(cuDevicePrimaryCtxReset, primary_ctx_reset<1>, (CUdevice dev), dev)
CUMEMTRACE_DRIVER_EXPORT(cuStreamDestroy_v2, stream_destroy<2>, (CUstream stream), stream)
CUMEMTRACE_DRIVER_EXPORT(cuStreamDestroy, stream_destroy<1>, (CUstream stream), stream)
CUMEMTRACE_DRIVER_EXPORT(cuCtxSynchronize_v2, ctx_synchronize_v2, (CUcontext ctx), ctx)

// cuCtxSynchronize takes no argument, which the export macro cannot say.
static NextSymbol<decltype(&::cuCtxSynchronize)> next_cuCtxSynchronize{"cuCtxSynchronize"};
CUMEMTRACE_HOOK CUresult CUDAAPI cuCtxSynchronize(void) {
  return ctx_synchronize_v1(next_cuCtxSynchronize.get());
}

// ---- the table for cuGetProcAddress and dlsym -----------------------------------

#define ROW(NAME, BASE, VERSION, PER_THREAD, BODY)                              \
  {#NAME, BASE, VERSION, PER_THREAD, &wrap_with<&BODY>, reinterpret_cast<void*>(&::NAME), \
   &resolved<next_##NAME>}

static const InterceptedSymbol kDriverSymbols[] = {
    ROW(cuMemAlloc, "cuMemAlloc", 2000, false, mem_alloc_v1),
    ROW(cuMemAlloc_v2, "cuMemAlloc", 3020, false, mem_alloc_v2),
    ROW(cuMemAllocPitch, "cuMemAllocPitch", 2000, false, mem_alloc_pitch_v1),
    ROW(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, false, mem_alloc_pitch_v2),
    ROW(cuMemAllocManaged, "cuMemAllocManaged", 6000, false, mem_alloc_managed),
    ROW(cuMemFree, "cuMemFree", 2000, false, mem_free_v1),
    ROW(cuMemFree_v2, "cuMemFree", 3020, false, mem_free_v2),
    ROW(cuMemAllocHost, "cuMemAllocHost", 2000, false, mem_alloc_host_v1),
    ROW(cuMemAllocHost_v2, "cuMemAllocHost", 3020, false, mem_alloc_host_v2),
    ROW(cuMemHostAlloc, "cuMemHostAlloc", 2020, false, mem_host_alloc),
    ROW(cuMemFreeHost, "cuMemFreeHost", 2000, false, mem_free_host),
    ROW(cuMemAllocAsync, "cuMemAllocAsync", 11020, false, mem_alloc_async<false>),
    ROW(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, true, mem_alloc_async<true>),
    ROW(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, false,
        mem_alloc_from_pool_async<false>),
    ROW(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, true,
        mem_alloc_from_pool_async<true>),
    ROW(cuMemFreeAsync, "cuMemFreeAsync", 11020, false, mem_free_async<false>),
    ROW(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, true, mem_free_async<true>),
    ROW(cuMemCreate, "cuMemCreate", 10020, false, mem_create),
    ROW(cuMemRelease, "cuMemRelease", 10020, false, mem_release),
    ROW(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, false,
        mem_retain_allocation_handle),
    ROW(cuMemMap, "cuMemMap", 10020, false, mem_map),
    ROW(cuMemUnmap, "cuMemUnmap", 10020, false, mem_unmap),
    ROW(cuMemGetInfo, "cuMemGetInfo", 2000, false, mem_get_info_v1),
    ROW(cuMemGetInfo_v2, "cuMemGetInfo", 3020, false, mem_get_info_v2),
    ROW(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000, false, primary_ctx_reset<1>),
    ROW(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, false, primary_ctx_reset<2>),
    ROW(cuStreamDestroy, "cuStreamDestroy", 2000, false, stream_destroy<1>),
    ROW(cuStreamDestroy_v2, "cuStreamDestroy", 4000, false, stream_destroy<2>),
    ROW(cuCtxSynchronize, "cuCtxSynchronize", 2000, false, ctx_synchronize_v1),
    ROW(cuCtxSynchronize_v2, "cuCtxSynchronize", 13000, false, ctx_synchronize_v2),
};

std::span<const InterceptedSymbol> cumemtrace::preload::driver_symbols() { return kDriverSymbols; }
