// Tiny self-checking helpers shared by the sim's test programs
// (tests/apps/sim_*.cpp). Header-only; no GoogleTest, so the programs stay
// plain CUDA programs built the way users build theirs.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

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

inline std::size_t gib(double n) { return static_cast<std::size_t>(n * (1ull << 30)); }
inline std::size_t mib(double n) { return static_cast<std::size_t>(n * (1ull << 20)); }

// Resident set size of this process, in bytes.
inline std::size_t rss_bytes() {
  std::ifstream st("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  st >> size >> resident;
  return resident * 4096;
}

}  // namespace simtest
