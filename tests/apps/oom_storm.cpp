// Out-of-memory storms (issue 6, faults): THREADS threads, ROUNDS rounds
// each, on a small device. Every round a thread first asks for more than the
// device holds (cudaMalloc, or cudaMallocAsync on its own stream on odd
// rounds), then for a near-capacity block (three tenths of the device, a
// little less each time) until it gets it: while three others hold theirs
// it fails, and it succeeds once they have freed. After every call the
// thread reads its last-error state (cudaPeekAtLastError, cudaGetLastError
// twice) and checks the free that follows.
//
// The output is what a program can tell of CUDA and is the same with and
// without cumemtrace, except the last line, the number of contended
// failures, which depends on scheduling:
//
//   too-much cudaMalloc: CODE peek CODE get CODE then CODE x N
//   too-much cudaMallocAsync: ... x N
//   near-capacity failure: CODE peek CODE get CODE then CODE   (each outcome once)
//   near-capacity success: get CODE, free CODE x N
//   near-capacity failures N
//
//   oom_storm THREADS ROUNDS
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

std::mutex g_lock;
std::map<std::string, long> g_outcomes;  // line → count
long g_contended_failures = 0;
bool g_gave_up = false;

void count(const std::string& line, long n = 1) {
  std::lock_guard<std::mutex> hold(g_lock);
  g_outcomes[line] += n;
}

// The calling thread's last-error state after a call that returned `rc`.
std::string outcome(cudaError_t rc) {
  const cudaError_t peek = cudaPeekAtLastError();
  const cudaError_t get = cudaGetLastError();
  const cudaError_t again = cudaGetLastError();
  return std::string(cudaGetErrorName(rc)) + " peek " + cudaGetErrorName(peek) + " get " + cudaGetErrorName(get) +
         " then " + cudaGetErrorName(again);
}

void storm(int thread, int rounds, std::size_t total) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    count("cudaStreamCreateWithFlags failed");
    return;
  }
  long contended = 0;
  const auto give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int round = 0; round < rounds; ++round) {
    void* p = nullptr;
    const std::size_t too_much = total + (std::size_t{1} << 20);
    if (round % 2 == 0) {
      const cudaError_t rc = cudaMalloc(&p, too_much);
      count("too-much cudaMalloc: " + outcome(rc));
    } else {
      const cudaError_t rc = cudaMallocAsync(&p, too_much, stream);
      count("too-much cudaMallocAsync: " + outcome(rc));
    }
    // Three tenths of the device, less a few MiB that vary: three fit.
    const std::size_t near = total / 10 * 3 - (static_cast<std::size_t>(round * 7 + thread * 13) % 32 << 20);
    for (;;) {
      p = nullptr;
      const cudaError_t rc = cudaMalloc(&p, near);
      if (rc == cudaSuccess) break;
      count("near-capacity failure: " + outcome(rc), 0);
      ++contended;
      if (std::chrono::steady_clock::now() > give_up_at) {
        std::lock_guard<std::mutex> hold(g_lock);
        g_gave_up = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const cudaError_t get = cudaGetLastError();
    std::this_thread::sleep_for(std::chrono::microseconds(100 + 50 * (thread % 4)));
    const cudaError_t freed = cudaFree(p);
    count(std::string("near-capacity success: get ") + cudaGetErrorName(get) + ", free " + cudaGetErrorName(freed));
  }
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  std::lock_guard<std::mutex> hold(g_lock);
  g_contended_failures += contended;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: oom_storm THREADS ROUNDS\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int rounds = std::atoi(argv[2]);
  std::size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 3;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(storm, t, rounds, total);
  for (auto& t : pool) t.join();
  for (const auto& [line, n] : g_outcomes) {
    if (n == 0) {
      std::printf("%s\n", line.c_str());  // an outcome whose count depends on scheduling
    } else {
      std::printf("%s x %ld\n", line.c_str(), n);
    }
  }
  std::printf("near-capacity failures %ld\n", g_contended_failures);
  if (g_gave_up) std::fprintf(stderr, "oom_storm: a near-capacity request never succeeded in 30 s\n");
  return g_gave_up ? 1 : 0;
}
