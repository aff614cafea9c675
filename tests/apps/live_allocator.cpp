// Allocates on the device over a few seconds, printing a line per step: for
// the live view's tests (`cumemtrace run --live`, `cumemtrace top`), which
// look for the view's figures and for these lines, readable above it.
//
//   live_allocator [STEPS] [STEP_MS]     (default 12 steps of 250 ms)
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void* must_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    std::fprintf(stderr, "live_allocator: cudaMalloc failed\n");
    std::exit(1);
  }
  return p;
}

// noinline: each is a frame of its own, so the top call site reads
// "grow_cache ← main" whatever the optimisation level.
[[gnu::noinline]] void* grow_cache() { return must_alloc(64u << 20); }
[[gnu::noinline]] void* scratch() { return must_alloc(1u << 20); }

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 12;
  const int step_ms = argc > 2 ? std::atoi(argv[2]) : 250;
  std::vector<void*> cache;
  for (int step = 1; step <= steps; ++step) {
    cache.push_back(grow_cache());
    void* s = scratch();
    cudaFree(s);
    std::printf("live_allocator: step %d of %d, cache %d MiB\n", step, steps, step * 64);
    std::fflush(stdout);
    ::usleep(static_cast<useconds_t>(step_ms) * 1000);
  }
  for (void* p : cache) cudaFree(p);
  std::printf("live_allocator: done\n");
  return 0;
}
