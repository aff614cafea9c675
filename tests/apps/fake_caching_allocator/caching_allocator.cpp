// A stand-in for a framework's caching allocator (PyTorch's lives in
// libc10_cuda.so): built as `fake_torch/libc10_cuda.so` so that the call
// sites of its cudaMalloc/cudaFree lie in a library of that name, which is
// all the pool's step-aside rule looks at (preload/hooks/step_aside.h).
// It caches nothing itself; the tests only need its calls' origin. Each
// call does some work after CUDA returns, as PyTorch's does (it checks the
// result and updates its statistics): a bare `return cudaMalloc(...)` would
// be compiled as a tail call, and the return address the hook sees would be
// the program's, not this library's.
#include <cuda_runtime_api.h>

namespace {
unsigned long g_segments = 0;
}

extern "C" __attribute__((visibility("default"))) cudaError_t fake_cache_malloc(void** ptr, size_t size) {
  const cudaError_t rc = cudaMalloc(ptr, size);
  if (rc == cudaSuccess) ++g_segments;
  return rc;
}

extern "C" __attribute__((visibility("default"))) cudaError_t fake_cache_free(void* ptr) {
  const cudaError_t rc = cudaFree(ptr);
  if (rc == cudaSuccess) --g_segments;
  return rc;
}
