// The hook-overhead benchmark's program: N cudaMalloc/cudaFree pairs of
// irregular sizes from two call sites, timed as a whole. scripts/bench.sh
// runs it with and without cumemtrace, side by side, on the simulated device.
// Two sites, so stack capture sees two distinct stacks, as a training loop
// allocating weights and activations would. bench_host_malloc is its twin
// over host malloc/free (the same loop, bench_pairs_loop.h), for heaptrack.
//
//   bench_malloc_free [PAIRS [UNTIMED PAIRS BEFORE]]   prints "<ns per timed pair> <pairs> <untimed pairs>"
#include <cuda_runtime_api.h>

#include "bench_pairs_loop.h"

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
  const auto counts = bench_pairs::counts_from_args(argc, argv, "bench_malloc_free");
  if (!counts) return 2;
  if (cudaFree(nullptr) != cudaSuccess) return 3;  // context creation is not timed
  return bench_pairs::time_pairs<&pair_at_site_a, &pair_at_site_b>(*counts);
}
