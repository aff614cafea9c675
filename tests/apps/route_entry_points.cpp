// Route: driver functions obtained through cudaGetDriverEntryPointByVersion,
// cudaGetDriverEntryPoint and cuGetProcAddress[_v2] (the route of static
// runtimes and of PyTorch's expandable segments), at several ABI versions
// and with the per-thread-default-stream flag. Also checks that lookups of
// other names answer exactly as the driver does, and records which library
// each pointer it was handed lives in.
//
//   route_entry_points MANIFEST
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "route_manifest.h"

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported and used.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

using route::addr;
using route::check;

namespace {

using AllocV2 = CUresult (*)(CUdeviceptr*, size_t);
using AllocV1 = CUresult (*)(unsigned int*, unsigned int);
using FreeV2 = CUresult (*)(CUdeviceptr);
using FreeV1 = CUresult (*)(unsigned int);
using AllocAsync = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using FreeAsync = CUresult (*)(CUdeviceptr, CUstream);
using AllocManaged = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
using AllocHost = CUresult (*)(void**, size_t);
using FreeHost = CUresult (*)(void*);
using MemGetInfo = CUresult (*)(size_t*, size_t*);
using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

void* by_version(const char* name, unsigned version, unsigned long long flags = cudaEnableDefault) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  check(cudaGetDriverEntryPointByVersion(name, &fn, version, flags, &status) == cudaSuccess &&
            status == cudaDriverEntryPointSuccess && fn,
        name);
  return fn;
}

