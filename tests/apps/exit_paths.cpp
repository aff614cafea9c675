// Ways a program exits that the trace must survive, each with device memory
// freed on the way out. Prints what it allocated and freed ("allocs N
// frees M") before the exit begins, so the test can check the trace.
//
//   exit_paths static-dtor       a static object's destructor frees, then calls exit(5)
//   exit_paths atexit-before     an atexit handler registered before the first
//                                CUDA call frees, then calls exit(6)
//   exit_paths atexit-after      the same, registered after the trace opened
//   exit_paths thread-exit       4 threads allocate and free without pause; a
//                                fifth calls exit(9) in the middle
//   exit_paths main-pthread-exit main calls pthread_exit while a worker still
//                                allocates; the process must end when it does
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "robustness_support.h"

namespace {

void* g_kept = nullptr;

void report(int allocs, int frees) {
  std::printf("allocs %d frees %d\n", allocs, frees);
  std::fflush(stdout);
}

struct FreesAndExitsOnDestruction {
  ~FreesAndExitsOnDestruction() {
    must_free(g_kept);
    std::exit(5);
  }
};

void free_kept_and_exit() {
  must_free(g_kept);
  std::exit(6);
}

void churn(std::atomic<long>* pairs) {
  for (size_t i = 0;; ++i) {
    must_free(must_malloc(512 + (i * 7919) % 65536));
    pairs->fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "static-dtor") {
    static FreesAndExitsOnDestruction teardown;
    g_kept = must_malloc(1 << 20);
    void* other = must_malloc(2 << 20);
    must_free(other);
    report(2, 2);
    return 0;
  }
  if (mode == "atexit-before" || mode == "atexit-after") {
    if (mode == "atexit-before") std::atexit(free_kept_and_exit);
    g_kept = must_malloc(1 << 20);
    if (mode == "atexit-after") std::atexit(free_kept_and_exit);
    report(1, 1);
    return 0;
  }
  if (mode == "thread-exit") {
    static std::atomic<long> pairs{0};
    for (int i = 0; i < 4; ++i) std::thread(churn, &pairs).detach();
    std::thread([] {
      while (pairs.load() < 2000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::exit(9);
    }).detach();
    for (;;) pause();
  }
  if (mode == "main-pthread-exit") {
    std::thread([] {
      for (int i = 0; i < 50; ++i) {
        must_free(must_malloc(4096));
        std::this_thread::sleep_for(std::chrono::milliseconds(4));
      }
      report(50, 50);
    }).detach();
    pthread_exit(nullptr);
  }
  std::fprintf(stderr, "usage: exit_paths static-dtor|atexit-before|atexit-after|thread-exit|main-pthread-exit\n");
  return 2;
}
