// Stream-ordered allocation: cudaMallocAsync / cudaFreeAsync /
// cudaMallocFromPoolAsync with the default pool and a created pool; memory
// returns to the device when the stream reaches the free.
// SIMCUDA_ASYNC_LATENCY_US=20000.
#include <cuda_runtime_api.h>

#include <vector>

#include "sim_test.h"

namespace {
std::size_t used() {
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  return t - f;
}
}  // namespace

int main() {
  simtest::require_runtime_on_sim();
  cudaStream_t s;
  SIM_RT_OK(cudaStreamCreate(&s));
  const std::size_t n = 2 << 20;  // whole pages: cudaMemGetInfo counts each buffer exactly

  void* a = nullptr;
  SIM_RT_OK(cudaMallocAsync(&a, n, s));
  SIM_CHECK(used() == n);
  std::vector<unsigned char> h(n, 0x5a), back(n);
  SIM_RT_OK(cudaMemcpyAsync(a, h.data(), n, cudaMemcpyHostToDevice, s));
  SIM_RT_OK(cudaMemcpyAsync(back.data(), a, n, cudaMemcpyDeviceToHost, s));
  SIM_RT_OK(cudaFreeAsync(a, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_CHECK(back == h);
  SIM_CHECK(used() == 0);
  SIM_EXPECT_RT(cudaFreeAsync(a, s), cudaErrorInvalidValue);  // already freed
  cudaGetLastError();

  // The free is stream-ordered: behind a slow memset the memory stays in use.
  SIM_RT_OK(cudaMallocAsync(&a, n, s));
  SIM_RT_OK(cudaMemsetAsync(a, 1, n, s));
  SIM_RT_OK(cudaFreeAsync(a, s));
  SIM_CHECK(used() == n);
  SIM_EXPECT_RT(cudaFreeAsync(a, s), cudaErrorInvalidValue);  // double free while queued
  cudaGetLastError();
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_CHECK(used() == 0);

  // Default pool, explicit pool, attributes.
  cudaMemPool_t def = nullptr, cur = nullptr;
  SIM_RT_OK(cudaDeviceGetDefaultMemPool(&def, 0));
  SIM_RT_OK(cudaDeviceGetMemPool(&cur, 0));
  SIM_CHECK(def != nullptr && def == cur);
  void* b = nullptr;
  SIM_RT_OK(cudaMallocFromPoolAsync(&b, 3 * n, def, s));
  unsigned long long v = 0;
  SIM_RT_OK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &v));
  SIM_CHECK(v == 3 * n);

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  SIM_RT_OK(cudaMemPoolCreate(&pool, &props));
  unsigned long long threshold = 1 << 30;
  SIM_RT_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  void* c = nullptr;
  SIM_RT_OK(cudaMallocFromPoolAsync(&c, n, pool, s));
  SIM_RT_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v));
  SIM_CHECK(v == n);
  SIM_CHECK(used() == 4 * n);
  SIM_RT_OK(cudaFreeAsync(c, s));
  SIM_RT_OK(cudaFreeAsync(b, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_RT_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v));
  SIM_CHECK(v == n);
  SIM_CHECK(used() == 0);
  SIM_RT_OK(cudaMemPoolDestroy(pool));
  SIM_EXPECT_RT(cudaMemPoolDestroy(def), cudaErrorInvalidValue);
  cudaGetLastError();

  // Legacy and per-thread default streams work too; cudaFree of a
  // stream-ordered allocation is allowed.
  SIM_RT_OK(cudaMallocAsync(&a, n, cudaStreamPerThread));
  SIM_RT_OK(cudaFreeAsync(a, cudaStreamPerThread));
  SIM_RT_OK(cudaMallocAsync(&a, n, 0));
  SIM_RT_OK(cudaFree(a));
  SIM_RT_OK(cudaDeviceSynchronize());
  SIM_CHECK(used() == 0);
  SIM_RT_OK(cudaStreamDestroy(s));
  std::printf("sim_async_alloc: OK\n");
  return 0;
}
