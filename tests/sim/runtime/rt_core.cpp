// Runtime core: loading the driver, lazy per-thread context setup, error
// bookkeeping, devices, versions and driver entry points.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "rt_internal.h"

namespace rt {
namespace {

struct State {
  std::once_flag once;
  cudaError_t init_error = cudaSuccess;
  DriverApi api;
  int device_count = 0;
  std::mutex mu;                       // guards retained
  std::vector<bool> retained;          // primary context retained by us
  std::vector<CUcontext> primary;
};
State& S() {
  static auto* s = new State;  // never destroyed: workers may outlive exit
  return *s;
}

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local int tl_device = 0;

// Sticky errors. A device fault breaks the device's context: "This leaves
// the process in an inconsistent state and any further CUDA work will return
// the same error" (cudaErrorIllegalAddress, driver_types.h), and
// cudaGetLastError does not reset it (NVIDIA/nvbench#88). The driver keeps it
// on the context (tests/sim/driver/drv_state.cpp, current_ctx); the runtime
// keeps, per device, the sticky error its calls returned, so that
// cudaGetLastError goes on answering it until cudaDeviceReset gives the
// device a new context ("The only fix is a hard device reset and
// construction of a new context", JuliaGPU/CUDAnative.jl#93).
constexpr int kMaxDevices = 64;
std::atomic<int> g_sticky[kMaxDevices];  // cudaError_t; 0 = none

bool is_sticky(cudaError_t e) { return e == cudaErrorIllegalAddress; }
std::atomic<int>* sticky_slot(int dev) { return dev >= 0 && dev < kMaxDevices ? &g_sticky[dev] : nullptr; }

void* open_driver() {
  // The name every CUDA runtime opens; LD_LIBRARY_PATH selects the sim.
  if (void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) return h;
  // Fallback: the driver built beside this runtime.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&open_driver), &info) && info.dli_fname) {
    std::string path(info.dli_fname);
    auto slash = path.rfind('/');
    if (slash != std::string::npos) {
      path = path.substr(0, slash + 1) + "libcuda.so.1";
      if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    }
  }
  return nullptr;
}

void load() {
  State& s = S();
  void* h = open_driver();
  if (!h) {
    s.init_error = cudaErrorInsufficientDriver;
    return;
  }
  s.api.cuGetProcAddress_v2 =
      reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(dlsym(h, "cuGetProcAddress_v2"));
  if (!s.api.cuGetProcAddress_v2) {
    s.init_error = cudaErrorInsufficientDriver;
    return;
  }
  bool ok = true;
#define SIM_RT_RESOLVE(FN, NAME, PT)                                                        \
  {                                                                                         \
    void* pfn = nullptr;                                                                    \
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;               \
    CUresult r = s.api.cuGetProcAddress_v2(                                                 \
        NAME, &pfn, CUDA_VERSION,                                                           \
        PT ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM, \
        &st);                                                                               \
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !pfn) {                   \
      std::fprintf(stderr, "simcuda runtime: driver has no %s (%s)\n", NAME, #FN);          \
      ok = false;                                                                           \
    }                                                                                       \
    s.api.FN = reinterpret_cast<decltype(&::FN)>(pfn);                                      \
  }
  SIM_RT_DRIVER_FUNCS(SIM_RT_RESOLVE)
#undef SIM_RT_RESOLVE
  if (!ok) {
    s.init_error = cudaErrorInsufficientDriver;
    return;
  }
  CUresult r = s.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    s.init_error = r == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : map(r);
    return;
  }
  if (s.api.cuDeviceGetCount(&s.device_count) != CUDA_SUCCESS || s.device_count <= 0) {
    s.init_error = cudaErrorNoDevice;
    return;
  }
  s.retained.assign(static_cast<std::size_t>(s.device_count), false);
  s.primary.assign(static_cast<std::size_t>(s.device_count), nullptr);
}

}  // namespace

cudaError_t init() {
  State& s = S();
  std::call_once(s.once, load);
  return s.init_error;
}

const DriverApi& drv() { return S().api; }
int device_count() { return S().device_count; }

cudaError_t activate(int dev) {
  if (cudaError_t e = init()) return e;
  State& s = S();
  if (dev < 0 || dev >= s.device_count) return cudaErrorInvalidDevice;
  CUcontext c = nullptr;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (!s.retained[dev]) {
      // The runtime retains each primary context once per process.
      if (CUresult r = s.api.cuDevicePrimaryCtxRetain(&s.primary[dev], dev)) return map(r);
      s.retained[dev] = true;
    }
    c = s.primary[dev];
  }
  if (CUresult r = s.api.cuCtxSetCurrent(c)) return map(r);
  tl_device = dev;
  return cudaSuccess;
}

