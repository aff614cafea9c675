// The preload's resident memory per live allocation: makes LIVE cudaMalloc
// allocations of irregular small sizes, keeps them all live, and reads its
// own VmRSS and VmHWM (/proc/self/status) before and with them live, then
// frees them. scripts/bench.sh runs it bare and under cumemtrace: the
// difference of the growths is what cumemtrace keeps per live allocation
// (its live table, the pool's blocks). The simulated device's own
// bookkeeping is in both runs; its device memory is never touched, so it is
// not resident (tests/sim/README.md).
//
//   bench_live_rss [LIVE]   prints "<VmRSS KiB before> <VmRSS KiB live> <VmHWM KiB> <LIVE>"
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

// The "<field>: N kB" line of /proc/self/status, in KiB; -1 if absent.
long status_kib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::atol(line + n + 1);
      break;
    }
  }
  std::fclose(f);
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  const long live = argc > 1 ? std::atol(argv[1]) : 1'000'000;
  if (live <= 0) {
    std::fprintf(stderr, "usage: bench_live_rss [LIVE > 0]\n");
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) return 3;  // the context, before the first reading
  // The program's own array of pointers is resident before the first
  // reading, so only the allocations' cost is in the difference.
  std::vector<void*> blocks(static_cast<std::size_t>(live), nullptr);
  const long rss_before = status_kib("VmRSS");
  for (long i = 0; i < live; ++i) {
    // Irregular sizes from 512 B to about 8 KB: packed into shared pages by
    // the device (and by the caching pool), as small tensors are.
    const std::size_t bytes = 512 + static_cast<std::size_t>(i * 7919 % 7680);
    if (cudaMalloc(&blocks[static_cast<std::size_t>(i)], bytes) != cudaSuccess) {
      std::fprintf(stderr, "bench_live_rss: cudaMalloc %ld of %ld failed\n", i + 1, live);
      return 4;
    }
  }
  const long rss_live = status_kib("VmRSS");
  const long hwm = status_kib("VmHWM");
  for (void* p : blocks) {
    if (cudaFree(p) != cudaSuccess) return 5;
  }
  if (rss_before < 0 || rss_live < 0 || hwm < 0) {
    std::fprintf(stderr, "bench_live_rss: cannot read VmRSS/VmHWM from /proc/self/status\n");
    return 6;
  }
  std::printf("%ld %ld %ld %ld\n", rss_before, rss_live, hwm, live);
  return 0;
}
