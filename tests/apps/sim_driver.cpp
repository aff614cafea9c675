// The driver API directly (linked to the toolkit's stub libcuda.so, run
// against the sim's libcuda.so.1): init and context rules, cuMemAlloc_v2,
// the legacy 32-bit cuMemAlloc obtained through cuGetProcAddress with an old
// version, per-thread variants via flags, symbol status for unknown names,
// and virtual memory management (reserve / create / map / set access /
// write / unmap / remap / read / release).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <vector>

#include "sim_test.h"

namespace {
// The CUDA 2.0 ABIs (cudaTypedefs.h only declares them for the toolkit's
// internal build).
typedef CUresult (*LegacyAlloc)(unsigned int* dptr, unsigned int bytes);
typedef CUresult (*LegacyFree)(unsigned int dptr);
typedef CUresult (*LegacyMemGetInfo)(unsigned int* free_b, unsigned int* total_b);

void* sym(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (!p) SIM_FAIL("libcuda.so.1 does not export %s", name);
  return p;
}

std::size_t used() {
  std::size_t f = 0, t = 0;
  SIM_CU_OK(cuMemGetInfo(&f, &t));
  SIM_CHECK(f <= t);
  return t - f;
}
}  // namespace

int main() {
  CUdeviceptr d = 0;
  SIM_EXPECT_CU(cuMemAlloc(&d, 64), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  SIM_CU_OK(cuDriverGetVersion(&version));  // works before cuInit
  SIM_CHECK(version >= CUDA_VERSION);
  SIM_EXPECT_CU(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuInit(0));
  SIM_CHECK(simtest::mapped("sim/libcuda.so.1"));

  int count = 0;
  SIM_CU_OK(cuDeviceGetCount(&count));
  SIM_CHECK(count == 1);
  CUdevice dev;
  SIM_CU_OK(cuDeviceGet(&dev, 0));
  SIM_EXPECT_CU(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  char name[256];
  SIM_CU_OK(cuDeviceGetName(name, sizeof(name), dev));
  simtest::require_sim_name(name);
  std::size_t total = 0;
  SIM_CU_OK(cuDeviceTotalMem(&total, dev));
  SIM_CHECK(total == simtest::gib(4));
  int major = 0;
  SIM_CU_OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  SIM_CHECK(major == 9);

  // No context yet.
  SIM_EXPECT_CU(cuMemAlloc(&d, 64), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext cur = reinterpret_cast<CUcontext>(0x1);
  SIM_CU_OK(cuCtxGetCurrent(&cur));
  SIM_CHECK(cur == nullptr);

  // Primary context.
  CUcontext primary;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&primary, dev));
  unsigned int pflags = 0;
  int active = 0;
  SIM_CU_OK(cuDevicePrimaryCtxGetState(dev, &pflags, &active));
  SIM_CHECK(active == 1);
  SIM_CU_OK(cuCtxSetCurrent(primary));
  CUdevice cdev = -1;
  SIM_CU_OK(cuCtxGetDevice(&cdev));
  SIM_CHECK(cdev == dev);

  SIM_CU_OK(cuMemAlloc(&d, 1 << 20));
  SIM_CHECK(used() == (2u << 20));  // the 2 MiB page it is packed into
  std::vector<unsigned char> h(1 << 20, 0x3c), back(1 << 20);
  SIM_CU_OK(cuMemcpyHtoD(d, h.data(), h.size()));
  SIM_CU_OK(cuMemsetD8(d, 0x11, 16));
  SIM_CU_OK(cuMemcpyDtoH(back.data(), d, back.size()));
  SIM_CHECK(back[0] == 0x11 && back[16] == 0x3c);
  SIM_CU_OK(cuMemsetD32(d, 0xdeadbeef, 4));
  SIM_EXPECT_CU(cuMemsetD32(d + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned
  SIM_EXPECT_CU(cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr big = 0;
  SIM_EXPECT_CU(cuMemAlloc(&big, simtest::gib(5)), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  SIM_CU_OK(cuMemGetAddressRange(&base, &size, d + 100));
  SIM_CHECK(base == d && size == (1u << 20));
  SIM_CU_OK(cuMemFree(d));
  SIM_EXPECT_CU(cuMemFree(d), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(used() == 0);

  // --- cuGetProcAddress: versions, flags, status ---------------------------
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st;
  SIM_CU_OK(cuGetProcAddress("cuMemAlloc", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  SIM_CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == sym("cuMemAlloc_v2"));
  SIM_CU_OK(cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, &st));
  SIM_CHECK(fn == sym("cuMemAlloc_v2"));
  SIM_CU_OK(cuGetProcAddress("cuMemAlloc", &fn, 3010, 0, &st));
  SIM_CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == sym("cuMemAlloc"));

  // The legacy 32-bit ABI is there, and refused in a context of today's API,
  // as driver 580 refuses it on an H100 (sim_driver_probe).
  auto legacy_alloc = reinterpret_cast<LegacyAlloc>(fn);
  SIM_CU_OK(cuGetProcAddress("cuMemFree", &fn, 2000, 0, &st));
  auto legacy_free = reinterpret_cast<LegacyFree>(fn);
  SIM_CHECK(fn == sym("cuMemFree"));
  SIM_CU_OK(cuGetProcAddress("cuMemGetInfo", &fn, 2000, 0, &st));
  auto legacy_info = reinterpret_cast<LegacyMemGetInfo>(fn);
  unsigned int d32 = 0;
  SIM_EXPECT_CU(legacy_alloc(&d32, 4096), CUDA_ERROR_INVALID_CONTEXT);
  unsigned int f32 = 0, t32 = 0;
  SIM_EXPECT_CU(legacy_info(&f32, &t32), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(legacy_free(d32), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CHECK(used() == 0);

  // Per-thread-default-stream variants are chosen by flags.
  SIM_CU_OK(cuGetProcAddress("cuMemAllocAsync", &fn, CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
  SIM_CHECK(fn == sym("cuMemAllocAsync_ptsz"));
  SIM_CU_OK(cuGetProcAddress("cuMemAllocAsync", &fn, CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
  SIM_CHECK(fn == sym("cuMemAllocAsync"));
  SIM_CU_OK(cuGetProcAddress("cuMemcpyHtoD", &fn, CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
  SIM_CHECK(fn == sym("cuMemcpyHtoD_v2_ptds"));
  // No per-thread twin: the legacy function.
  SIM_CU_OK(cuGetProcAddress("cuMemFree", &fn, CUDA_VERSION,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
  SIM_CHECK(fn == sym("cuMemFree_v2"));
  SIM_CU_OK(cuGetProcAddress("cuGetProcAddress", &fn, CUDA_VERSION, 0, &st));
  SIM_CHECK(fn == sym("cuGetProcAddress_v2"));

  // Unknown symbol / version not sufficient / version above the driver.
  fn = reinterpret_cast<void*>(0x1);
  SIM_CU_OK(cuGetProcAddress("cuNoSuchFunction", &fn, CUDA_VERSION, 0, &st));
  SIM_CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fn == nullptr);
  SIM_CU_OK(cuGetProcAddress("cuMemAllocAsync", &fn, 11000, 0, &st));
  SIM_CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == nullptr);
  SIM_EXPECT_CU(cuGetProcAddress("cuMemAlloc", &fn, version + 10, 0, &st),
                CUDA_ERROR_INVALID_VALUE);
  // The CUDA 11.3 entry point (no status argument) reports a miss as an error.
  typedef CUresult (*GetProcV1)(const char*, void**, int, cuuint64_t);
  auto v1 = reinterpret_cast<GetProcV1>(sym("cuGetProcAddress"));
  SIM_EXPECT_CU(v1("cuNoSuchFunction", &fn, CUDA_VERSION, 0), CUDA_ERROR_NOT_FOUND);
  SIM_CU_OK(v1("cuMemAlloc", &fn, CUDA_VERSION, 0));
  SIM_CHECK(fn == sym("cuMemAlloc_v2"));

  // --- virtual memory management -------------------------------------------
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  std::size_t gran = 0;
  SIM_CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  SIM_CHECK(gran == simtest::mib(2));
  const std::size_t chunk = 2 * gran;
  CUmemGenericAllocationHandle hnd;
  SIM_EXPECT_CU(cuMemCreate(&hnd, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuMemCreate(&hnd, chunk, &prop, 0));
  SIM_CHECK(used() == chunk);  // physical memory consumes capacity
  CUdeviceptr va = 0;
  SIM_CU_OK(cuMemAddressReserve(&va, 4 * chunk, 0, 0, 0));
  SIM_CHECK(va % gran == 0);
  SIM_EXPECT_CU(cuMemMap(va + 1, chunk, 0, hnd, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuMemMap(va, chunk, 0, hnd, 0));
  SIM_EXPECT_CU(cuMemMap(va, chunk, 0, hnd, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped
  // Mapped but not yet accessible: copies are rejected.
  SIM_EXPECT_CU(cuMemcpyHtoD(va, h.data(), 64), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SIM_CU_OK(cuMemSetAccess(va, chunk, &acc, 1));
  unsigned long long aflags = 0;
  SIM_CU_OK(cuMemGetAccess(&aflags, &prop.location, va));
  SIM_CHECK(aflags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  SIM_CU_OK(cuMemsetD8(va, 0x77, chunk));
  SIM_CU_OK(cuMemcpyHtoD(va + chunk - 4096, h.data(), 4096));
  SIM_CU_OK(cuMemUnmap(va, chunk));
  // Remap the same physical memory somewhere else: the data is still there.
  SIM_CU_OK(cuMemMap(va + 2 * chunk, chunk, 0, hnd, 0));
  SIM_CU_OK(cuMemSetAccess(va + 2 * chunk, chunk, &acc, 1));
  SIM_CU_OK(cuMemcpyDtoH(back.data(), va + 2 * chunk, 4096));
  SIM_CHECK(back[0] == 0x77 && back[4095] == 0x77);
  SIM_CU_OK(cuMemcpyDtoH(back.data(), va + 3 * chunk - 4096, 4096));
  SIM_CHECK(back[0] == 0x3c);
  // Release while mapped: capacity returns only after the unmap.
  SIM_CU_OK(cuMemRelease(hnd));
  SIM_CHECK(used() == chunk);
  SIM_EXPECT_CU(cuMemRelease(hnd), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemUnmap(va + 2 * chunk, gran), CUDA_ERROR_INVALID_VALUE);  // partial
  SIM_CU_OK(cuMemUnmap(va + 2 * chunk, chunk));
  SIM_CHECK(used() == 0);
  SIM_EXPECT_CU(cuMemAddressFree(va, chunk), CUDA_ERROR_INVALID_VALUE);  // wrong size
  SIM_CU_OK(cuMemAddressFree(va, 4 * chunk));
  SIM_EXPECT_CU(cuMemCreate(&hnd, simtest::gib(6), &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);

  // --- streams, events, created contexts, primary reset --------------------
  CUstream s;
  SIM_CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  SIM_CU_OK(cuMemAllocAsync(&d, 4096, s));
  SIM_CU_OK(cuMemsetD8Async(d, 1, 4096, s));
  CUevent e;
  SIM_CU_OK(cuEventCreate(&e, CU_EVENT_DEFAULT));
  SIM_CU_OK(cuEventRecord(e, s));
  SIM_CU_OK(cuMemFreeAsync(d, s));
  SIM_CU_OK(cuEventSynchronize(e));
  SIM_CU_OK(cuStreamSynchronize(s));
  SIM_CHECK(used() == 0);
  SIM_CU_OK(cuEventDestroy(e));
  SIM_CU_OK(cuStreamDestroy(s));

  CUcontext mine;
  SIM_CU_OK(cuCtxCreate(&mine, nullptr, 0, dev));
  SIM_CU_OK(cuCtxGetCurrent(&cur));
  SIM_CHECK(cur == mine);
  SIM_CU_OK(cuMemAlloc(&d, 8192));
  SIM_CHECK(used() == (2u << 20));  // one page
  SIM_CU_OK(cuCtxDestroy(mine));  // frees what the context owned
  SIM_CU_OK(cuCtxSetCurrent(primary));
  SIM_CHECK(used() == 0);

  SIM_CU_OK(cuMemAlloc(&d, 1 << 20));
  SIM_CU_OK(cuDevicePrimaryCtxReset(dev));
  SIM_CHECK(used() == 0);
  SIM_EXPECT_CU(cuMemFree(d), CUDA_ERROR_INVALID_VALUE);  // freed by the reset
  SIM_CU_OK(cuDevicePrimaryCtxRelease(dev));
  SIM_CU_OK(cuDevicePrimaryCtxGetState(dev, &pflags, &active));
  SIM_CHECK(active == 0);
  SIM_EXPECT_CU(cuMemAlloc(&d, 64), CUDA_ERROR_INVALID_CONTEXT);  // released

  const char* str = nullptr;
  SIM_CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &str));
  SIM_CHECK(std::strcmp(str, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
  SIM_CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str));
  SIM_CHECK(std::strcmp(str, "out of memory") == 0);
  SIM_EXPECT_CU(cuGetErrorName(static_cast<CUresult>(12345), &str), CUDA_ERROR_INVALID_VALUE);
  std::printf("sim_driver: OK\n");
  return 0;
}
