// The hook-overhead benchmark's program: N cudaMalloc/cudaFree pairs of
// irregular sizes from two call sites, timed as a whole. scripts/bench.sh
// runs it with and without cumemtrace, side by side, on the simulated device.
// Two sites, so stack capture sees two distinct stacks, as a training loop
// allocating weights and activations would.
//
//   bench_malloc_free [PAIRS]     prints "<ns per pair> <pairs>"
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

// Pairs made at each site. Distinct counters also keep the compiler from
// folding the two identical functions into one (-fipa-icf).
volatile long g_pairs_a = 0, g_pairs_b = 0;

// noinline, with work after each call: two real call sites, two stacks.
__attribute__((noinline)) bool pair_at_site_a(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return false;
  const bool freed = cudaFree(p) == cudaSuccess;
  g_pairs_a = g_pairs_a + 1;
  return freed;
}

__attribute__((noinline)) bool pair_at_site_b(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return false;
  const bool freed = cudaFree(p) == cudaSuccess;
  g_pairs_b = g_pairs_b + 1;
  return freed;
}

}  // namespace

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 1'000'000;
  if (pairs <= 0) {
    std::fprintf(stderr, "usage: bench_malloc_free [PAIRS > 0]\n");
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) return 3;  // context creation is not timed
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    // Irregular sizes from 512 B to about 100 KB (a multiplicative walk).
    const std::size_t bytes = 512 + static_cast<std::size_t>(i * 7919 % 100'000);
    if (!((i & 1) ? pair_at_site_b(bytes) : pair_at_site_a(bytes))) return 4;
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  std::printf("%.1f %ld\n", elapsed.count() / static_cast<double>(pairs), pairs);
  return 0;
}
