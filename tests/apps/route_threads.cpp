// Threads: 16 threads allocate and free concurrently for at least two
// seconds, in bursts (so the hooks really meet) with short pauses (so the
// trace stays a few MB). The sim's allocator hands freed addresses out
// again at once, across threads, which is what the Order rule of
// TRACE_FORMAT.md is about. Each thread logs what it did; the manifest is
// written at the end, per thread, in each thread's order.
//
//   route_threads MANIFEST [SECONDS]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "route_manifest.h"

using route::addr;

namespace {

constexpr int kThreads = 16;
constexpr int kBurst = 8;

struct Op {
  bool alloc;
  std::uintptr_t ptr;
  std::size_t size;
};

struct ThreadLog {
  long tid = 0;
  std::vector<Op> ops;
  bool failed = false;
};

void work(ThreadLog& log, std::chrono::steady_clock::time_point until, unsigned seed) {
  log.tid = route::thread_id();
  log.ops.reserve(1 << 14);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> size_of(1, 300'000);
  std::vector<std::pair<void*, std::size_t>> held;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < kBurst; ++i) {
      void* p = nullptr;
      const std::size_t size = size_of(rng);
      if (cudaMalloc(&p, size) != cudaSuccess) {
        log.failed = true;
        return;
      }
      log.ops.push_back({true, addr(p), size});
      held.emplace_back(p, size);
    }
    std::shuffle(held.begin(), held.end(), rng);
    // Free most, keep a couple across bursts.
    while (held.size() > 2) {
      auto [p, size] = held.back();
      held.pop_back();
      log.ops.push_back({false, addr(p), size});
      if (cudaFree(p) != cudaSuccess) {
        log.failed = true;
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
  }
  for (auto [p, size] : held) {
    log.ops.push_back({false, addr(p), size});
    if (cudaFree(p) != cudaSuccess) log.failed = true;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  route::check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(seconds));
  std::vector<ThreadLog> logs(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back(work, std::ref(logs[i]), until, 1234u + static_cast<unsigned>(i));
  }
  for (auto& t : threads) t.join();

  route::Manifest m(argv[1]);
  for (const ThreadLog& log : logs) {
    route::check(!log.failed, "a cudaMalloc/cudaFree failed");
    for (const Op& op : log.ops) {
      if (op.alloc) {
        m.alloc("cudaMalloc", "device", 0, op.ptr, op.size, std::nullopt, log.tid);
      } else {
        m.free("cudaFree", "device", 0, op.ptr, op.size, std::nullopt, log.tid);
      }
    }
  }
  return 0;
}
