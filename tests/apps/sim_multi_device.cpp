// SIMCUDA_DEVICE_COUNT=2: each device has its own capacity and address
// range; a pointer can be freed whichever device is current (unified
// addressing), and capacity returns to the device that owned it.
#include <cuda_runtime_api.h>

#include <vector>

#include "sim_test.h"

namespace {
std::size_t free_on(int dev) {
  int prev = 0;
  SIM_RT_OK(cudaGetDevice(&prev));
  SIM_RT_OK(cudaSetDevice(dev));
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_RT_OK(cudaSetDevice(prev));
  return f;
}
}  // namespace

int main() {
  int n = 0;
  SIM_RT_OK(cudaGetDeviceCount(&n));
  SIM_CHECK(n == 2);
  cudaDeviceProp prop{};
  SIM_RT_OK(cudaGetDeviceProperties(&prop, 1));
  simtest::require_sim_name(prop.name);
  const std::size_t cap = prop.totalGlobalMem;

  int dev = -1;
  SIM_RT_OK(cudaGetDevice(&dev));
  SIM_CHECK(dev == 0);
  void* a = nullptr;
  SIM_RT_OK(cudaMalloc(&a, simtest::mib(64)));
  SIM_RT_OK(cudaSetDevice(1));
  SIM_RT_OK(cudaGetDevice(&dev));
  SIM_CHECK(dev == 1);
  void* b = nullptr;
  SIM_RT_OK(cudaMalloc(&b, simtest::mib(32)));
  SIM_CHECK(free_on(0) == cap - simtest::mib(64));
  SIM_CHECK(free_on(1) == cap - simtest::mib(32));

  // Device ranges are disjoint.
  auto ua = reinterpret_cast<std::uintptr_t>(a), ub = reinterpret_cast<std::uintptr_t>(b);
  SIM_CHECK(ua + simtest::mib(64) <= ub || ub + simtest::mib(32) <= ua);

  // Data is kept apart; a device-to-device copy across devices works.
  std::vector<int> h(1024, 5), back(1024, 0);
  SIM_RT_OK(cudaMemcpy(b, h.data(), 4096, cudaMemcpyHostToDevice));
  SIM_RT_OK(cudaSetDevice(0));
  SIM_RT_OK(cudaMemset(a, 0, 4096));
  SIM_RT_OK(cudaMemcpy(a, b, 4096, cudaMemcpyDeviceToDevice));
  SIM_RT_OK(cudaMemcpy(back.data(), a, 4096, cudaMemcpyDeviceToHost));
  SIM_CHECK(back == h);

  // Free device 1's pointer while device 0 is current, and vice versa.
  SIM_RT_OK(cudaFree(b));
  SIM_CHECK(free_on(1) == cap);
  SIM_CHECK(free_on(0) == cap - simtest::mib(64));
  SIM_RT_OK(cudaSetDevice(1));
  SIM_RT_OK(cudaFree(a));
  SIM_CHECK(free_on(0) == cap);

  // Streams belong to their device.
  cudaStream_t s = nullptr;
  SIM_RT_OK(cudaStreamCreate(&s));
  int sdev = -1;
  SIM_RT_OK(cudaStreamGetDevice(s, &sdev));
  SIM_CHECK(sdev == 1);
  SIM_RT_OK(cudaStreamDestroy(s));
  SIM_EXPECT_RT(cudaSetDevice(2), cudaErrorInvalidDevice);
  cudaGetLastError();
  std::printf("sim_multi_device: OK\n");
  return 0;
}
