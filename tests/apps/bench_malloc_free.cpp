// The hook-overhead benchmark's program: N cudaMalloc/cudaFree pairs of
// irregular sizes, timed as a whole. scripts/bench.sh runs it with and
// without cumemtrace, side by side, on the simulated device.
//
//   bench_malloc_free [PAIRS]     prints "<ns per pair> <pairs>"
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 1'000'000;
  if (pairs <= 0) {
    std::fprintf(stderr, "usage: bench_malloc_free [PAIRS > 0]\n");
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) return 3;  // context creation is not timed
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    void* p = nullptr;
    // Irregular sizes from 512 B to about 100 KB (a multiplicative walk).
    if (cudaMalloc(&p, 512 + static_cast<size_t>(i * 7919 % 100'000)) != cudaSuccess) return 4;
    if (cudaFree(p) != cudaSuccess) return 5;
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  std::printf("%.1f %ld\n", elapsed.count() / static_cast<double>(pairs), pairs);
  return 0;
}
