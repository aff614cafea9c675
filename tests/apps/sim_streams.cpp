// Stream semantics: in-order streams, events across streams,
// cudaStreamWaitEvent, and the legacy default stream rules — legacy work
// waits for earlier work on blocking streams and later blocking-stream work
// waits for it; cudaStreamNonBlocking streams do neither (tests/sim/README.md,
// "Streams and events"; CUDA Runtime API, "Stream synchronization behavior").
//
// No check bounds wall-clock time from above, so a loaded machine or a
// ThreadSanitizer build cannot fail it. A stream's slow step is a Gate: a host
// function that holds its stream until the test opens it, so whatever is
// queued behind it is pending for as long as the test looks, and queries,
// events and host-function marks say what ran. This relies on the sim running
// each stream's host functions on that stream's own worker; the real
// cudaLaunchHostFunc may serialize host functions of independent streams and
// forbids one that waits on other CUDA work, so this is a test of the sim
// only. SIMCUDA_ASYNC_LATENCY_US (set by ctest) makes every memset and host
// function slower still; the event-timing check counts it as a lower bound.
#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sim_test.h"

namespace {

using simtest::Gate;
using simtest::settle;

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

char* tag(const char* s) { return const_cast<char*>(s); }

// Opens the gate from another thread while this one is blocked in a
// synchronous call. The delay only gives the call time to go wrong: if it did
// not wait, it has read memory before the gate opened.
std::thread release_later(Gate& g) {
  return std::thread([&g] {
    settle();
    g.release();
  });
}

}  // namespace

