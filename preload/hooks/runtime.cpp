// CUDA runtime memory functions (libcudart.so): the exported hooks a program
// linked to the shared runtime binds to, and the wrappers dlsym hands out
// to frameworks that dlopen the runtime. Hooks never throw, never abort the
// host program, and return the real CUDA result code.
//
// Not intercepted: CUDA arrays and mipmapped arrays (cudaMallocArray,
// cudaMalloc3DArray, cudaMallocMipmappedArray: opaque texture storage, not
// linear memory), host registration (cudaHostRegister pins memory the
// program already has), IPC handles (cudaIpcOpenMemHandle maps another
// process's allocation) and graph memory nodes. The runtime reaches the
// driver for everything else, which the driver wrappers see.
#define __CUDA_API_VERSION_INTERNAL 1  // declares the _ptsz entry points too
#include <cuda_runtime_api.h>

#include <cstdint>

#include "hooks/hook_support.h"
#include "hooks/tables.h"
#include "hooks/real_cuda.h"

using cumemtrace::format::MemoryKind;
using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

static_assert(cudaSuccess == 0, "allocate()/release() take 0 for success");

namespace {

// No runtime defines the function: the program reached our export without a
// libcudart loaded.
constexpr cudaError_t kNoRuntime = cudaErrorSharedObjectSymbolNotFound;

// ---- device, managed and pinned host memory ---------------------------------

cudaError_t malloc_device(decltype(&::cudaMalloc) real, void** ptr, size_t size) {
  if (!real) return kNoRuntime;
  // A 0-byte request succeeds with NULL: nothing is recorded.
  return allocate<cudaError_t>(
      {.api = "cudaMalloc", .size = size, .pooled = true, .runtime = reinterpret_cast<const void*>(real)}, ptr,
      [&](std::size_t n) { return obtained(real(ptr, n), ptr); });
}

cudaError_t malloc_pitch(decltype(&::cudaMallocPitch) real, void** ptr, size_t* pitch, size_t width,
                         size_t height) {
  if (!real) return kNoRuntime;
  // The allocation spans pitch × height bytes, all addressable by the program.
  // Never from the caching pool: the pitch is the driver's choice (its
  // texture-pitch alignment, device-dependent), which the pool could only
  // guess; pitched memory is rare enough to pass through.
  return allocate<cudaError_t>({.api = "cudaMallocPitch", .size = width * height}, [&](std::size_t) {
    const cudaError_t rc = real(ptr, pitch, width, height);
    return obtained(rc, ptr, rc == cudaSuccess && pitch ? *pitch * height : 0);
  });
}

cudaError_t malloc_3d(decltype(&::cudaMalloc3D) real, cudaPitchedPtr* pitched, cudaExtent extent) {
  if (!real) return kNoRuntime;
  const std::size_t asked = extent.width * extent.height * extent.depth;
  return allocate<cudaError_t>({.api = "cudaMalloc3D", .size = asked}, [&](std::size_t) {
    const cudaError_t rc = real(pitched, extent);
    const bool made = rc == cudaSuccess && pitched;
    return obtained(rc, made ? &pitched->ptr : nullptr,
                    made ? pitched->pitch * extent.height * extent.depth : 0);
  });
}

cudaError_t malloc_managed(decltype(&::cudaMallocManaged) real, void** ptr, size_t size,
                           unsigned int flags) {
  if (!real) return kNoRuntime;
  return allocate<cudaError_t>({.api = "cudaMallocManaged", .kind = MemoryKind::managed, .size = size},
                               [&](std::size_t n) { return obtained(real(ptr, n, flags), ptr); });
}

// The runtime's answer to a pointer that is not a live allocation: its own
// code and last-error state, from a free of an address CUDA never gave out.
cudaError_t refused(cudaError_t rc) { return rc != cudaSuccess ? rc : cudaErrorInvalidValue; }

cudaError_t free_device(decltype(&::cudaFree) real, void* ptr) {
  if (!real) return kNoRuntime;
  return release<cudaError_t>({.api = "cudaFree",
                               .releases = Releases::device,
                               .ptr = reinterpret_cast<std::uintptr_t>(ptr)},
                              [&] { return real(ptr); }, [&] { return refused(real(not_a_device_pointer())); });
}

cudaError_t malloc_host(decltype(&::cudaMallocHost) real, void** ptr, size_t size) {
  if (!real) return kNoRuntime;
  return allocate<cudaError_t>({.api = "cudaMallocHost", .kind = MemoryKind::host_pinned, .size = size},
                               [&](std::size_t n) { return obtained(real(ptr, n), ptr); });
}

cudaError_t host_alloc(decltype(&::cudaHostAlloc) real, void** ptr, size_t size, unsigned int flags) {
  if (!real) return kNoRuntime;
  return allocate<cudaError_t>({.api = "cudaHostAlloc", .kind = MemoryKind::host_pinned, .size = size},
                               [&](std::size_t n) { return obtained(real(ptr, n, flags), ptr); });
}

cudaError_t free_host(decltype(&::cudaFreeHost) real, void* ptr) {
  if (!real) return kNoRuntime;
  return release<cudaError_t>({.api = "cudaFreeHost",
                               .releases = Releases::host_pinned,
                               .ptr = reinterpret_cast<std::uintptr_t>(ptr)},
                              [&] { return real(ptr); });
}

// ---- stream-ordered allocation ----------------------------------------------

template <bool PerThread>
cudaError_t malloc_async(decltype(&::cudaMallocAsync) real, void** ptr, size_t size,
                         cudaStream_t stream) {
  if (!real) return kNoRuntime;
  return allocate<cudaError_t>({.api = PerThread ? "cudaMallocAsync_ptsz" : "cudaMallocAsync",
                                .size = size,
                                .stream = stream_handle(stream, PerThread),
                                .context_bound = false,
                                .pooled = true,
                                .runtime = reinterpret_cast<const void*>(real)},
                               ptr, [&](std::size_t n) { return obtained(real(ptr, n, stream), ptr); });
}

template <bool PerThread>
cudaError_t malloc_from_pool_async(decltype(&::cudaMallocFromPoolAsync) real, void** ptr, size_t size,
                                   cudaMemPool_t pool, cudaStream_t stream) {
  if (!real) return kNoRuntime;
  // The pool's device, which need not be the current one.
  return allocate<cudaError_t>(
      {.api = PerThread ? "cudaMallocFromPoolAsync_ptsz" : "cudaMallocFromPoolAsync",
       .size = size,
       .stream = stream_handle(stream, PerThread),
       .context_bound = false,
       .dev = kDeviceOfPointer},
      [&](std::size_t n) { return obtained(real(ptr, n, pool, stream), ptr); });
}

template <bool PerThread>
cudaError_t free_async(decltype(&::cudaFreeAsync) real, void* ptr, cudaStream_t stream) {
  if (!real) return kNoRuntime;
  return release<cudaError_t>({.api = PerThread ? "cudaFreeAsync_ptsz" : "cudaFreeAsync",
                               .releases = Releases::device,
                               .ptr = reinterpret_cast<std::uintptr_t>(ptr),
                               .stream = stream_handle(stream, PerThread)},
                              [&] { return real(ptr, stream); },
                              [&] { return refused(real(not_a_device_pointer(), stream)); });
}

// ---- streams and synchronisation (what the caching pool must know) ----------

cudaError_t stream_destroy(decltype(&::cudaStreamDestroy) real, cudaStream_t stream) {
  if (!real) return kNoRuntime;
  return destroy_stream<cudaError_t>(reinterpret_cast<std::uintptr_t>(stream), [&] { return real(stream); });
}

cudaError_t device_synchronize(decltype(&::cudaDeviceSynchronize) real) {
  if (!real) return kNoRuntime;
  // The runtime synchronises its current context.
  return synchronize<cudaError_t>(nullptr, [&] { return real(); });
}

// ---- memory information and reset ------------------------------------------

cudaError_t mem_get_info(decltype(&::cudaMemGetInfo) real, size_t* free_bytes, size_t* total_bytes) {
  if (!real) return kNoRuntime;
  return memory_info<cudaError_t>(free_bytes, total_bytes,
                                  [&] { return real(free_bytes, total_bytes); });
}

cudaError_t device_reset(decltype(&::cudaDeviceReset) real) {
  if (!real) return kNoRuntime;
  const auto runtime_device = [&] {
    // The runtime's current device, asked of the same runtime library: on a
    // thread that has not used CUDA yet no context is current, and the
    // runtime still resets its default device.
    using GetDevice = decltype(&::cudaGetDevice);
    const auto get_device = reinterpret_cast<GetDevice>(sibling_symbol(reinterpret_cast<void*>(real),
                                                                        "cudaGetDevice"));
    int dev = -1;
    if (!get_device || get_device(&dev) != cudaSuccess) return -1;
    return dev;
  };
  return reset_device<cudaError_t>("cudaDeviceReset", runtime_device, [&] { return real(); });
}

}  // namespace

