// Built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM=1 (like nvcc
// --default-stream per-thread): the headers route calls to the _ptds/_ptsz
// entry points and stream 0 means the calling thread's default stream.
// SIMCUDA_ASYNC_LATENCY_US=100000. The ctest sim_ptds_symbols checks with nm
// that this binary really references the _ptds/_ptsz symbols.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <thread>
#include <vector>

#include "sim_test.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "sim_ptds must be built with CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

int main() {
  simtest::require_runtime_on_sim();
  const std::size_t n = 1 << 16;
  unsigned char* a = nullptr;
  unsigned char* b = nullptr;
  SIM_RT_OK(cudaMalloc(reinterpret_cast<void**>(&a), n));
  SIM_RT_OK(cudaMalloc(reinterpret_cast<void**>(&b), n));
  std::vector<unsigned char> h(n, 0);

  // Round trip on the per-thread default stream.
  SIM_RT_OK(cudaMemset(a, 1, n));  // cudaMemset_ptds
  SIM_RT_OK(cudaMemcpy(h.data(), a, n, cudaMemcpyDeviceToHost));  // cudaMemcpy_ptds
  SIM_CHECK(h[0] == 1 && h[n - 1] == 1);

  // Each thread has its own default stream: another thread's stream-0 sync
  // does not wait for this thread's slow work.
  auto t0 = std::chrono::steady_clock::now();
  SIM_RT_OK(cudaMemsetAsync(a, 2, n, 0));  // 100 ms on this thread's stream
  double other_ms = 0;
  std::thread other([&] {
    auto t1 = std::chrono::steady_clock::now();
    SIM_RT_OK(cudaMemsetAsync(b, 3, 16, 0));
    SIM_RT_OK(cudaStreamSynchronize(0));
    other_ms = simtest::ms_since(t1);
  });
  other.join();
  SIM_RT_OK(cudaStreamSynchronize(0));
  SIM_CHECK(simtest::ms_since(t0) >= 99);
  SIM_CHECK(other_ms < 190);  // one latency, not two
  SIM_RT_OK(cudaMemcpy(h.data(), a, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(h[0] == 2);

  // The per-thread stream is blocking: it waits for earlier legacy work.
  SIM_RT_OK(cudaMemsetAsync(a, 5, n, cudaStreamLegacy));
  SIM_RT_OK(cudaMemcpyAsync(h.data(), a, n, cudaMemcpyDeviceToHost, 0));
  SIM_CHECK(h[n - 1] == 5);  // to pageable memory: complete on return

  // Stream-ordered allocation on stream 0 (cudaMallocAsync_ptsz).
  void* p = nullptr;
  SIM_RT_OK(cudaMallocAsync(&p, 4096, 0));
  SIM_RT_OK(cudaFreeAsync(p, 0));
  SIM_RT_OK(cudaStreamSynchronize(0));
  cudaEvent_t e;
  SIM_RT_OK(cudaEventCreate(&e));
  SIM_RT_OK(cudaEventRecord(e, 0));
  SIM_RT_OK(cudaEventSynchronize(e));
  SIM_RT_OK(cudaStreamQuery(0));
  SIM_RT_OK(cudaEventDestroy(e));

  // cudaGetDriverEntryPoint_ptsz: the default flag means per-thread here.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult st;
  SIM_RT_OK(cudaGetDriverEntryPoint("cuMemAllocAsync", &fn, cudaEnableDefault, &st));
  void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  SIM_CHECK(drv != nullptr);
  SIM_CHECK(fn == dlsym(drv, "cuMemAllocAsync_ptsz"));

  SIM_RT_OK(cudaFree(a));
  SIM_RT_OK(cudaFree(b));
  std::printf("sim_ptds: OK\n");
  return 0;
}
