// Stream semantics with SIMCUDA_ASYNC_LATENCY_US=20000 (every async memset,
// memcpy and host function takes 20 ms): in-order streams, events across
// streams, cudaStreamWaitEvent, and the legacy default stream rules —
// legacy work waits for earlier work on blocking streams and later
// blocking-stream work waits for it; cudaStreamNonBlocking streams do neither.
#include <cuda_runtime_api.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "sim_test.h"

namespace {

std::mutex g_mu;
std::string g_order;

void CUDART_CB mark(void* tag) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_order += static_cast<const char*>(tag);
}

std::string take_order() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::string s = g_order;
  g_order.clear();
  return s;
}


}  // namespace

int main() {
  simtest::require_runtime_on_sim();

  const std::size_t n = 1 << 16;
  unsigned char* d = nullptr;
  SIM_RT_OK(cudaMalloc(reinterpret_cast<void**>(&d), n));
  std::vector<unsigned char> h(n);

  cudaStream_t s1, s2, nb;
  SIM_RT_OK(cudaStreamCreate(&s1));
  SIM_RT_OK(cudaStreamCreateWithFlags(&s2, cudaStreamDefault));
  SIM_RT_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  unsigned int flags = 9;
  SIM_RT_OK(cudaStreamGetFlags(nb, &flags));
  SIM_CHECK(flags == cudaStreamNonBlocking);

  // 1. One stream runs in order; work is asynchronous to the host.
  auto t0 = std::chrono::steady_clock::now();
  SIM_RT_OK(cudaMemsetAsync(d, 1, n, s1));
  SIM_RT_OK(cudaMemsetAsync(d, 2, n, s1));
  SIM_CHECK(simtest::ms_since(t0) < 15);  // returned before the "kernels" ran
  SIM_EXPECT_RT(cudaStreamQuery(s1), cudaErrorNotReady);
  SIM_CHECK(cudaPeekAtLastError() == cudaSuccess);  // not-ready is not an error
  SIM_RT_OK(cudaStreamSynchronize(s1));
  SIM_CHECK(simtest::ms_since(t0) >= 39);
  SIM_RT_OK(cudaStreamQuery(s1));
  SIM_RT_OK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(h[0] == 2 && h[n - 1] == 2);

  // 2. Events: s2 waits for s1's memset before copying; elapsed time.
  cudaEvent_t start, done;
  SIM_RT_OK(cudaEventCreate(&start));
  SIM_RT_OK(cudaEventCreate(&done));
  SIM_RT_OK(cudaEventQuery(done));  // never recorded: complete
  unsigned char* d2 = nullptr;
  SIM_RT_OK(cudaMalloc(reinterpret_cast<void**>(&d2), n));
  SIM_RT_OK(cudaMemset(d2, 0, n));
  SIM_RT_OK(cudaEventRecord(start, s1));
  SIM_RT_OK(cudaMemsetAsync(d, 7, n, s1));
  SIM_RT_OK(cudaEventRecord(done, s1));
  SIM_EXPECT_RT(cudaEventQuery(done), cudaErrorNotReady);
  SIM_RT_OK(cudaStreamWaitEvent(s2, done, 0));
  SIM_RT_OK(cudaMemcpyAsync(d2, d, n, cudaMemcpyDeviceToDevice, s2));
  SIM_RT_OK(cudaStreamSynchronize(s2));
  SIM_RT_OK(cudaEventQuery(done));
  SIM_RT_OK(cudaMemcpy(h.data(), d2, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(h[0] == 7 && h[n - 1] == 7);
  float ms = 0;
  SIM_RT_OK(cudaEventElapsedTime(&ms, start, done));
  SIM_CHECK(ms >= 19.0f);
  cudaEvent_t notiming;
  SIM_RT_OK(cudaEventCreateWithFlags(&notiming, cudaEventDisableTiming));
  SIM_RT_OK(cudaEventRecord(notiming, s1));
  SIM_RT_OK(cudaEventSynchronize(notiming));
  SIM_EXPECT_RT(cudaEventElapsedTime(&ms, start, notiming), cudaErrorInvalidResourceHandle);
  cudaGetLastError();

  // 3. Legacy stream waits for earlier blocking work, not for non-blocking work.
  SIM_RT_OK(cudaDeviceSynchronize());
  take_order();
  SIM_RT_OK(cudaLaunchHostFunc(s1, mark, const_cast<char*>("B")));    // 20 ms
  SIM_RT_OK(cudaLaunchHostFunc(nb, mark, const_cast<char*>("N")));    // 20 ms
  SIM_RT_OK(cudaStreamSynchronize(nb));                               // N done
  SIM_RT_OK(cudaLaunchHostFunc(nb, mark, const_cast<char*>("n")));    // 20 ms
  SIM_RT_OK(cudaLaunchHostFunc(cudaStreamLegacy, mark, const_cast<char*>("L")));
  SIM_RT_OK(cudaDeviceSynchronize());
  std::string o = take_order();
  // B (blocking) precedes L; n (non-blocking) runs concurrently with L's wait.
  SIM_CHECK(o.find('B') < o.find('L'));
  SIM_CHECK(o.size() == 4);

  // 4. Later blocking work waits for the legacy stream; non-blocking does not.
  SIM_RT_OK(cudaLaunchHostFunc(0, mark, const_cast<char*>("L")));  // stream 0 = legacy
  SIM_RT_OK(cudaLaunchHostFunc(s2, mark, const_cast<char*>("B")));
  SIM_RT_OK(cudaLaunchHostFunc(cudaStreamPerThread, mark, const_cast<char*>("P")));
  SIM_RT_OK(cudaDeviceSynchronize());
  o = take_order();
  SIM_CHECK(o.size() == 3 && o[0] == 'L');

  SIM_RT_OK(cudaMemsetAsync(d, 3, n, 0));  // legacy, 20 ms
  t0 = std::chrono::steady_clock::now();
  SIM_RT_OK(cudaLaunchHostFunc(nb, mark, const_cast<char*>("N")));
  SIM_RT_OK(cudaStreamSynchronize(nb));
  double nb_ms = simtest::ms_since(t0);
  SIM_RT_OK(cudaStreamSynchronize(0));
  SIM_CHECK(nb_ms < 39);  // did not also wait for the legacy memset
  take_order();

  // 5. The legacy stream's synchronous copy sees earlier blocking work.
  SIM_RT_OK(cudaMemsetAsync(d, 9, n, s1));
  SIM_RT_OK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(h[0] == 9 && h[n - 1] == 9);

  // 6. Destroying a stream with pending work returns at once; work completes.
  cudaStream_t tmp;
  SIM_RT_OK(cudaStreamCreate(&tmp));
  SIM_RT_OK(cudaMemsetAsync(d, 4, n, tmp));
  t0 = std::chrono::steady_clock::now();
  SIM_RT_OK(cudaStreamDestroy(tmp));
  SIM_CHECK(simtest::ms_since(t0) < 15);
  SIM_RT_OK(cudaDeviceSynchronize());
  SIM_RT_OK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(h[0] == 4);
  SIM_EXPECT_RT(cudaStreamSynchronize(tmp), cudaErrorInvalidResourceHandle);
  cudaGetLastError();

  SIM_RT_OK(cudaEventDestroy(start));
  SIM_RT_OK(cudaEventDestroy(done));
  SIM_RT_OK(cudaEventDestroy(notiming));
  SIM_RT_OK(cudaStreamDestroy(s1));
  SIM_RT_OK(cudaStreamDestroy(s2));
  SIM_RT_OK(cudaStreamDestroy(nb));
  SIM_RT_OK(cudaFree(d));
  SIM_RT_OK(cudaFree(d2));
  std::printf("sim_streams: OK\n");
  return 0;
}
