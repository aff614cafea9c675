// Issue 4's safety test of the caching pool: device work still running on a
// non-blocking stream must never see its buffer handed out again. A slow
// chain of asynchronous memsets (SIMCUDA_ASYNC_LATENCY_US each) fills A on
// stream s; cudaFree(A) returns while they are queued (under the pool; the
// real cudaFree would wait); cudaMalloc of the same size may get A's address
// back, and the program writes its pattern there with a synchronous copy on
// the legacy stream, which does not wait for a non-blocking stream. After a
// device synchronisation the pattern must be intact: a pool that reused A
// before s finished would let s's later memsets overwrite it.
//
//   pool_reuse_after_free [MEMSETS]   prints "reused: 0|1" and "pattern: intact"
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "pool_pattern.h"
#include "sim_test.h"

int main(int argc, char** argv) {
  const int memsets = argc > 1 ? std::atoi(argv[1]) : 4;
  // Above 10 MiB a block gets a segment of its own size (DESIGN.md), so the
  // second request can only be met with A's memory or by growing: the
  // pool must choose reuse-after-waiting.
  constexpr std::size_t kSize = std::size_t{16} << 20;
  constexpr unsigned char kPattern = 0x5a;

  cudaStream_t s = nullptr;
  SIM_RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* a = nullptr;
  SIM_RT_OK(cudaMalloc(&a, kSize));
  for (int i = 0; i < memsets; ++i) SIM_RT_OK(cudaMemsetAsync(a, 0xee, kSize, s));
  SIM_RT_OK(cudaFree(a));

  void* b = nullptr;
  SIM_RT_OK(cudaMalloc(&b, kSize));
  const std::vector<unsigned char> pattern(kSize, kPattern);
  SIM_RT_OK(cudaMemcpy(b, pattern.data(), kSize, cudaMemcpyHostToDevice));
  SIM_RT_OK(cudaDeviceSynchronize());

  if (!report_reuse_and_pattern(a, b, kSize, kPattern)) return 1;
  SIM_RT_OK(cudaFree(b));
  SIM_RT_OK(cudaStreamDestroy(s));
  return 0;
}