cudaError_t ctx() {
  if (cudaError_t e = init()) return e;
  CUcontext cur = nullptr;
  if (CUresult r = drv().cuCtxGetCurrent(&cur)) return map(r);
  if (cur) {
    // A context is current (ours, or one the program made with the driver
    // API): the runtime uses it, as the real one does.
    CUdevice d = 0;
    if (drv().cuCtxGetDevice_v2(&d, nullptr) == CUDA_SUCCESS) {
      tl_device = d;
      return cudaSuccess;
    }
  }
  return activate(tl_device);
}

int current_device() { return tl_device; }

cudaError_t map(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_MAP_FAILED: return cudaErrorMapBufferObjectFailed;
    case CUDA_ERROR_TOO_MANY_PEERS: return cudaErrorTooManyPeers;
    // Stream capture (drv_capture.cpp): the runtime's codes of the same names and numbers.
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: return cudaErrorStreamCaptureMerge;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return cudaErrorStreamCaptureUnjoined;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return cudaErrorStreamCaptureIsolation;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_CAPTURED_EVENT: return cudaErrorCapturedEvent;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    default: return cudaErrorUnknown;
  }
}

cudaError_t ret(cudaError_t e) {
  // cudaErrorNotReady (a query's answer) is not an error and is not recorded.
  if (e != cudaSuccess && e != cudaErrorNotReady) tl_last_error = e;
  if (is_sticky(e)) {
    if (auto* slot = sticky_slot(tl_device)) slot->store(e);
  }
  return e;
}

}  // namespace rt

// ---- errors ----------------------------------------------------------------------

cudaError_t CUDARTAPI cudaGetLastError(void) {
  // "Returns the last error ... and resets it to cudaSuccess", except a
  // sticky error of the thread's device, which stays (see g_sticky).
  cudaError_t e = rt::tl_last_error;
  auto* slot = rt::sticky_slot(rt::tl_device);
  const int sticky = slot ? slot->load() : 0;
  if (sticky != 0) {
    e = static_cast<cudaError_t>(sticky);
    rt::tl_last_error = e;
  } else {
    rt::tl_last_error = cudaSuccess;
  }
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return rt::tl_last_error; }

// ---- versions ------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return rt::ret(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return rt::ret(cudaErrorInvalidValue);
  // "If no driver is installed, then 0 is returned as the driver version."
  *driverVersion = 0;
  rt::init();
  if (rt::drv().cuDriverGetVersion) rt::drv().cuDriverGetVersion(driverVersion);
  return cudaSuccess;
}

// ---- devices -----------------------------------------------------------------------

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  if (!count) return rt::ret(cudaErrorInvalidValue);
  *count = 0;
  if (cudaError_t e = rt::init()) return rt::ret(e);
  *count = rt::device_count();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (cudaError_t e = rt::init()) return rt::ret(e);
  // Since CUDA 12.0 cudaSetDevice initialises the device's primary context.
  return rt::ret(rt::activate(device));
}

cudaError_t CUDARTAPI cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  (void)deviceFlags;
  if (flags != 0) return rt::ret(cudaErrorInvalidValue);
  if (cudaError_t e = rt::init()) return rt::ret(e);
  int prev = rt::current_device();
  cudaError_t e = rt::activate(device);
  if (e == cudaSuccess && prev != device) e = rt::activate(prev);
  return rt::ret(e);
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  if (!device) return rt::ret(cudaErrorInvalidValue);
  if (cudaError_t e = rt::init()) return rt::ret(e);
  CUcontext cur = nullptr;
  rt::drv().cuCtxGetCurrent(&cur);
  CUdevice d = 0;
  if (cur && rt::drv().cuCtxGetDevice_v2(&d, nullptr) == CUDA_SUCCESS) {
    *device = d;
  } else {
    *device = rt::current_device();
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  RT_REQUIRE_CTX();
  return rt::ret(rt::drv().cuCtxSynchronize_v2(nullptr));
}

cudaError_t CUDARTAPI cudaDeviceReset(void) {
  // "Destroy all allocations and reset all state on the current device in
  //  the current process." The primary context stays retained and is empty.
  RT_REQUIRE_CTX();
  CUcontext cur = nullptr;
  rt::drv().cuCtxGetCurrent(&cur);
  rt::forget_modules(cur);  // the reset unloads them (rt_kernels.cpp)
  const int dev = rt::current_device();
  const cudaError_t e = rt::ret(rt::drv().cuDevicePrimaryCtxReset_v2(dev));
  if (e == cudaSuccess) {
    // A new context: its sticky error is gone, from this thread's last error too.
    if (auto* slot = rt::sticky_slot(dev)) slot->store(0);
    if (rt::is_sticky(rt::tl_last_error)) rt::tl_last_error = cudaSuccess;
  }
  return e;
}

cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int flags) {
  RT_REQUIRE_CTX();
  return rt::ret(rt::drv().cuDevicePrimaryCtxSetFlags_v2(rt::current_device(),
                                                        flags & ~cudaDeviceMapHost));
}

cudaError_t CUDARTAPI cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  int active = 0;
  CUresult r = rt::drv().cuDevicePrimaryCtxGetState(rt::current_device(), flags, &active);
  if (r == CUDA_SUCCESS) *flags |= cudaDeviceMapHost;
  return rt::ret(r);
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) return rt::ret(cudaErrorInvalidValue);
  if (cudaError_t e = rt::init()) return rt::ret(e);
  if (device < 0 || device >= rt::device_count()) return rt::ret(cudaErrorInvalidDevice);
  // cudaDeviceAttr and CUdevice_attribute share their numbering.
  return rt::ret(
      rt::drv().cuDeviceGetAttribute(value, static_cast<CUdevice_attribute>(attr), device));
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return rt::ret(cudaErrorInvalidValue);
  if (cudaError_t e = rt::init()) return rt::ret(e);
  if (device < 0 || device >= rt::device_count()) return rt::ret(cudaErrorInvalidDevice);
  const auto& d = rt::drv();
  std::memset(prop, 0, sizeof(*prop));
  if (CUresult r = d.cuDeviceGetName(prop->name, sizeof(prop->name), device)) return rt::ret(r);
  d.cuDeviceGetUuid_v2(reinterpret_cast<CUuuid*>(&prop->uuid), device);
  d.cuDeviceTotalMem_v2(&prop->totalGlobalMem, device);
  auto A = [&](CUdevice_attribute a) {
    int v = 0;
    d.cuDeviceGetAttribute(&v, a, device);
    return v;
  };
  prop->sharedMemPerBlock = A(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->regsPerBlock = A(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->warpSize = A(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = A(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->maxThreadsPerBlock = A(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = A(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = A(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = A(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = A(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = A(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = A(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->totalConstMem = A(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->major = A(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  prop->minor = A(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  prop->textureAlignment = A(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  prop->texturePitchAlignment = A(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT);
  prop->multiProcessorCount = A(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  prop->canMapHostMemory = A(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  prop->surfaceAlignment = A(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT);
  prop->concurrentKernels = A(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  prop->pciBusID = A(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  prop->asyncEngineCount = A(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  prop->unifiedAddressing = A(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  prop->memoryBusWidth = A(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  prop->l2CacheSize = A(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  prop->maxThreadsPerMultiProcessor = A(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  prop->streamPrioritiesSupported = A(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  prop->globalL1CacheSupported = A(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED);
  prop->localL1CacheSupported = A(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED);
  prop->sharedMemPerMultiprocessor = A(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  prop->regsPerMultiprocessor = A(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  prop->managedMemory = A(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  prop->multiGpuBoardGroupID = A(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID);
  prop->concurrentManagedAccess = A(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  prop->computePreemptionSupported = A(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED);
  prop->cooperativeLaunch = A(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  prop->sharedMemPerBlockOptin = A(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  prop->directManagedMemAccessFromHost = A(CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST);
  prop->maxBlocksPerMultiProcessor = A(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  prop->reservedSharedMemPerBlock = A(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
  prop->memoryPoolsSupported = A(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  prop->clusterLaunch = A(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
  prop->deviceNumaId = A(CU_DEVICE_ATTRIBUTE_NUMA_ID);
  prop->hostNumaId = A(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (!canAccessPeer) return rt::ret(cudaErrorInvalidValue);
  if (cudaError_t e = rt::init()) return rt::ret(e);
  if (device < 0 || device >= rt::device_count() || peerDevice < 0 ||
      peerDevice >= rt::device_count()) {
    return rt::ret(cudaErrorInvalidDevice);
  }
  return rt::ret(rt::drv().cuDeviceCanAccessPeer(canAccessPeer, device, peerDevice));
}

// ---- driver entry points -------------------------------------------------------------

namespace {

cudaError_t entry_point(const char* symbol, void** fn, int version, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* status, bool per_thread_default) {
  if (!symbol || !fn) return rt::ret(cudaErrorInvalidValue);
  if (cudaError_t e = rt::init()) return rt::ret(e);
  // cudaEnableDefault means per-thread only for code built with per-thread
  // default streams, i.e. callers of the _ptsz entry point.
  if (flags == cudaEnableDefault) {
    flags = per_thread_default ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                               : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  }
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = rt::drv().cuGetProcAddress_v2(symbol, fn, version, flags, &st);
  if (status) *status = static_cast<cudaDriverEntryPointQueryResult>(st);
  return rt::ret(r);
}

}  // namespace

cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char* symbol, void** funcPtr,
                                              unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, false);
}
cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(
    const char* symbol, void** funcPtr, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, true);
}
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus, false);
}
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus, true);
}
