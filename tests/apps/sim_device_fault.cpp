// Device faults (tests/sim/README.md, "Device faults"): a queued operation
// that, when it runs, touches memory given back after it was queued does not
// touch the host's memory (the process would crash on the unmapped range);
// it is a device fault, CUDA_ERROR_ILLEGAL_ADDRESS, which the context keeps:
// every later call on it answers the fault, through the driver and the
// runtime, until cudaDeviceReset gives the device a new context. The
// scenario is pytorch/pytorch#196258's: VMM memory unmapped (and released)
// while a kernel queued on it has not run yet, because cuMemUnmap does not
// wait for queued work. A stream-ordered free followed by a reuse is the
// correct way, and no fault.
//
// Each stream is held by a Gate (sim_test.h) while the test gives memory
// back under the work queued behind it, so what runs when is decided by the
// test, not by timing.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

#include "sim_driver_test.h"
#include "simcuda_counters.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kSize = 2 * kMiB;

unsigned long long faults() {
  SimcudaCounters c{};
  if (!simcuda_counters_read(&c)) SIM_FAIL("simcuda_counters is not exported by the driver");
  return c.device_faults;
}

struct Mapped {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
};

Mapped map_read_write() {
  const CUmemAllocationProp prop = simtest::vmm_prop();
  const CUmemAccessDesc rw = simtest::vmm_access();
  Mapped m;
  SIM_CU_OK(cuMemAddressReserve(&m.va, kSize, 0, 0, 0));
  SIM_CU_OK(cuMemCreate(&m.h, kSize, &prop, 0));
  SIM_CU_OK(cuMemMap(m.va, kSize, 0, m.h, 0));
  SIM_CU_OK(cuMemSetAccess(m.va, kSize, &rw, 1));
  return m;
}

// A stream-ordered free and a reuse behind a queued memset: the memset runs
// before the free, on live memory. No fault.
void stream_ordered_free_is_no_fault(cudaStream_t s) {
  const unsigned long long before = faults();
  void* p = nullptr;
  SIM_RT_OK(cudaMallocAsync(&p, kSize, s));
  simtest::Gate gate;
  SIM_RT_OK(cudaLaunchHostFunc(s, simtest::Gate::hold, &gate));
  SIM_RT_OK(cudaMemsetAsync(p, 0x5a, kSize, s));
  SIM_RT_OK(cudaFreeAsync(p, s));
  void* q = nullptr;
  SIM_RT_OK(cudaMallocAsync(&q, kSize, s));  // the reuse, ordered after the free
  SIM_RT_OK(cudaMemsetAsync(q, 0x33, kSize, s));
  gate.release();
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_CHECK(gate.held());
  std::vector<unsigned char> back(kSize);
  SIM_RT_OK(cudaMemcpy(back.data(), q, kSize, cudaMemcpyDeviceToHost));
  SIM_CHECK(back[0] == 0x33 && back[kSize - 1] == 0x33);
  SIM_RT_OK(cudaFreeAsync(q, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_CHECK(faults() == before);
  SIM_RT_OK(cudaGetLastError());
}

// Every later call on the faulted context answers the fault.
void fault_is_sticky(CUstream s, CUdeviceptr live) {
  SIM_EXPECT_CU(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  SIM_EXPECT_CU(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  SIM_EXPECT_CU(cuStreamQuery(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr p = 0;
  SIM_EXPECT_CU(cuMemAlloc(&p, kMiB), CUDA_ERROR_ILLEGAL_ADDRESS);
  SIM_EXPECT_CU(cuMemFree(live), CUDA_ERROR_ILLEGAL_ADDRESS);
  SIM_EXPECT_CU(cuMemsetD8Async(live, 1, kMiB, s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUevent e = nullptr;
  SIM_EXPECT_CU(cuEventCreate(&e, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  // The runtime maps it to cudaErrorIllegalAddress, which stays the last error.
  SIM_EXPECT_RT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  void* rp = nullptr;
  SIM_EXPECT_RT(cudaMalloc(&rp, kMiB), cudaErrorIllegalAddress);
  SIM_EXPECT_RT(cudaGetLastError(), cudaErrorIllegalAddress);
  SIM_EXPECT_RT(cudaGetLastError(), cudaErrorIllegalAddress);
  SIM_EXPECT_RT(cudaPeekAtLastError(), cudaErrorIllegalAddress);
  SIM_CHECK(std::string(cudaGetErrorString(cudaErrorIllegalAddress)) ==
            "an illegal memory access was encountered");
}

// cudaDeviceReset gives the device a new context: no error, work again.
void reset_recovers() {
  SIM_RT_OK(cudaDeviceReset());
  SIM_RT_OK(cudaGetLastError());
  SIM_RT_OK(cudaDeviceSynchronize());
  void* p = nullptr;
  SIM_RT_OK(cudaMalloc(&p, kMiB));
  SIM_RT_OK(cudaMemset(p, 0, kMiB));
  SIM_RT_OK(cudaFree(p));
  SIM_CU_OK(cuCtxSynchronize());
}

// A memset queued on VMM memory, held behind a gate; `give_back` takes the
// memory's access away before the gate opens, and says whether the range is
// still mapped (to be given back at the end). The memset then faults.
template <typename F>
void fault_after(const char* what, F give_back) {
  const unsigned long long before = faults();
  CUstream s = nullptr;
  SIM_CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr live = 0;
  SIM_CU_OK(cuMemAlloc(&live, kMiB));
  Mapped m = map_read_write();
  simtest::Gate gate;
  SIM_CU_OK(cuLaunchHostFunc(s, simtest::Gate::hold, &gate));
  SIM_CU_OK(cuMemsetD8Async(m.va, 0xab, kSize, s));
  // Neither call waits for the queued memset (the gate still holds it).
  const bool still_mapped = give_back(m);
  SIM_EXPECT_CU(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  SIM_CHECK(faults() == before);
  gate.release();
  SIM_EXPECT_CU(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  SIM_CHECK(gate.held());
  if (faults() != before + 1) SIM_FAIL("%s: %llu device faults, expected 1", what, faults() - before);
  fault_is_sticky(s, live);
  SIM_CHECK(faults() == before + 1);
  reset_recovers();  // also destroys s and frees `live`, not VMM memory
  if (still_mapped) {
    SIM_CU_OK(cuMemUnmap(m.va, kSize));
    SIM_CU_OK(cuMemRelease(m.h));
    SIM_CU_OK(cuMemAddressFree(m.va, kSize));
  }
  std::printf("%s: CUDA_ERROR_ILLEGAL_ADDRESS, sticky until cudaDeviceReset\n", what);
}

}  // namespace

int main() {
  simtest::require_runtime_on_sim();
  SIM_RT_OK(cudaFree(nullptr));  // the primary context, current, for both APIs
  cudaStream_t s = nullptr;
  SIM_RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ordered_free_is_no_fault(s);
  SIM_RT_OK(cudaStreamDestroy(s));

  fault_after("unmapped and released", [](Mapped& m) {
    SIM_CU_OK(cuMemUnmap(m.va, kSize));
    SIM_CU_OK(cuMemRelease(m.h));
    SIM_CU_OK(cuMemAddressFree(m.va, kSize));
    return false;
  });
  fault_after("write access revoked", [](Mapped& m) {
    const CUmemAccessDesc ro = simtest::vmm_access(CU_MEM_ACCESS_FLAGS_PROT_READ);
    SIM_CU_OK(cuMemSetAccess(m.va, kSize, &ro, 1));
    return true;
  });
  std::printf("sim_device_fault: OK\n");
  return 0;
}
