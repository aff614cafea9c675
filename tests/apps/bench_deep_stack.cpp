// Stack capture in a big process (scripts/bench.sh). The loop programs call
// cudaMalloc a few frames deep with every cache warm, where a 32-frame
// capture costs about 300 ns; in PyTorch (an H100, Python 3.12) a capture
// costs about 1.5 us: stacks of 28 frames on average and beyond 48 in Python,
// walked after the application's own work (kernel launches, the interpreter) has
// cooled the caches the unwinder reads (the stack, libunwind's per-address
// table). This program makes both conditions: its pairs are made kDepth
// frames deep, through kDepth distinct functions, and before each pair it
// writes COLD_KIB of memory (default 4096; the application's work, untimed). Only the
// cudaMalloc/cudaFree pairs are timed, each on its own: the figure is their
// median, which the 2-core shared development machine's preemptions and
// neighbours' memory traffic do not move as they move a sum.
//
//   bench_deep_stack [PAIRS [COLD_KIB]]   prints "<median ns per pair> <pairs> <frames above the leaf>"
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kDepth = 60;  // deeper than the default depth (32) and our allowance

volatile long g_sink = 0;

struct Run {
  long pairs = 0;
  std::vector<char> cold;  // written between pairs
  std::vector<double> ns;  // each pair's time
  bool failed = false;
};

// The leaf: PAIRS pairs from one stack, the caches cooled before each.
__attribute__((noinline)) void pairs_at_leaf(Run& run) {
  for (long i = 0; i < run.pairs && !run.failed; ++i) {
    for (std::size_t b = 0; b < run.cold.size(); b += 64) run.cold[b] = static_cast<char>(run.cold[b] + 1);
    const std::size_t bytes = 512 + static_cast<std::size_t>(i * 7919 % 100'000);
    void* p = nullptr;
    const auto start = std::chrono::steady_clock::now();
    run.failed = cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess;
    run.ns[static_cast<std::size_t>(i)] =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  }
}

// kDepth distinct functions (distinct return addresses, as a real stack has),
// each with work after its call, so none is a tail call.
template <int N>
__attribute__((noinline)) void level(Run& run) {
  if constexpr (N == 0) {
    pairs_at_leaf(run);
  } else {
    level<N - 1>(run);
  }
  g_sink = g_sink + N;
}

}  // namespace

int main(int argc, char** argv) {
  Run run;
  run.pairs = argc > 1 ? std::atol(argv[1]) : 2000;
  const long cold_kib = argc > 2 ? std::atol(argv[2]) : 4096;
  if (argc > 3 || run.pairs <= 0 || cold_kib < 0) {
    std::fprintf(stderr, "usage: bench_deep_stack [PAIRS > 0 [COLD_KIB >= 0]]\n");
    return 2;
  }
  run.cold.assign(static_cast<std::size_t>(cold_kib) * 1024, 0);
  if (cudaFree(nullptr) != cudaSuccess) return 3;  // context creation is not timed
  // Once untimed: the unwinder's first visit to each address (reading its
  // DWARF) is a one-time cost.
  const long pairs = run.pairs;
  run.ns.assign(static_cast<std::size_t>(pairs), 0.0);
  run.pairs = 1;
  level<kDepth>(run);
  run.pairs = pairs;
  level<kDepth>(run);
  if (run.failed) return 4;
  const auto middle = run.ns.begin() + pairs / 2;
  std::nth_element(run.ns.begin(), middle, run.ns.end());
  std::printf("%.1f %ld %d\n", *middle, run.pairs, kDepth + 1);
  return 0;
}
