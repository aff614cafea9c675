// 16 threads allocate, use and free concurrently (cudaMalloc, cudaMallocAsync
// on their own streams, memcpy checks). SIMCUDA_MALLOC_LATENCY_US=5000 and
// SIMCUDA_FREE_LATENCY_US=5000 (tests/apps/sim_apps.cmake): the sim must not
// hold a global lock across the latency, so 16 threads overlap their sleeps.
// The latency is long against the threads' own work so that a loaded
// machine or a sanitizer build (ASan took 1.96 s with 1 ms latencies, CI
// 2026-11-24) cannot pass for serialisation.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "sim_test.h"

int main() {
  simtest::require_runtime_on_sim();
  constexpr int kThreads = 16, kIters = 60;
  constexpr double kLatencyMs = 5.0;  // each of cudaMalloc and cudaFree
  std::atomic<int> failures{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      std::mt19937 rng(1234 + t);
      cudaStream_t s;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) ++failures;
      std::vector<unsigned char> h(4096), back(4096);
      for (int i = 0; i < kIters; ++i) {
        std::size_t size = 512 + rng() % (4u << 20);
        void* p = nullptr;
        bool async = (i % 3) == 0;
        cudaError_t e = async ? cudaMallocAsync(&p, size, s) : cudaMalloc(&p, size);
        if (e != cudaSuccess) {
          ++failures;
          continue;
        }
        for (auto& c : h) c = static_cast<unsigned char>(rng());
        std::size_t n = std::min<std::size_t>(size, h.size());
        if (cudaMemcpyAsync(p, h.data(), n, cudaMemcpyHostToDevice, s) != cudaSuccess ||
            cudaMemcpyAsync(back.data(), p, n, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
            cudaStreamSynchronize(s) != cudaSuccess ||
            std::memcmp(h.data(), back.data(), n) != 0) {
          ++failures;
        }
        e = async ? cudaFreeAsync(p, s) : cudaFree(p);
        if (e != cudaSuccess) ++failures;
      }
      if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) {
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  SIM_CHECK(failures.load() == 0);
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(f == t);  // everything came back
  // Serialised latency alone would be 16 * 60 * 10 ms * 2/3 = 6.4 s
  // (cudaMalloc + cudaFree pay 10 ms, the async third pays nothing);
  // overlapped, 0.4 s.
  const double serial_ms = kThreads * kIters * 2 * kLatencyMs * 2 / 3;
  if (ms > serial_ms / 2) SIM_FAIL("took %.0f ms; latencies look serialised (%.0f ms)", ms, serial_ms);
  std::printf("sim_threads: OK (%.0f ms, serialised would be >= %.0f ms)\n", ms, serial_ms);
  return 0;
}
