// The caching pool keeps each thread's per-thread default stream apart, also
// across a thread's exit. Each thread's cudaStreamPerThread is a stream of
// its own (CUDA Runtime API, "Stream synchronization behavior": the
// per-thread default stream "is not synchronized with other streams in
// the same process" other than the legacy one), and a thread that exits
// leaves its queued work running. The pool serves a stream's requests from
// blocks freed in that stream's order without waiting; a new thread whose
// per-thread stream the pool took for the old one's would get a block the
// old thread's queued work still writes.
//
// Thread A allocates 16 MiB on its per-thread stream, queues MEMSETS slow
// memsets on it (SIMCUDA_ASYNC_LATENCY_US each), frees it there and exits.
// Thread B then allocates the same size on its own per-thread stream and
// copies a pattern there on that stream. After a device
// synchronisation the pattern must be intact.
//
//   pool_thread_streams [MEMSETS]   prints "reused: 0|1" and "pattern: intact"
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "pool_pattern.h"
#include "sim_test.h"

int main(int argc, char** argv) {
  const int memsets = argc > 1 ? std::atoi(argv[1]) : 4;
  constexpr std::size_t kSize = std::size_t{16} << 20;
  constexpr unsigned char kPattern = 0x5a;
  SIM_RT_OK(cudaFree(nullptr));  // the context, before the threads

  void* a = nullptr;
  std::thread first([&] {
    SIM_RT_OK(cudaMallocAsync(&a, kSize, cudaStreamPerThread));
    for (int i = 0; i < memsets; ++i) SIM_RT_OK(cudaMemsetAsync(a, 0xee, kSize, cudaStreamPerThread));
    SIM_RT_OK(cudaFreeAsync(a, cudaStreamPerThread));  // the memsets are still queued
  });
  first.join();

  void* b = nullptr;
  std::thread second([&] {
    SIM_RT_OK(cudaMallocAsync(&b, kSize, cudaStreamPerThread));
    const std::vector<unsigned char> pattern(kSize, kPattern);
    // On its own stream (cudaMemcpy would go to the legacy stream, which
    // waits for every blocking stream's work, A's included).
    SIM_RT_OK(cudaMemcpyAsync(b, pattern.data(), kSize, cudaMemcpyHostToDevice, cudaStreamPerThread));
    SIM_RT_OK(cudaStreamSynchronize(cudaStreamPerThread));
  });
  second.join();
  SIM_RT_OK(cudaDeviceSynchronize());

  if (!report_reuse_and_pattern(a, b, kSize, kPattern)) return 1;
  SIM_RT_OK(cudaFree(b));
  return 0;
}
