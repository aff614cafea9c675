// Tiny self-checking helpers shared by the sim's test programs
// (tests/apps/sim_*.cpp). Header-only; no GoogleTest, so the programs stay
// plain CUDA programs built the way users build theirs.
#pragma once

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#define SIM_FAIL(...)                                              \
  do {                                                             \
    std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
    std::fprintf(stderr, __VA_ARGS__);                             \
    std::fprintf(stderr, "\n");                                    \
    std::exit(1);                                                  \
  } while (0)

#define SIM_CHECK(cond)                                  \
  do {                                                   \
    if (!(cond)) SIM_FAIL("check failed: %s", #cond);    \
  } while (0)

// Runtime calls: expect an exact cudaError_t.
#define SIM_EXPECT_RT(expr, want)                                                      \
  do {                                                                                 \
    cudaError_t sim_e_ = (expr);                                                       \
    if (sim_e_ != (want)) {                                                            \
      SIM_FAIL("%s returned %d (%s), expected %d (%s)", #expr, static_cast<int>(sim_e_), \
               cudaGetErrorName(sim_e_), static_cast<int>(want), cudaGetErrorName(want)); \
    }                                                                                  \
  } while (0)
#define SIM_RT_OK(expr) SIM_EXPECT_RT(expr, cudaSuccess)

// Driver calls: expect an exact CUresult.
#define SIM_EXPECT_CU(expr, want)                                                  \
  do {                                                                             \
    CUresult sim_r_ = (expr);                                                      \
    if (sim_r_ != (want)) {                                                        \
      SIM_FAIL("%s returned %d, expected %d", #expr, static_cast<int>(sim_r_),     \
               static_cast<int>(want));                                            \
    }                                                                              \
  } while (0)
#define SIM_CU_OK(expr) SIM_EXPECT_CU(expr, CUDA_SUCCESS)

namespace simtest {

// Whether this process mapped a library whose path contains `needle`.
inline bool mapped(const char* needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

inline void require_sim_name(const char* name) {
  if (!std::strstr(name, "SimCUDA")) {
    SIM_FAIL("device is '%s', not the simulated device: run with "
             "LD_LIBRARY_PATH=<build>/sim", name);
  }
}

// Device 0's properties through the runtime, after checking that the runtime
// is the simulated one.
inline cudaDeviceProp require_runtime_on_sim() {
  cudaDeviceProp prop{};
  SIM_RT_OK(cudaGetDeviceProperties(&prop, 0));
  require_sim_name(prop.name);
  return prop;
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Holds a stream until release(): enqueue Gate::hold with cudaLaunchHostFunc
// and everything behind it stays pending for as long as the test looks, so
// order and overlap are checked with queries, events and counters instead of
// wall-clock bounds a loaded machine can break (sim_streams, sim_ptds). The
// sim runs each stream's host functions on that stream's own thread; real
// CUDA forbids a host function that waits on other CUDA work, so this is a
// test of the sim only. The timeout is no bound on the sim's speed: it only
// turns a hang (a stream that waits for the held one when it should not) into
// a failure, through held().
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool timed_out = false;
  double held_ms = 0;  // how long hold() waited

  static void CUDART_CB hold(void* p) {
    auto* g = static_cast<Gate*>(p);
    auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(g->mu);
    if (!g->cv.wait_for(lk, std::chrono::seconds(10), [g] { return g->open; })) {
      g->timed_out = true;
    }
    g->held_ms = ms_since(t0);
  }
  void release() {
    {
      std::lock_guard<std::mutex> lk(mu);
      open = true;
    }
    cv.notify_all();
  }
  // False once hold() gave up: the stream was not held while the test looked.
  bool held() {
    std::lock_guard<std::mutex> lk(mu);
    return !timed_out;
  }
  double held_for_ms() {
    std::lock_guard<std::mutex> lk(mu);
    return held_ms;
  }
};

// Before a check that something has not run yet: gives work that a broken
// sim would run too early the time to do so. A correct sim never runs it, so
// this wait is no bound on anything.
inline void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

inline std::size_t gib(double n) { return static_cast<std::size_t>(n * (1ull << 30)); }
inline std::size_t mib(double n) { return static_cast<std::size_t>(n * (1ull << 20)); }

// What `call` writes to stderr (the sim's warnings), passed on to stderr too.
template <typename F>
std::string capture_stderr(F call) {
  char path[] = "/tmp/sim_stderr_XXXXXX";
  const int fd = mkstemp(path);
  SIM_CHECK(fd >= 0);
  const int saved = dup(2);
  dup2(fd, 2);
  call();
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  std::fprintf(stderr, "%s", text.str().c_str());
  return text.str();
}

// How many times `needle` occurs in `text`.
inline int count_of(const std::string& text, const char* needle) {
  int n = 0;
  for (std::size_t pos = 0; (pos = text.find(needle, pos)) != std::string::npos; ++pos) ++n;
  return n;
}

// Resident set size of this process, in bytes.
inline std::size_t rss_bytes() {
  std::ifstream st("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  st >> size >> resident;
  return resident * 4096;
}

}  // namespace simtest
