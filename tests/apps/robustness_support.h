// Allocation helpers of the robustness programs (robustness_apps.cmake): a
// failure exits with a code of its own (20: cudaMalloc, 21: cudaFree), which
// the tests report, rather than going unnoticed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

inline void* must_malloc(size_t size) {
  void* p = nullptr;
  if (const cudaError_t rc = cudaMalloc(&p, size); rc != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc(%zu) failed: %s\n", size, cudaGetErrorString(rc));
    std::_Exit(20);
  }
  return p;
}

inline void must_free(void* p) {
  if (const cudaError_t rc = cudaFree(p); rc != cudaSuccess) {
    std::fprintf(stderr, "cudaFree(%p) failed: %s\n", p, cudaGetErrorString(rc));
    std::_Exit(21);
  }
}
