// SIMCUDA_* parsing. Usage: sim_env <expected capacity bytes> <expected
// device count> <expected number of warnings>. A bad value prints one clear
// warning on stderr and falls back to the default, never a crash.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "sim_test.h"

int main(int argc, char** argv) {
  if (argc != 4) SIM_FAIL("usage: sim_env BYTES COUNT WARNINGS");
  const std::size_t want_bytes = std::strtoull(argv[1], nullptr, 10);
  const int want_count = std::atoi(argv[2]);
  const int want_warnings = std::atoi(argv[3]);

  // Capture stderr while the sim initialises.
  char path[] = "/tmp/sim_env_XXXXXX";
  int fd = mkstemp(path);
  SIM_CHECK(fd >= 0);
  int saved = dup(2);
  dup2(fd, 2);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  cudaDeviceProp prop{};
  cudaError_t e2 = cudaGetDeviceProperties(&prop, 0);
  cudaStream_t s;
  cudaError_t e3 = cudaStreamCreate(&s);
  dup2(saved, 2);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  const std::string err = ss.str();
  std::fprintf(stderr, "%s", err.c_str());

  SIM_RT_OK(e);
  SIM_RT_OK(e2);
  SIM_RT_OK(e3);
  simtest::require_sim_name(prop.name);
  SIM_CHECK(count == want_count);
  SIM_CHECK(prop.totalGlobalMem == want_bytes);
  int warnings = 0;
  for (std::size_t pos = 0; (pos = err.find("simcuda: warning", pos)) != std::string::npos; ++pos) {
    ++warnings;
  }
  if (warnings != want_warnings) SIM_FAIL("%d warnings, expected %d", warnings, want_warnings);
  std::printf("sim_env: OK\n");
  return 0;
}