// ---- the exported hooks -------------------------------------------------------

#define CUMEMTRACE_RUNTIME_EXPORT(NAME, BODY, PARAMS, ...)            \
  static NextSymbol<decltype(&::NAME)> next_##NAME{#NAME};            \
  CUMEMTRACE_HOOK cudaError_t CUDARTAPI NAME PARAMS {                 \
    note_hook_caller(__builtin_return_address(0));                    \
    return BODY(next_##NAME.get() __VA_OPT__(, ) __VA_ARGS__);        \
  }

CUMEMTRACE_RUNTIME_EXPORT(cudaMalloc, malloc_device, (void** ptr, size_t size), ptr, size)
CUMEMTRACE_RUNTIME_EXPORT(cudaMallocPitch, malloc_pitch,
                          (void** ptr, size_t* pitch, size_t width, size_t height), ptr, pitch, width,
                          height)
CUMEMTRACE_RUNTIME_EXPORT(cudaMalloc3D, malloc_3d, (cudaPitchedPtr * pitched, cudaExtent extent),
                          pitched, extent)
CUMEMTRACE_RUNTIME_EXPORT(cudaMallocManaged, malloc_managed,
                          (void** ptr, size_t size, unsigned int flags), ptr, size, flags)
CUMEMTRACE_RUNTIME_EXPORT(cudaFree, free_device, (void* ptr), ptr)
CUMEMTRACE_RUNTIME_EXPORT(cudaMallocHost, malloc_host, (void** ptr, size_t size), ptr, size)
CUMEMTRACE_RUNTIME_EXPORT(cudaHostAlloc, host_alloc, (void** ptr, size_t size, unsigned int flags),
                          ptr, size, flags)
CUMEMTRACE_RUNTIME_EXPORT(cudaFreeHost, free_host, (void* ptr), ptr)
CUMEMTRACE_RUNTIME_EXPORT(cudaMallocAsync, malloc_async<false>,
                          (void** ptr, size_t size, cudaStream_t stream), ptr, size, stream)
CUMEMTRACE_RUNTIME_EXPORT(cudaMallocAsync_ptsz, malloc_async<true>,
                          (void** ptr, size_t size, cudaStream_t stream), ptr, size, stream)
CUMEMTRACE_RUNTIME_EXPORT(cudaMallocFromPoolAsync, malloc_from_pool_async<false>,
                          (void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream), ptr,
                          size, pool, stream)
CUMEMTRACE_RUNTIME_EXPORT(cudaMallocFromPoolAsync_ptsz, malloc_from_pool_async<true>,
                          (void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream), ptr,
                          size, pool, stream)
CUMEMTRACE_RUNTIME_EXPORT(cudaFreeAsync, free_async<false>, (void* ptr, cudaStream_t stream), ptr,
                          stream)
CUMEMTRACE_RUNTIME_EXPORT(cudaFreeAsync_ptsz, free_async<true>, (void* ptr, cudaStream_t stream), ptr,
                          stream)
CUMEMTRACE_RUNTIME_EXPORT(cudaMemGetInfo, mem_get_info, (size_t * free_bytes, size_t* total_bytes),
                          free_bytes, total_bytes)
CUMEMTRACE_RUNTIME_EXPORT(cudaDeviceReset, device_reset, (void))
CUMEMTRACE_RUNTIME_EXPORT(cudaStreamDestroy, stream_destroy, (cudaStream_t stream), stream)
CUMEMTRACE_RUNTIME_EXPORT(cudaDeviceSynchronize, device_synchronize, (void))

// ---- the table for dlsym ----------------------------------------------------------

#define ROW(NAME, PER_THREAD, BODY)                                                   \
  {#NAME, nullptr, 0, PER_THREAD, &wrap_with<&BODY>, reinterpret_cast<void*>(&::NAME), \
   &resolved<next_##NAME>}

static const InterceptedSymbol kRuntimeSymbols[] = {
    ROW(cudaMalloc, false, malloc_device),
    ROW(cudaMallocPitch, false, malloc_pitch),
    ROW(cudaMalloc3D, false, malloc_3d),
    ROW(cudaMallocManaged, false, malloc_managed),
    ROW(cudaFree, false, free_device),
    ROW(cudaMallocHost, false, malloc_host),
    ROW(cudaHostAlloc, false, host_alloc),
    ROW(cudaFreeHost, false, free_host),
    ROW(cudaMallocAsync, false, malloc_async<false>),
    ROW(cudaMallocAsync_ptsz, true, malloc_async<true>),
    ROW(cudaMallocFromPoolAsync, false, malloc_from_pool_async<false>),
    ROW(cudaMallocFromPoolAsync_ptsz, true, malloc_from_pool_async<true>),
    ROW(cudaFreeAsync, false, free_async<false>),
    ROW(cudaFreeAsync_ptsz, true, free_async<true>),
    ROW(cudaMemGetInfo, false, mem_get_info),
    ROW(cudaDeviceReset, false, device_reset),
    ROW(cudaStreamDestroy, false, stream_destroy),
    ROW(cudaDeviceSynchronize, false, device_synchronize),
};

std::span<const InterceptedSymbol> cumemtrace::preload::runtime_symbols() { return kRuntimeSymbols; }
