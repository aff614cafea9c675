// SIMCUDA_DEVICE_MEMORY=80GiB: an 80 GiB device whose 60 GiB of allocations
// cost no RAM until written (one MAP_NORESERVE reservation per device).
#include <cuda_runtime_api.h>

#include <vector>

#include "sim_test.h"

int main() {
  const cudaDeviceProp prop = simtest::require_runtime_on_sim();
  SIM_CHECK(prop.totalGlobalMem == simtest::gib(80));
  const std::size_t rss0 = simtest::rss_bytes();

  std::vector<void*> blocks;
  for (int i = 0; i < 60; ++i) {
    void* p = nullptr;
    SIM_RT_OK(cudaMalloc(&p, simtest::gib(1)));
    // Touch a little of each block.
    SIM_RT_OK(cudaMemset(p, i, 4096));
    SIM_RT_OK(cudaMemset(static_cast<char*>(p) + simtest::gib(1) - 4096, i, 4096));
    blocks.push_back(p);
  }
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(t == simtest::gib(80) && f == simtest::gib(20));
  unsigned char c = 0;
  SIM_RT_OK(cudaMemcpy(&c, static_cast<char*>(blocks[59]) + simtest::gib(1) - 1, 1,
                       cudaMemcpyDeviceToHost));
  SIM_CHECK(c == 59);
  const std::size_t grew = simtest::rss_bytes() - rss0;
  if (grew > simtest::mib(256)) SIM_FAIL("RSS grew by %zu MiB", grew >> 20);
  void* p = nullptr;
  SIM_EXPECT_RT(cudaMalloc(&p, simtest::gib(21)), cudaErrorMemoryAllocation);
  cudaGetLastError();
  for (void* b : blocks) SIM_RT_OK(cudaFree(b));

  // One 60 GiB allocation.
  SIM_RT_OK(cudaMalloc(&p, simtest::gib(60)));
  SIM_RT_OK(cudaMemset(static_cast<char*>(p) + simtest::gib(59), 1, 1 << 20));
  SIM_RT_OK(cudaFree(p));
  SIM_CHECK(simtest::rss_bytes() - rss0 < simtest::mib(256));
  std::printf("sim_80gib: OK (RSS grew %zu KiB)\n", (simtest::rss_bytes() - rss0) >> 10);
  return 0;
}