int main() {
  simtest::require_runtime_on_sim();
  const char* lat_env = std::getenv("SIMCUDA_ASYNC_LATENCY_US");
  const double latency_ms = lat_env ? std::atof(lat_env) / 1000.0 : 0.0;

  const std::size_t n = 1 << 16;
  unsigned char* d = nullptr;
  SIM_RT_OK(cudaMalloc(reinterpret_cast<void**>(&d), n));
  std::vector<unsigned char> h(n);

  cudaStream_t s1, s2, nb, peek;
  SIM_RT_OK(cudaStreamCreate(&s1));
  SIM_RT_OK(cudaStreamCreateWithFlags(&s2, cudaStreamDefault));
  SIM_RT_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  SIM_RT_OK(cudaStreamCreateWithFlags(&peek, cudaStreamNonBlocking));
  unsigned int flags = 9;
  SIM_RT_OK(cudaStreamGetFlags(nb, &flags));
  SIM_CHECK(flags == cudaStreamNonBlocking);

  // Reads device memory without waiting for any other stream: a copy to
  // pageable memory is complete when it returns ("API synchronization
  // behavior"), and a non-blocking stream waits for nothing else.
  auto read = [&](const unsigned char* src) {
    SIM_RT_OK(cudaMemcpyAsync(h.data(), src, n, cudaMemcpyDeviceToHost, peek));
    return h[0] == h[n - 1] ? static_cast<int>(h[0]) : -1;
  };
  SIM_RT_OK(cudaMemset(d, 0, n));

  // 1. One stream runs in order; work is asynchronous to the host.
  {
    Gate g;
    SIM_RT_OK(cudaLaunchHostFunc(s1, Gate::hold, &g));
    SIM_RT_OK(cudaMemsetAsync(d, 1, n, s1));
    SIM_RT_OK(cudaLaunchHostFunc(s1, mark, tag("1")));
    SIM_RT_OK(cudaMemsetAsync(d, 2, n, s1));
    SIM_RT_OK(cudaLaunchHostFunc(s1, mark, tag("2")));
    // Every call returned with its work still queued behind the gate.
    SIM_EXPECT_RT(cudaStreamQuery(s1), cudaErrorNotReady);
    SIM_CHECK(cudaPeekAtLastError() == cudaSuccess);  // not-ready is not an error
    settle();
    SIM_CHECK(read(d) == 0);
    SIM_CHECK(take_order().empty());
    SIM_CHECK(g.held());
    g.release();
    SIM_RT_OK(cudaStreamSynchronize(s1));
    SIM_CHECK(take_order() == "12");  // synchronize waited for all of it, in order
    SIM_RT_OK(cudaStreamQuery(s1));
    SIM_RT_OK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
    SIM_CHECK(h[0] == 2 && h[n - 1] == 2);
  }

  // 2. Events: s2 waits for s1's memset before copying; elapsed time.
  cudaEvent_t start, done;
  SIM_RT_OK(cudaEventCreate(&start));
  SIM_RT_OK(cudaEventCreate(&done));
  SIM_RT_OK(cudaEventQuery(done));  // never recorded: complete
  unsigned char* d2 = nullptr;
  SIM_RT_OK(cudaMalloc(reinterpret_cast<void**>(&d2), n));
  SIM_RT_OK(cudaMemset(d2, 0, n));
  {
    Gate g;
    SIM_RT_OK(cudaEventRecord(start, s1));
    SIM_RT_OK(cudaLaunchHostFunc(s1, Gate::hold, &g));
    SIM_RT_OK(cudaMemsetAsync(d, 7, n, s1));
    SIM_RT_OK(cudaEventRecord(done, s1));
    SIM_EXPECT_RT(cudaEventQuery(done), cudaErrorNotReady);
    SIM_RT_OK(cudaStreamWaitEvent(s2, done, 0));
    SIM_RT_OK(cudaMemcpyAsync(d2, d, n, cudaMemcpyDeviceToDevice, s2));
    SIM_RT_OK(cudaLaunchHostFunc(s2, mark, tag("c")));
    SIM_EXPECT_RT(cudaStreamQuery(s2), cudaErrorNotReady);  // waits for the event
    settle();
    SIM_CHECK(take_order().empty());
    SIM_CHECK(read(d2) == 0);
    SIM_CHECK(g.held());
    g.release();
    SIM_RT_OK(cudaStreamSynchronize(s2));
    SIM_CHECK(take_order() == "c");
    SIM_RT_OK(cudaEventQuery(done));
    SIM_RT_OK(cudaMemcpy(h.data(), d2, n, cudaMemcpyDeviceToHost));
    SIM_CHECK(h[0] == 7 && h[n - 1] == 7);
    // Host time between the two records: at least the hold and the memset's
    // latency, which both ran between them.
    float ms = 0;
    SIM_RT_OK(cudaEventElapsedTime(&ms, start, done));
    SIM_CHECK(g.held_for_ms() > 0);
    SIM_CHECK(ms >= g.held_for_ms() + latency_ms - 0.01);
  }
  float ms = 0;
  cudaEvent_t notiming;
  SIM_RT_OK(cudaEventCreateWithFlags(&notiming, cudaEventDisableTiming));
  SIM_RT_OK(cudaEventRecord(notiming, s1));
  SIM_RT_OK(cudaEventSynchronize(notiming));
  SIM_EXPECT_RT(cudaEventElapsedTime(&ms, start, notiming), cudaErrorInvalidResourceHandle);
  cudaGetLastError();

  // 3. Legacy stream waits for earlier blocking work, not for non-blocking work.
  SIM_RT_OK(cudaDeviceSynchronize());
  take_order();
  {
    Gate gb, gn;
    cudaEvent_t after_l;
    SIM_RT_OK(cudaEventCreateWithFlags(&after_l, cudaEventDisableTiming));
    SIM_RT_OK(cudaLaunchHostFunc(s1, Gate::hold, &gb));
    SIM_RT_OK(cudaLaunchHostFunc(s1, mark, tag("B")));
    SIM_RT_OK(cudaLaunchHostFunc(nb, Gate::hold, &gn));
    SIM_RT_OK(cudaLaunchHostFunc(nb, mark, tag("n")));
    SIM_RT_OK(cudaLaunchHostFunc(cudaStreamLegacy, mark, tag("L")));
    SIM_RT_OK(cudaEventRecord(after_l, cudaStreamLegacy));
    SIM_EXPECT_RT(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady);  // behind B
    settle();
    SIM_CHECK(take_order().empty());
    SIM_CHECK(gb.held());
    gb.release();
    SIM_RT_OK(cudaEventSynchronize(after_l));
    // L ran after B, while n (non-blocking) was still held.
    SIM_CHECK(take_order() == "BL");
    SIM_EXPECT_RT(cudaStreamQuery(nb), cudaErrorNotReady);
    SIM_CHECK(gn.held());
    gn.release();
    SIM_RT_OK(cudaStreamSynchronize(nb));
    SIM_CHECK(take_order() == "n");
    SIM_RT_OK(cudaEventDestroy(after_l));
  }

  // 4. Later blocking work waits for the legacy stream; non-blocking does not.
  {
    Gate g;
    SIM_RT_OK(cudaLaunchHostFunc(0, Gate::hold, &g));  // stream 0 = legacy
    SIM_RT_OK(cudaLaunchHostFunc(0, mark, tag("L")));
    SIM_RT_OK(cudaLaunchHostFunc(s2, mark, tag("B")));
    SIM_RT_OK(cudaLaunchHostFunc(cudaStreamPerThread, mark, tag("P")));
    SIM_RT_OK(cudaLaunchHostFunc(nb, mark, tag("N")));
    SIM_RT_OK(cudaStreamSynchronize(nb));  // did not wait for the held legacy stream
    settle();
    SIM_CHECK(take_order() == "N");
    SIM_EXPECT_RT(cudaStreamQuery(s2), cudaErrorNotReady);
    SIM_EXPECT_RT(cudaStreamQuery(cudaStreamPerThread), cudaErrorNotReady);
    SIM_CHECK(g.held());
    g.release();
    SIM_RT_OK(cudaDeviceSynchronize());
    std::string o = take_order();
    SIM_CHECK(o == "LBP" || o == "LPB");
  }

  // 5. The legacy stream's synchronous copy sees earlier blocking work.
  {
    Gate g;
    SIM_RT_OK(cudaLaunchHostFunc(s1, Gate::hold, &g));
    SIM_RT_OK(cudaMemsetAsync(d, 9, n, s1));
    std::thread opener = release_later(g);
    SIM_RT_OK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
    opener.join();
    SIM_CHECK(h[0] == 9 && h[n - 1] == 9);
    SIM_CHECK(g.held());
  }

  // 6. Destroying a stream with pending work returns at once; work completes.
  {
    Gate g;
    cudaStream_t tmp;
    SIM_RT_OK(cudaStreamCreate(&tmp));
    SIM_RT_OK(cudaLaunchHostFunc(tmp, Gate::hold, &g));
    SIM_RT_OK(cudaMemsetAsync(d, 4, n, tmp));
    SIM_RT_OK(cudaLaunchHostFunc(tmp, mark, tag("T")));
    SIM_RT_OK(cudaStreamDestroy(tmp));  // returns with the gate still closed
    settle();
    SIM_CHECK(take_order().empty());
    SIM_CHECK(read(d) == 9);
    SIM_CHECK(g.held());
    g.release();
    SIM_RT_OK(cudaDeviceSynchronize());
    SIM_CHECK(take_order() == "T");
    SIM_RT_OK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
    SIM_CHECK(h[0] == 4);
    SIM_EXPECT_RT(cudaStreamSynchronize(tmp), cudaErrorInvalidResourceHandle);
    cudaGetLastError();
  }

  SIM_RT_OK(cudaEventDestroy(start));
  SIM_RT_OK(cudaEventDestroy(done));
  SIM_RT_OK(cudaEventDestroy(notiming));
  SIM_RT_OK(cudaStreamDestroy(s1));
  SIM_RT_OK(cudaStreamDestroy(s2));
  SIM_RT_OK(cudaStreamDestroy(nb));
  SIM_RT_OK(cudaStreamDestroy(peek));
  SIM_RT_OK(cudaFree(d));
  SIM_RT_OK(cudaFree(d2));
  std::printf("sim_streams: OK\n");
  return 0;
}
