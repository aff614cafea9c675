// The caching pool's safety when the stream that still uses a buffer is
// destroyed first. cuStreamDestroy returns at once "in case the device is
// still doing work in the stream", the work completing later (CUDA Driver
// API, cuStreamDestroy); the pool's orderings of the device
// (pool/glue/device_order.cpp) make each known non-blocking stream's work so
// far come before the legacy stream's next work, and a destroyed stream is
// no longer one they can name. A buffer whose last use is queued on such a
// stream must still not be given back (unmapped) before that use ran.
//
// A (30 MiB) and B (50 MiB) are allocated; on a non-blocking stream S a slow
// operation (SIMCUDA_ASYNC_LATENCY_US) is queued, then one that writes A's
// first and last bytes behind it; A is freed (under the pool the free does
// not wait, where the real cudaFree would) and S destroyed while both are
// still queued. The next request, 40 MiB, fits no hole, and the pool makes
// room by ordering the device: a pool whose ordering did not wait for S's
// work would find A's pages idle and unmap them under the queued write,
// which the simulated device raises as an illegal address (sticky) at the
// synchronisation.
//
//   pool_destroyed_stream      prints "queued work ran" and "done"
#include <cuda_runtime_api.h>

#include <cstdio>

#include "sim_test.h"

int main() {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cudaStream_t s = nullptr;
  SIM_RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  SIM_RT_OK(cudaMalloc(&a, 30 * kMiB));
  SIM_RT_OK(cudaMalloc(&b, 50 * kMiB));
  // A slow step first (any device work pays the latency), then the write.
  SIM_RT_OK(cudaMemsetAsync(b, 0, 64, s));
  SIM_RT_OK(cudaMemset2DAsync(a, 30 * kMiB - 64, 0x5a, 64, 2, s));
  SIM_RT_OK(cudaFree(a));            // the write is still queued
  SIM_RT_OK(cudaStreamDestroy(s));   // and S's work goes on without it
  SIM_RT_OK(cudaMalloc(&c, 40 * kMiB));
  SIM_RT_OK(cudaDeviceSynchronize());  // a fault of the queued write shows here
  std::printf("queued work ran\n");
  for (void* p : {b, c}) SIM_RT_OK(cudaFree(p));
  SIM_RT_OK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