void* by_runtime(const char* name, unsigned long long flags) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  check(cudaGetDriverEntryPoint(name, &fn, flags, &status) == cudaSuccess &&
            status == cudaDriverEntryPointSuccess && fn,
        name);
  return fn;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);
  check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");

  // cuMemAlloc at 12000 is the _v2 ABI, at 2000 the legacy 32-bit one.
  auto alloc_v2 = reinterpret_cast<AllocV2>(by_version("cuMemAlloc", 12000));
  auto alloc_v1 = reinterpret_cast<AllocV1>(by_version("cuMemAlloc", 2000));
  auto free_v2 = reinterpret_cast<FreeV2>(by_runtime("cuMemFree", cudaEnableDefault));
  auto free_v1 = reinterpret_cast<FreeV1>(by_version("cuMemFree", 3010));
  m.resolve("cuMemAlloc@12000", reinterpret_cast<void*>(alloc_v2));
  m.resolve("cuMemAlloc@2000", reinterpret_cast<void*>(alloc_v1));

  CUdeviceptr d = 0;
  check(alloc_v2(&d, 123456) == CUDA_SUCCESS, "cuMemAlloc_v2");
  m.alloc("cuMemAlloc_v2", "device", 0, d, 123456);
  // The legacy ABI is refused by the driver (sim_driver_probe on an H100),
  // through our wrapper as without it; nothing is recorded.
  unsigned int d32 = 0;
  const CUresult legacy_rc = alloc_v1(&d32, 777);
  check(legacy_rc == CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc (legacy)", legacy_rc);
  check(free_v1(d32) == CUDA_ERROR_INVALID_CONTEXT, "cuMemFree (legacy)");
  check(free_v2(d) == CUDA_SUCCESS, "cuMemFree_v2");
  m.free("cuMemFree_v2", "device", 0, d, 123456);

  // Per-thread default stream: the _ptsz twins; stream 0 there is the
  // thread's per-thread stream, recorded as cudaStreamPerThread (0x2).
  auto alloc_ptsz = reinterpret_cast<AllocAsync>(by_runtime("cuMemAllocAsync", cudaEnablePerThreadDefaultStream));
  auto free_ptsz = reinterpret_cast<FreeAsync>(by_runtime("cuMemFreeAsync", cudaEnablePerThreadDefaultStream));
  auto alloc_legacy = reinterpret_cast<AllocAsync>(by_runtime("cuMemAllocAsync", cudaEnableLegacyStream));
  check(alloc_ptsz(&d, 5000, nullptr) == CUDA_SUCCESS, "cuMemAllocAsync_ptsz");
  m.alloc("cuMemAllocAsync_ptsz", "device", 0, d, 5000, addr(cudaStreamPerThread));
  check(free_ptsz(d, nullptr) == CUDA_SUCCESS, "cuMemFreeAsync_ptsz");
  m.free("cuMemFreeAsync_ptsz", "device", 0, d, 5000, addr(cudaStreamPerThread));
  check(alloc_legacy(&d, 6000, nullptr) == CUDA_SUCCESS, "cuMemAllocAsync");
  m.alloc("cuMemAllocAsync", "device", 0, d, 6000, 0);
  check(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess, "sync");

  // cuGetProcAddress through itself: the v2 ABI at 12000, the 11.x one at 11030.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  check(cuGetProcAddress("cuGetProcAddress", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
                CUDA_SUCCESS && fn,
        "cuGetProcAddress_v2");
  auto get_proc_v2 = reinterpret_cast<GetProcV2>(fn);
  check(get_proc_v2("cuGetProcAddress", &fn, 11030, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
            fn,
        "cuGetProcAddress (11.x ABI)");
  auto get_proc_v1 = reinterpret_cast<GetProcV1>(fn);
  m.resolve("cuGetProcAddress@12000", reinterpret_cast<void*>(get_proc_v2));
  m.resolve("cuGetProcAddress@11030", reinterpret_cast<void*>(get_proc_v1));

  check(get_proc_v2("cuMemAllocManaged", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS,
        "cuMemAllocManaged lookup");
  CUdeviceptr managed = 0;
  check(reinterpret_cast<AllocManaged>(fn)(&managed, 8192, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS,
        "cuMemAllocManaged");
  m.alloc("cuMemAllocManaged", "managed", 0, managed, 8192);

  check(get_proc_v1("cuMemAllocHost", &fn, 3020, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS, "host lookup");
  void* host = nullptr;
  check(reinterpret_cast<AllocHost>(fn)(&host, 4000) == CUDA_SUCCESS, "cuMemAllocHost_v2");
  m.alloc("cuMemAllocHost_v2", "host_pinned", 0, addr(host), 4000);
  check(get_proc_v1("cuMemFreeHost", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS, "free lookup");
  check(reinterpret_cast<FreeHost>(fn)(host) == CUDA_SUCCESS, "cuMemFreeHost");
  m.free("cuMemFreeHost", "host_pinned", 0, addr(host), 4000);

  check(get_proc_v2("cuMemGetInfo", &fn, 3020, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS, "info");
  std::size_t f = 0, t = 0;
  check(reinterpret_cast<MemGetInfo>(fn)(&f, &t) == CUDA_SUCCESS && f <= t, "cuMemGetInfo_v2");

  // Every other lookup answers as the driver does, with the driver's pointer.
  void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  check(drv != nullptr, "libcuda.so.1 is loaded");
  check(get_proc_v2("cuStreamSynchronize", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                    &status) == CUDA_SUCCESS &&
            fn == dlsym(drv, "cuStreamSynchronize_ptsz"),
        "cuStreamSynchronize passes through");
  m.resolve("cuStreamSynchronize@12000/ptsz", fn);
  check(get_proc_v2("cuCtxGetDevice", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
            fn == dlsym(drv, "cuCtxGetDevice_v2"),
        "cuCtxGetDevice passes through");
  m.resolve("cuCtxGetDevice@13000", fn);
  fn = reinterpret_cast<void*>(0x1);
  check(get_proc_v2("cuNoSuchFunction", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
            fn == nullptr && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
        "unknown name");
  check(get_proc_v2("cuMemAllocAsync", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
            fn == nullptr && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
        "version too old");
  check(get_proc_v1("cuNoSuchFunction", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_ERROR_NOT_FOUND,
        "unknown name (11.x ABI)");
  check(get_proc_v2("cuMemAlloc", &fn, 99000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_ERROR_INVALID_VALUE,
        "version above the driver's");
  // `d` from cuMemAllocAsync and `managed` are left allocated.
  return 0;
}
