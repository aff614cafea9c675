// The simulated device is what got loaded, and the basic runtime memory
// calls round-trip data: cudaMalloc/cudaMemcpy/cudaMemset/cudaFree,
// cudaMemGetInfo, device properties.
#include <cuda_runtime_api.h>

#include <vector>

#include "sim_test.h"

int main() {
  const cudaDeviceProp prop = simtest::require_runtime_on_sim();
  // The loader picked the sim's runtime (via LD_LIBRARY_PATH), and that
  // runtime dlopen()ed the sim's driver.
  SIM_CHECK(simtest::mapped("sim/libcudart.so.13"));
  SIM_CHECK(simtest::mapped("sim/libcuda.so.1"));
  SIM_CHECK(prop.major == 9 && prop.minor == 0);
  SIM_CHECK(prop.totalGlobalMem == simtest::gib(16));  // the default capacity

  int count = 0;
  SIM_RT_OK(cudaGetDeviceCount(&count));
  SIM_CHECK(count == 1);
  int rtv = 0, drv = 0;
  SIM_RT_OK(cudaRuntimeGetVersion(&rtv));
  SIM_RT_OK(cudaDriverGetVersion(&drv));
  SIM_CHECK(rtv == 13000 && drv >= rtv);
  int v = 0;
  SIM_RT_OK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
  SIM_CHECK(v == 9);

  SIM_RT_OK(cudaFree(nullptr));  // creates the context
  std::size_t free0 = 0, total = 0;
  SIM_RT_OK(cudaMemGetInfo(&free0, &total));
  SIM_CHECK(total == prop.totalGlobalMem && free0 == total);

  const std::size_t n = 1 << 20;
  void* d = nullptr;
  SIM_RT_OK(cudaMalloc(&d, n));
  SIM_CHECK(d != nullptr);
  SIM_CHECK(reinterpret_cast<std::uintptr_t>(d) % 512 == 0);
  std::size_t free1 = 0;
  SIM_RT_OK(cudaMemGetInfo(&free1, &total));
  // Up to 1 MiB is packed into a shared page; this first one opens a page.
  SIM_CHECK(free1 == free0 - 2 * n);

  std::vector<unsigned char> h(n), back(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<unsigned char>(i * 7 + 3);
  SIM_RT_OK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice));
  SIM_RT_OK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(back == h);

  SIM_RT_OK(cudaMemset(d, 0xab, n / 2));
  SIM_RT_OK(cudaMemcpy(back.data(), d, n, cudaMemcpyDefault));
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char want = i < n / 2 ? 0xab : h[i];
    if (back[i] != want) SIM_FAIL("byte %zu is %u, expected %u", i, back[i], want);
  }

  void* d2 = nullptr;
  SIM_RT_OK(cudaMalloc(&d2, n));
  SIM_RT_OK(cudaMemcpy(d2, d, n, cudaMemcpyDeviceToDevice));
  SIM_RT_OK(cudaMemcpy(back.data(), d2, n, cudaMemcpyDeviceToHost));
  SIM_CHECK(back[0] == 0xab && back[n - 1] == h[n - 1]);

  // Out-of-range and bad-direction copies are rejected with real codes.
  SIM_EXPECT_RT(cudaMemcpy(d, h.data(), n + 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaMemcpy(d, h.data(), 16, static_cast<cudaMemcpyKind>(42)),
                cudaErrorInvalidMemcpyDirection);
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);

  void* zero = reinterpret_cast<void*>(1);
  SIM_RT_OK(cudaMalloc(&zero, 0));
  SIM_CHECK(zero == nullptr);

  SIM_RT_OK(cudaFree(d));
  SIM_RT_OK(cudaFree(d2));
  SIM_EXPECT_RT(cudaFree(d), cudaErrorInvalidValue);  // double free
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  std::size_t free2 = 0;
  SIM_RT_OK(cudaMemGetInfo(&free2, &total));
  SIM_CHECK(free2 == free0);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
  std::printf("sim_basic: OK (%s, %zu bytes)\n", prop.name, total);
  return 0;
}
