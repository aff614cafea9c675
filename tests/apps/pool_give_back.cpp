// Issue 30's safety test of giving pages back: the pool's expandable range
// moves pages from free holes to where a request needs them rather than
// raise its peak, and a page may go only once no queued work can touch it
// (cuMemUnmap does not wait: an unmap under queued work is an illegal
// memory access, pytorch/pytorch#196258; the sim raises it, sticky, when the
// queued operation runs).
//
// A (30 MiB) and B (50 MiB) are allocated; a slow operation is queued on the
// legacy stream (SIMCUDA_ASYNC_LATENCY_US), then one that writes A's first
// and last bytes behind it; A is freed while both are still queued. The
// next request, 40 MiB, fits no hole: the range must grow, or take A's
// memory by aliasing it (its old mapping stays for the queued write), and a
// pool that gave A's pages back now would fault the queued write. After a device
// synchronisation the same request again (D) finds A's pages idle, and may
// take them. Every call must succeed, the synchronisation included.
//
//   pool_give_back      prints "queued work ran" and "done"
#include <cuda_runtime_api.h>

#include <cstdio>

#include "sim_test.h"

int main() {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  SIM_RT_OK(cudaMalloc(&a, 30 * kMiB));
  SIM_RT_OK(cudaMalloc(&b, 50 * kMiB));
  // A slow step first (any device work pays the latency), then the write.
  SIM_RT_OK(cudaMemsetAsync(b, 0, 64, nullptr));
  SIM_RT_OK(cudaMemset2DAsync(a, 30 * kMiB - 64, 0x5a, 64, 2, nullptr));
  SIM_RT_OK(cudaFree(a));  // the write is still queued
  SIM_RT_OK(cudaMalloc(&c, 40 * kMiB));
  SIM_RT_OK(cudaDeviceSynchronize());  // a fault of the queued write shows here
  std::printf("queued work ran\n");
  SIM_RT_OK(cudaMalloc(&d, 20 * kMiB));
  SIM_RT_OK(cudaMemset(d, 0, 20 * kMiB));
  for (void* p : {b, c, d}) SIM_RT_OK(cudaFree(p));
  SIM_RT_OK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
