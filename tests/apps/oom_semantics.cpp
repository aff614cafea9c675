// What a program sees when a cudaMalloc fails, which must be the same with
// and without cumemtrace: the real error code, the last-error state the real
// runtime leaves (returned once by cudaGetLastError), and a working device
// afterwards. Run it on a device smaller than 2 GiB.
#include <cuda_runtime_api.h>

#include <cstdio>

namespace {

int failures = 0;

void expect(cudaError_t got, cudaError_t want, const char* what) {
  if (got == want) return;
  std::fprintf(stderr, "oom_semantics: %s returned %s, expected %s\n", what, cudaGetErrorName(got),
               cudaGetErrorName(want));
  ++failures;
}

}  // namespace

int main() {
  void* huge = nullptr;
  expect(cudaMalloc(&huge, size_t{2} << 30), cudaErrorMemoryAllocation, "cudaMalloc(2 GiB)");
  expect(cudaPeekAtLastError(), cudaErrorMemoryAllocation, "cudaPeekAtLastError");
  expect(cudaGetLastError(), cudaErrorMemoryAllocation, "first cudaGetLastError");
  expect(cudaGetLastError(), cudaSuccess, "second cudaGetLastError");

  void* small = nullptr;
  expect(cudaMalloc(&small, 1 << 20), cudaSuccess, "cudaMalloc(1 MiB) after the failure");
  expect(cudaGetLastError(), cudaSuccess, "cudaGetLastError after a success");
  expect(cudaFree(small), cudaSuccess, "cudaFree");
  expect(cudaFree(nullptr), cudaSuccess, "cudaFree(NULL)");
  if (failures == 0) std::puts("oom_semantics: ok");
  return failures == 0 ? 0 : 1;
}
