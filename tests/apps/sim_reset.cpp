// cudaDeviceReset destroys everything in the primary context: device,
// managed and pinned host allocations (capacity returns), streams and events
// (their handles become invalid), and the device is usable again afterwards.
// Stream-ordered allocations belong to their memory pool, not to the
// context, and survive ("cudaDeviceReset() will not destroy memory
// allocations by cudaMallocAsync() and cudaMallocFromPoolAsync()", CUDA 13).
// SIMCUDA_ASYNC_LATENCY_US=50000 so the reset meets pending work.
#include <cuda_runtime_api.h>

#include "sim_test.h"

int main() {
  simtest::require_runtime_on_sim();
  void *a, *m, *x, *h;
  cudaStream_t s;
  cudaEvent_t e;
  SIM_RT_OK(cudaStreamCreate(&s));
  SIM_RT_OK(cudaEventCreate(&e));
  SIM_RT_OK(cudaMalloc(&a, simtest::mib(64)));
  SIM_RT_OK(cudaMallocManaged(&m, simtest::mib(32), cudaMemAttachGlobal));
  SIM_RT_OK(cudaMallocAsync(&x, simtest::mib(16), s));
  SIM_RT_OK(cudaMallocHost(&h, simtest::mib(8)));
  SIM_RT_OK(cudaMemsetAsync(a, 1, simtest::mib(64), s));  // pending, 50 ms
  SIM_RT_OK(cudaEventRecord(e, s));
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(t - f == simtest::mib(112));

  SIM_RT_OK(cudaDeviceReset());
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(t - f == simtest::mib(16));  // only the stream-ordered one is left
  SIM_EXPECT_RT(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  SIM_EXPECT_RT(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  SIM_EXPECT_RT(cudaFree(a), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaFreeHost(h), cudaErrorInvalidValue);
  cudaGetLastError();
  SIM_RT_OK(cudaFreeAsync(x, cudaStreamLegacy));
  SIM_RT_OK(cudaDeviceSynchronize());
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(f == t);

  // Usable again.
  void* b = nullptr;
  SIM_RT_OK(cudaMalloc(&b, simtest::mib(1)));
  SIM_RT_OK(cudaMemset(b, 0, simtest::mib(1)));
  SIM_RT_OK(cudaStreamCreate(&s));
  SIM_RT_OK(cudaMemsetAsync(b, 2, 16, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_RT_OK(cudaStreamDestroy(s));
  SIM_RT_OK(cudaFree(b));
  SIM_RT_OK(cudaDeviceReset());
  SIM_RT_OK(cudaDeviceReset());  // twice in a row is fine
  std::printf("sim_reset: OK\n");
  return 0;
}
