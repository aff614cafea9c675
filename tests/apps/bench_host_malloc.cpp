// bench_malloc_free's twin over host memory: the same loop (bench_pairs_loop.h)
// of malloc/free pairs, same sizes, same two call sites, same timing and
// output, no CUDA. scripts/bench.sh runs it bare and under heaptrack, whose
// added time per call is the baseline for ours.
//
//   bench_host_malloc [PAIRS [UNTIMED PAIRS BEFORE]]   prints "<ns per timed pair> <pairs> <untimed pairs>"
#include <cstdlib>

#include "bench_pairs_loop.h"

namespace {

volatile long g_pairs_a = 0, g_pairs_b = 0;  // as in bench_malloc_free
// Each block escapes through this store, so the compiler cannot drop a
// malloc/free pair whose memory is never used (GCC does, at -O2).
void* volatile g_last_block = nullptr;

__attribute__((noinline)) bool pair_at_site_a(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) return false;
  g_last_block = p;
  std::free(p);
  g_pairs_a = g_pairs_a + 1;
  return true;
}

__attribute__((noinline)) bool pair_at_site_b(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) return false;
  g_last_block = p;
  std::free(p);
  g_pairs_b = g_pairs_b + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const auto counts = bench_pairs::counts_from_args(argc, argv, "bench_host_malloc");
  if (!counts) return 2;
  // As bench_malloc_free creates its context before the clock starts: the
  // allocator (and a tracer's first-call set-up) is warm before timing.
  g_last_block = std::malloc(1);
  std::free(g_last_block);
  return bench_pairs::time_pairs<&pair_at_site_a, &pair_at_site_b>(*counts);
}
