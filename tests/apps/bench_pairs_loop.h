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
#include <optional>

namespace bench_pairs {

// One allocate+free pair of `bytes` at a call site; false on failure.
using PairAtSite = bool (*)(std::size_t bytes);

// Pairs run before the clock starts, by default. A tracer pays one-time
// costs at its first calls: naming each new stack's frames (cumemtrace),
// starting the interpreter that reads its pipe (heaptrack: the program blocks
// on the full pipe meanwhile, about 0.4 s on the 2-core development machine).
// Untimed, they do not make the time per call depend on how many pairs a run
// makes. A whole-run measurement passes 0.
constexpr long kDefaultWarmUpPairs = 20'000;

struct Counts {
  long pairs = 0;    // timed
  long warm_up = 0;  // untimed, before
};

// [PAIRS [WARM_UP]] from the command line (default a million, and
// kDefaultWarmUpPairs); nullopt after printing usage.
inline std::optional<Counts> counts_from_args(int argc, char** argv, const char* program) {
  const Counts counts{argc > 1 ? std::atol(argv[1]) : 1'000'000, argc > 2 ? std::atol(argv[2]) : kDefaultWarmUpPairs};
  if (argc > 3 || counts.pairs <= 0 || counts.warm_up < 0) {
    std::fprintf(stderr, "usage: %s [PAIRS > 0 [UNTIMED PAIRS BEFORE >= 0]]\n", program);
    return std::nullopt;
  }
  return counts;
}

// Runs `counts.pairs` pairs alternating between the two sites (template
// arguments: direct calls, as in a program) after the same sequence's first
// `counts.warm_up` untimed, and prints "<ns per timed pair> <pairs> <untimed
// pairs>". Returns the process's exit status: 0, or 4 if a pair failed.
template <PairAtSite SiteA, PairAtSite SiteB>
int time_pairs(Counts counts) {
  const auto run = [](long end) {
    for (long i = 0; i < end; ++i) {
      // Irregular sizes from 512 B to about 100 KB (a multiplicative walk).
      const std::size_t bytes = 512 + static_cast<std::size_t>(i * 7919 % 100'000);
      if (!((i & 1) ? SiteB(bytes) : SiteA(bytes))) return false;
    }
    return true;
  };
  if (!run(counts.warm_up)) return 4;
  const auto start = std::chrono::steady_clock::now();
  if (!run(counts.pairs)) return 4;
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  std::printf("%.1f %ld %ld\n", elapsed.count() / static_cast<double>(counts.pairs), counts.pairs, counts.warm_up);
  return 0;
}

}  // namespace bench_pairs
