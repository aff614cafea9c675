// Built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM=1 (like nvcc
// --default-stream per-thread): the headers route calls to the _ptds/_ptsz
// entry points and stream 0 means the calling thread's default stream. The
// ctest sim_ptds_symbols checks with nm that this binary really references
// the _ptds/_ptsz symbols.
//
// The per-thread default stream is a blocking stream of its own thread: it
// waits for earlier legacy-stream work, but not for another thread's default
// stream nor for non-blocking streams (tests/sim/README.md, "Streams and
// events"; CUDA Runtime API, "Stream synchronization behavior"). No check
// bounds wall-clock time from above: a stream's slow step is a Gate, a host
// function that holds its stream until the test opens it, and queries and
// host-function counters say what ran meanwhile. This relies on the sim
// running each stream's host functions on that stream's own worker (the real
// cudaLaunchHostFunc may serialize them), so it is a test of the sim only.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "sim_test.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "sim_ptds must be built with CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

namespace {

using simtest::Gate;
using simtest::settle;

void CUDART_CB count(void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); }

}  // namespace

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

  // Each thread has its own default stream: another thread's stream-0 work,
  // synchronize and synchronous copy do not wait for this thread's held work.
  {
    Gate g;
    std::atomic<int> ran{0};
    SIM_RT_OK(cudaLaunchHostFunc(0, Gate::hold, &g));  // this thread's stream
    SIM_RT_OK(cudaMemsetAsync(a, 2, n, 0));
    SIM_RT_OK(cudaLaunchHostFunc(0, count, &ran));
    bool other_ok = false;
    std::thread other([&] {
      unsigned char hb[16] = {};
      SIM_RT_OK(cudaMemsetAsync(b, 3, sizeof hb, 0));
      SIM_RT_OK(cudaStreamSynchronize(0));
      SIM_RT_OK(cudaStreamQuery(0));
      SIM_RT_OK(cudaMemcpy(hb, b, sizeof hb, cudaMemcpyDeviceToHost));
      other_ok = hb[0] == 3 && hb[15] == 3;
    });
    other.join();
    SIM_CHECK(other_ok);
    SIM_EXPECT_RT(cudaStreamQuery(0), cudaErrorNotReady);  // ours still held
    settle();
    SIM_CHECK(ran.load() == 0);
    SIM_CHECK(g.held());
    g.release();
    SIM_RT_OK(cudaStreamSynchronize(0));
    SIM_CHECK(ran.load() == 1);  // synchronize waited for all of it
    SIM_RT_OK(cudaMemcpy(h.data(), a, n, cudaMemcpyDeviceToHost));
    SIM_CHECK(h[0] == 2 && h[n - 1] == 2);
  }

  // Nor does it wait for a non-blocking stream; the legacy stream, though,
  // waits for it (it is a blocking stream).
  {
    cudaStream_t nb;
    SIM_RT_OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    Gate gn;
    SIM_RT_OK(cudaLaunchHostFunc(nb, Gate::hold, &gn));
    SIM_RT_OK(cudaMemsetAsync(a, 4, n, 0));
    SIM_RT_OK(cudaStreamSynchronize(0));
    SIM_EXPECT_RT(cudaStreamQuery(nb), cudaErrorNotReady);
    SIM_CHECK(gn.held());
    gn.release();
    SIM_RT_OK(cudaStreamSynchronize(nb));

    Gate gp;
    std::atomic<int> ran{0};
    SIM_RT_OK(cudaLaunchHostFunc(0, Gate::hold, &gp));
    SIM_RT_OK(cudaLaunchHostFunc(cudaStreamLegacy, count, &ran));
    SIM_EXPECT_RT(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady);
    settle();
    SIM_CHECK(ran.load() == 0);
    SIM_CHECK(gp.held());
    gp.release();
    SIM_RT_OK(cudaStreamSynchronize(cudaStreamLegacy));
    SIM_CHECK(ran.load() == 1);
    SIM_RT_OK(cudaStreamDestroy(nb));
  }

  // The per-thread stream is blocking: it waits for earlier legacy work. The
  // gate opens from another thread while this one is in the copy; the delay
  // only gives a copy that does not wait time to read memory too early.
  {
    Gate g;
    SIM_RT_OK(cudaLaunchHostFunc(cudaStreamLegacy, Gate::hold, &g));
    SIM_RT_OK(cudaMemsetAsync(a, 5, n, cudaStreamLegacy));
    std::thread opener([&g] {
      settle();
      g.release();
    });
    SIM_RT_OK(cudaMemcpyAsync(h.data(), a, n, cudaMemcpyDeviceToHost, 0));
    SIM_CHECK(h[0] == 5 && h[n - 1] == 5);  // to pageable memory: complete on return
    opener.join();
    SIM_CHECK(g.held());
  }

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
