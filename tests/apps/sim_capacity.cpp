// Capacity accounting with SIMCUDA_DEVICE_MEMORY=512MiB: cudaMemGetInfo stays
// consistent (free <= total, free = capacity - pages in use), managed memory
// counts against the device and pinned host memory does not. Physical memory
// is counted in 2 MiB pages mapped anywhere, as on a real GPU
// (tests/sim/README.md, "Devices and memory"), so freed memory serves a large
// request however it is scattered by address. sim_page_probe checks how
// small allocations share pages.
#include <cuda_runtime_api.h>

#include <vector>

#include "sim_test.h"

namespace {
std::size_t free_now() {
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(f <= t);
  SIM_CHECK(t == simtest::mib(512));
  return f;
}
}  // namespace

int main() {
  simtest::require_runtime_on_sim();
  const std::size_t cap = simtest::mib(512);
  SIM_CHECK(free_now() == cap);

  // Fill the device with 64 x 8 MiB, check every step.
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) {
    void* p = nullptr;
    SIM_RT_OK(cudaMalloc(&p, simtest::mib(8)));
    blocks.push_back(p);
    SIM_CHECK(free_now() == cap - (i + 1) * simtest::mib(8));
  }
  void* p = nullptr;
  SIM_EXPECT_RT(cudaMalloc(&p, 512), cudaErrorMemoryAllocation);
  cudaGetLastError();

  // Free every other block: 256 MiB free in 8 MiB holes of address space.
  // Pages are mapped anywhere, so all of it serves one 256 MiB request (a
  // contiguous allocator would fail even 16 MiB here).
  for (int i = 0; i < 64; i += 2) SIM_RT_OK(cudaFree(blocks[i]));
  SIM_CHECK(free_now() == cap / 2);
  SIM_RT_OK(cudaMalloc(&p, cap / 2));
  SIM_CHECK(free_now() == 0);
  void* more = nullptr;
  SIM_EXPECT_RT(cudaMalloc(&more, 1), cudaErrorMemoryAllocation);
  cudaGetLastError();
  SIM_RT_OK(cudaFree(p));
  for (int i = 1; i < 64; i += 2) SIM_RT_OK(cudaFree(blocks[i]));
  SIM_CHECK(free_now() == cap);
  SIM_RT_OK(cudaMalloc(&p, cap));
  SIM_RT_OK(cudaFree(p));

  // Managed memory is device memory here.
  void* m = nullptr;
  SIM_RT_OK(cudaMallocManaged(&m, simtest::mib(100), cudaMemAttachGlobal));
  SIM_CHECK(free_now() == cap - simtest::mib(100));
  static_cast<char*>(m)[simtest::mib(100) - 1] = 42;  // host access works
  SIM_RT_OK(cudaFree(m));

  // Pinned host memory is host memory: device free space is unchanged, and a
  // pinned buffer larger than the device works.
  void* h = nullptr;
  SIM_RT_OK(cudaMallocHost(&h, simtest::mib(600)));
  SIM_CHECK(free_now() == cap);
  SIM_RT_OK(cudaFreeHost(h));
  SIM_CHECK(free_now() == cap);
  std::printf("sim_capacity: OK\n");
  return 0;
}
