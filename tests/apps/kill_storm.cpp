// The program SIGKILL strikes (tests/integration/killed_trace_test.cpp):
// THREADS threads allocate and free device memory without end, each
// allocation's size saying which thread made it and its number in that
// thread's sequence (size = 1 + thread + THREADS * k), so the test can tell
// from the trace alone whether an event is missing, doubled or invented.
// After each cudaMalloc and cudaFree returns, the thread stores how many it
// has made into PROGRESS (a shared mapping of 2 × THREADS counters, which the
// kernel keeps when the process is killed): those events were recorded, and
// the completed trace must hold every one of them.
//
//   kill_storm THREADS PROGRESS [hog]   prints "ready" once every thread has
//   made its first allocation; with `hog` the main thread then takes host memory, 1 MiB at a
//   time, until the kernel's OOM killer ends the process (a memory cgroup).
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "robustness_support.h"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: kill_storm THREADS PROGRESS [hog]\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int fd = ::open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0600);
  const std::size_t bytes = sizeof(std::uint64_t) * 2 * static_cast<std::size_t>(threads);
  if (threads <= 0 || fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return 2;
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 2;
  auto* progress = static_cast<std::atomic<std::uint64_t>*>(map);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (std::uint64_t k = 0;; ++k) {
        void* p = must_malloc(1 + static_cast<std::size_t>(t) + static_cast<std::size_t>(threads) * k);
        progress[2 * t].store(k + 1, std::memory_order_release);
        must_free(p);
        progress[2 * t + 1].store(k + 1, std::memory_order_release);
      }
    });
  }
  // Ready once every thread has made its first allocation: the trace (and
  // its pending file) exist, however slowly a sanitizer runs the start.
  for (int t = 0; t < threads; ++t) {
    while (progress[2 * t].load(std::memory_order_acquire) == 0) std::this_thread::yield();
  }
  std::printf("ready\n");
  std::fflush(stdout);
  if (argc == 4) {
    std::vector<char*> hog;
    for (;;) {
      auto* block = static_cast<char*>(std::malloc(1 << 20));
      if (block == nullptr) continue;
      std::memset(block, 1, 1 << 20);
      hog.push_back(block);
    }
  }
  for (auto& w : workers) w.join();
}
