// Exported CUDA runtime symbols. Each hook is thin: it calls the real
// function and tells the recorder what happened. Hooks never throw, never
// abort the host program, and return the real CUDA result code.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "hook_support.h"
#include "real_cuda.h"

using cumemtrace::format::MemoryKind;
using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

CUMEMTRACE_HOOK cudaError_t cudaMalloc(void** dev_ptr, size_t size) {
  const auto& real = real_runtime();
  if (!real.malloc) return cudaErrorSharedObjectSymbolNotFound;
  ReentryGuard guard;
  const cudaError_t rc = real.malloc(dev_ptr, size);
  if (rc != cudaSuccess || !guard.outermost() || dev_ptr == nullptr) return rc;
  int dev = 0;
  if (real.get_device) real.get_device(&dev);
  record_alloc_noexcept({.api = "cudaMalloc",
                         .kind = MemoryKind::device,
                         .dev = dev,
                         .ptr = reinterpret_cast<std::uintptr_t>(*dev_ptr),
                         .size = size,
                         .stream = std::nullopt});
  return rc;
}

CUMEMTRACE_HOOK cudaError_t cudaFree(void* dev_ptr) {
  const auto& real = real_runtime();
  if (!real.free) return cudaErrorSharedObjectSymbolNotFound;
  ReentryGuard guard;
  // cudaFree(NULL) creates the context in real CUDA: it must reach the
  // runtime, and it frees nothing, so nothing is recorded.
  if (dev_ptr != nullptr && guard.outermost()) {
    record_free_noexcept("cudaFree", reinterpret_cast<std::uintptr_t>(dev_ptr), std::nullopt);
  }
  return real.free(dev_ptr);
}
