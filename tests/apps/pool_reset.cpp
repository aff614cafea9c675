// cudaDeviceReset under the caching pool: the reset frees every segment the
// pool held (live blocks and cached ones alike), the pool starts afresh, and
// a pointer from before the reset is refused by CUDA itself. Everything
// printed must be identical with and without cumemtrace.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "sim_test.h"

int main() {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  void* live = nullptr;
  void* cached = nullptr;
  SIM_RT_OK(cudaMalloc(&live, kMiB));
  SIM_RT_OK(cudaMalloc(&cached, 30 * kMiB));
  SIM_RT_OK(cudaFree(cached));
  std::printf("cudaDeviceReset: %s\n", cudaGetErrorName(cudaDeviceReset()));

  std::size_t free_bytes = 0, total = 0;
  SIM_RT_OK(cudaMemGetInfo(&free_bytes, &total));
  std::printf("after the reset: free %zu MiB of %zu MiB\n", free_bytes / kMiB, total / kMiB);
  void* fresh = nullptr;
  SIM_RT_OK(cudaMalloc(&fresh, kMiB));
  SIM_RT_OK(cudaFree(fresh));
  std::printf("cudaFree of a pointer from before the reset: %s\n", cudaGetErrorName(cudaFree(live)));
  std::printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
