// SIMCUDA_* parsing. Usage: sim_env <expected capacity bytes> <expected
// device count> <expected number of warnings>. A bad value prints one clear
// warning on stderr and falls back to the default, never a crash.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>

#include "sim_test.h"

int main(int argc, char** argv) {
  if (argc != 4) SIM_FAIL("usage: sim_env BYTES COUNT WARNINGS");
  const std::size_t want_bytes = std::strtoull(argv[1], nullptr, 10);
  const int want_count = std::atoi(argv[2]);
  const int want_warnings = std::atoi(argv[3]);

  // Capture stderr while the sim initialises.
  int count = 0;
  cudaError_t e, e2, e3;
  cudaDeviceProp prop{};
  cudaStream_t s;
  const std::string err = simtest::capture_stderr([&] {
    e = cudaGetDeviceCount(&count);
    e2 = cudaGetDeviceProperties(&prop, 0);
    e3 = cudaStreamCreate(&s);
  });

  SIM_RT_OK(e);
  SIM_RT_OK(e2);
  SIM_RT_OK(e3);
  simtest::require_sim_name(prop.name);
  SIM_CHECK(count == want_count);
  SIM_CHECK(prop.totalGlobalMem == want_bytes);
  const int warnings = simtest::count_of(err, "simcuda: warning");
  if (warnings != want_warnings) SIM_FAIL("%d warnings, expected %d", warnings, want_warnings);
  std::printf("sim_env: OK\n");
  return 0;
}
