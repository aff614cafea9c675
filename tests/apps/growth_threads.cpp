// Eight threads run the same training loop at once, without marks; thread i
// keeps (i + 1) * 256 bytes of device memory per step, so the fastest keeps
// 2 KiB. How the threads interleave changes from run to run; the growth
// verdict must not (issue 32; tests/integration/growth_threads_test.cpp).
//
//   growth_threads          the loops (24 steps each)
//   growth_threads once     each thread allocates three buffers once and
//                           frees them: no iterations to judge growth by
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 8;
constexpr int kSteps = 24;

// Out of line, so that every thread's kept buffers come from one call site.
[[gnu::noinline]] void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

[[gnu::noinline]] bool train(int thread, std::vector<void*>& kept) {
  for (int step = 0; step < kSteps; ++step) {
    void* activations = device_alloc(256 << 10);
    void* workspace = device_alloc(64 << 10);
    if (activations == nullptr || workspace == nullptr) return false;
    cudaFree(activations);
    cudaFree(workspace);
    kept.push_back(device_alloc(static_cast<std::size_t>(thread + 1) * 256));  // the leak
  }
  return true;
}

[[gnu::noinline]] bool load_once(int thread) {
  std::vector<void*> buffers;
  for (int i = 0; i < 3; ++i) buffers.push_back(device_alloc(static_cast<std::size_t>(thread + i + 1) << 20));
  for (void* p : buffers) cudaFree(p);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool once = argc > 1 && std::strcmp(argv[1], "once") == 0;
  std::vector<std::vector<void*>> kept(kThreads);
  std::vector<char> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { ok[static_cast<std::size_t>(i)] = once ? load_once(i) : train(i, kept[static_cast<std::size_t>(i)]); });
  }
  for (std::thread& t : threads) t.join();
  for (char good : ok) {
    if (!good) {
      std::fprintf(stderr, "growth_threads: cudaMalloc failed\n");
      return 1;
    }
  }
  return 0;
}
