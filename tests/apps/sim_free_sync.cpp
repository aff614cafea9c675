// The hazard a caching allocator must not introduce: with
// SIMCUDA_ASYNC_LATENCY_US=200000, a "slow kernel" (cudaMemsetAsync on a
// non-blocking stream) still writes into p when the program frees p and
// allocates q. Real cudaFree synchronises the device first, so the slow
// write lands before p's memory is handed out again and the data the
// program then writes into q survives.
#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

#include "sim_test.h"
#include "simcuda_counters.h"

int main() {
  simtest::require_runtime_on_sim();
  const std::size_t n = 2 << 20;  // whole pages: cudaMemGetInfo counts each buffer exactly
  cudaStream_t s;
  // Non-blocking: the legacy-stream copy below does not wait for it, so
  // only cudaFree's synchronisation protects q.
  SIM_RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  void* p = nullptr;
  SIM_RT_OK(cudaMalloc(&p, n));
  // The runtime loaded the sim's driver privately: the counters are found
  // there (simcuda_counters_lookup's RTLD_NOLOAD path).
  SimcudaCounters before{}, after{};
  SIM_CHECK(simcuda_counters_read(&before));
  auto t0 = std::chrono::steady_clock::now();
  SIM_RT_OK(cudaMemsetAsync(p, 0xff, n, s));  // runs 200 ms from now
  SIM_RT_OK(cudaFree(p));
  double free_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  SIM_CHECK(free_ms >= 190);  // cudaFree waited for the device
  SIM_CHECK(simcuda_counters_read(&after));
  // One cuMemFree, one host wait, found blocked on the memset.
  SIM_CHECK(after.mem_free - before.mem_free == 1);
  SIM_CHECK(after.wait_calls - before.wait_calls == 1);
  SIM_CHECK(after.blocked_waits - before.blocked_waits == 1);
  SIM_CHECK(after.blocked_us - before.blocked_us >= 150000);

  void* q = nullptr;
  SIM_RT_OK(cudaMalloc(&q, n));
  SIM_CHECK(q == p);  // same memory reused: the hazard is really exercised
  std::vector<unsigned char> h(n, 0x11), back(n);
  SIM_RT_OK(cudaMemcpy(q, h.data(), n, cudaMemcpyHostToDevice));
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_RT_OK(cudaMemcpy(back.data(), q, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(back == h);

  // Contrast: a stream-ordered free on the same stream releases the memory
  // only when the stream reaches it, so the slow memset still completes
  // into live memory first.
  void* r = nullptr;
  SIM_RT_OK(cudaMallocAsync(&r, n, s));
  SIM_RT_OK(cudaMemsetAsync(r, 0x22, n, s));
  SIM_RT_OK(cudaFreeAsync(r, s));
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(t - f == 2 * n);  // q and r (its free is still queued)
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(t - f == n);
  SIM_RT_OK(cudaFree(q));
  SIM_RT_OK(cudaStreamDestroy(s));
  std::printf("sim_free_sync: OK (cudaFree waited %.0f ms)\n", free_ms);
  return 0;
}
