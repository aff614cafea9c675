// The timed loop shared by the hook-overhead benchmark's program
// (bench_malloc_free: cudaMalloc/cudaFree) and its host twin
// (bench_host_malloc: malloc/free, timed under heaptrack), so that both make
// the same calls, in the same order, from the same number of sites, timed and
// printed the same way: scripts/bench.sh compares the two per-call costs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace bench_pairs {

// One allocate+free pair of `bytes` at a call site; false on failure.
using PairAtSite = bool (*)(std::size_t bytes);

// PAIRS from the command line (default a million); 0 after printing usage.
inline long pairs_from_args(int argc, char** argv, const char* program) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 1'000'000;
  if (pairs <= 0) std::fprintf(stderr, "usage: %s [PAIRS > 0]\n", program);
  return pairs > 0 ? pairs : 0;
}

// Runs `pairs` pairs alternating between the two sites (template arguments:
// direct calls, as in a program) and prints "<ns per pair> <pairs>". Returns
// the process's exit status: 0, or 4 if a pair failed.
template <PairAtSite SiteA, PairAtSite SiteB>
int time_pairs(long pairs) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    // Irregular sizes from 512 B to about 100 KB (a multiplicative walk).
    const std::size_t bytes = 512 + static_cast<std::size_t>(i * 7919 % 100'000);
    if (!((i & 1) ? SiteB(bytes) : SiteA(bytes))) return 4;
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  std::printf("%.1f %ld\n", elapsed.count() / static_cast<double>(pairs), pairs);
  return 0;
}

}  // namespace bench_pairs
