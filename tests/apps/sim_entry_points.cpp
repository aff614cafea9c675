// cudaGetDriverEntryPoint / cudaGetDriverEntryPointByVersion forward to the
// driver's cuGetProcAddress_v2: versioned ABIs, per-thread variants by flag,
// and the query status for unknown or too-new symbols.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "sim_test.h"

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported and
// used; testing it is the point.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {
void* driver_sym(const char* name) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) SIM_FAIL("the runtime did not load libcuda.so.1");
  void* p = dlsym(h, name);
  if (!p) SIM_FAIL("libcuda.so.1 does not export %s", name);
  return p;
}
typedef CUresult (*AllocV2)(CUdeviceptr*, size_t);
}  // namespace

int main() {
  simtest::require_runtime_on_sim();
  SIM_RT_OK(cudaFree(nullptr));

  void* fn = nullptr;
  cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
  SIM_RT_OK(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st));
  SIM_CHECK(st == cudaDriverEntryPointSuccess && fn == driver_sym("cuMemAlloc_v2"));
  // The pointer is usable in the runtime's context, and interoperates.
  CUdeviceptr d = 0;
  SIM_CHECK(reinterpret_cast<AllocV2>(fn)(&d, 4096) == CUDA_SUCCESS);
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  SIM_CHECK(t - f == (2u << 20));  // the 2 MiB page the 4 KiB are packed into
  SIM_RT_OK(cudaFree(reinterpret_cast<void*>(d)));

  SIM_RT_OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 2000, cudaEnableDefault, &st));
  SIM_CHECK(st == cudaDriverEntryPointSuccess && fn == driver_sym("cuMemAlloc"));
  SIM_RT_OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &st));
  SIM_CHECK(fn == driver_sym("cuMemAlloc_v2"));

  SIM_RT_OK(cudaGetDriverEntryPoint("cuMemAllocAsync", &fn, cudaEnableDefault, &st));
  SIM_CHECK(fn == driver_sym("cuMemAllocAsync"));  // built without per-thread streams
  SIM_RT_OK(cudaGetDriverEntryPoint("cuMemAllocAsync", &fn, cudaEnablePerThreadDefaultStream, &st));
  SIM_CHECK(fn == driver_sym("cuMemAllocAsync_ptsz"));
  SIM_RT_OK(cudaGetDriverEntryPoint("cuStreamSynchronize", &fn, cudaEnableLegacyStream, &st));
  SIM_CHECK(fn == driver_sym("cuStreamSynchronize"));
  SIM_RT_OK(cudaGetDriverEntryPoint("cuGetProcAddress", &fn, cudaEnableDefault, &st));
  SIM_CHECK(fn == driver_sym("cuGetProcAddress_v2"));

  fn = reinterpret_cast<void*>(0x1);
  SIM_RT_OK(cudaGetDriverEntryPoint("cuDoesNotExist", &fn, cudaEnableDefault, &st));
  SIM_CHECK(st == cudaDriverEntryPointSymbolNotFound && fn == nullptr);
  SIM_RT_OK(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11000, cudaEnableDefault, &st));
  SIM_CHECK(st == cudaDriverEntryPointVersionNotSufficent && fn == nullptr);
  SIM_EXPECT_RT(cudaGetDriverEntryPoint(nullptr, &fn, cudaEnableDefault, &st), cudaErrorInvalidValue);
  cudaGetLastError();
  std::printf("sim_entry_points: OK\n");
  return 0;
}
