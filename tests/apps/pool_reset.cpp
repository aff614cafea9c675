// cudaDeviceReset under the caching pool: the reset frees every segment of
// the context's memory the pool held (live blocks and cached ones alike),
// the pool starts afresh, and a pointer from before the reset is refused by
// CUDA itself; a cudaMallocAsync block survives the reset, as CUDA 13's does
// ("cudaDeviceReset() will not destroy memory allocations by
// cudaMallocAsync()"), and is freed afterwards. Everything printed must be
// identical with and without cumemtrace.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "sim_test.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

void print_memory(const char* when) {
  std::size_t free_bytes = 0, total = 0;
  SIM_RT_OK(cudaMemGetInfo(&free_bytes, &total));
  std::printf("%s: free %zu MiB of %zu MiB\n", when, free_bytes / kMiB, total / kMiB);
}

}  // namespace

int main() {
  void* live = nullptr;
  void* cached = nullptr;
  void* streamed = nullptr;
  SIM_RT_OK(cudaMalloc(&live, kMiB));
  SIM_RT_OK(cudaMalloc(&cached, 30 * kMiB));
  SIM_RT_OK(cudaFree(cached));
  SIM_RT_OK(cudaMallocAsync(&streamed, 6 * kMiB, nullptr));
  SIM_RT_OK(cudaStreamSynchronize(nullptr));
  std::printf("cudaDeviceReset: %s\n", cudaGetErrorName(cudaDeviceReset()));

  print_memory("after the reset");
  void* fresh = nullptr;
  SIM_RT_OK(cudaMalloc(&fresh, kMiB));
  SIM_RT_OK(cudaFree(fresh));
  std::printf("cudaFree of a pointer from before the reset: %s\n", cudaGetErrorName(cudaFree(live)));
  std::printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
  std::printf("cudaFreeAsync of the stream-ordered block: %s\n",
              cudaGetErrorName(cudaFreeAsync(streamed, nullptr)));
  SIM_RT_OK(cudaDeviceSynchronize());
  print_memory("after freeing it");
  return 0;
}
