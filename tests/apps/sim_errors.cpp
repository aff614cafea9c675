// Error codes and the last-error rules of the runtime: a failed call returns
// its code and records it; cudaGetLastError returns it once and resets to
// cudaSuccess; cudaPeekAtLastError does not reset; successful calls leave it
// alone. Runs with SIMCUDA_DEVICE_MEMORY=1GiB.
#include <cuda_runtime_api.h>

#include "sim_test.h"

int main() {
  cudaDeviceProp prop = simtest::require_runtime_on_sim();
  SIM_CHECK(prop.totalGlobalMem == simtest::gib(1));
  SIM_CHECK(cudaGetLastError() == cudaSuccess);

  void* p = reinterpret_cast<void*>(0x1);
  SIM_EXPECT_RT(cudaMalloc(&p, simtest::gib(2)), cudaErrorMemoryAllocation);
  SIM_CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
  SIM_CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation);  // peek keeps it

  // A successful call does not clear the recorded error.
  void* ok = nullptr;
  SIM_RT_OK(cudaMalloc(&ok, 4096));
  SIM_CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
  SIM_CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);  // returned once...
  SIM_CHECK(cudaGetLastError() == cudaSuccess);                // ...then reset
  SIM_CHECK(cudaPeekAtLastError() == cudaSuccess);

  // The last error is per thread: latest failure wins.
  SIM_EXPECT_RT(cudaSetDevice(7), cudaErrorInvalidDevice);
  SIM_EXPECT_RT(cudaFree(reinterpret_cast<void*>(0x1234)), cudaErrorInvalidValue);
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);

  int attr = 0;
  SIM_EXPECT_RT(cudaDeviceGetAttribute(&attr, cudaDevAttrWarpSize, 3), cudaErrorInvalidDevice);
  SIM_EXPECT_RT(cudaGetDeviceProperties(&prop, -1), cudaErrorInvalidDevice);
  SIM_EXPECT_RT(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0xdead0)),
                cudaErrorInvalidResourceHandle);
  SIM_EXPECT_RT(cudaMemset(reinterpret_cast<void*>(0x10), 0, 16), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaFreeHost(ok), cudaErrorInvalidValue);  // a device pointer
  cudaGetLastError();

  // Exactly 1 GiB fits (capacity is exact); one byte more does not.
  SIM_RT_OK(cudaFree(ok));
  void* all = nullptr;
  SIM_RT_OK(cudaMalloc(&all, simtest::gib(1)));
  void* more = nullptr;
  SIM_EXPECT_RT(cudaMalloc(&more, 1), cudaErrorMemoryAllocation);
  SIM_RT_OK(cudaFree(all));
  SIM_CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);

  // Error strings and names.
  SIM_CHECK(std::strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
  SIM_CHECK(std::strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
  SIM_CHECK(std::strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0);
  SIM_CHECK(std::strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
  SIM_CHECK(std::strcmp(cudaGetErrorName(static_cast<cudaError_t>(99999)),
                        "unrecognized error code") == 0);
  std::printf("sim_errors: OK\n");
  return 0;
}
