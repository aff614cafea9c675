// Internal interface of the simulated runtime (libcudart.so.13).
//
// Like the real runtime, it does not link to the driver: it dlopen()s
// libcuda.so.1, dlsym()s cuGetProcAddress_v2 and obtains every driver
// function it uses through it (the per-thread variants with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), so a profiler that only
// interposes on exported driver symbols misses these calls, as with the real
// runtime.
#pragma once

// Declares both the legacy-stream and the _ptds/_ptsz entry points.
#define __CUDA_API_VERSION_INTERNAL 1
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#pragma GCC visibility pop

namespace rt {

// (member = the driver ABI we call, base name asked of cuGetProcAddress,
//  whether to ask for the per-thread-default-stream variant)
#define SIM_RT_DRIVER_FUNCS(X)                                 \
  X(cuInit, "cuInit", false)                                   \
  X(cuDriverGetVersion, "cuDriverGetVersion", false)           \
  X(cuGetErrorName, "cuGetErrorName", false)                   \
  X(cuDeviceGet, "cuDeviceGet", false)                         \
  X(cuDeviceGetCount, "cuDeviceGetCount", false)               \
  X(cuDeviceGetName, "cuDeviceGetName", false)                 \
  X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", false)            \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", false)       \
  X(cuDeviceGetUuid_v2, "cuDeviceGetUuid", false)              \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", false) \
  X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", false) \
  X(cuDevicePrimaryCtxSetFlags_v2, "cuDevicePrimaryCtxSetFlags", false) \
  X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", false) \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", false)                 \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", false)                 \
  X(cuCtxGetDevice_v2, "cuCtxGetDevice", false)                \
  X(cuCtxSynchronize_v2, "cuCtxSynchronize", false)            \
  X(cuMemAlloc_v2, "cuMemAlloc", false)                        \
  X(cuMemFree_v2, "cuMemFree", false)                          \
  X(cuMemGetInfo_v2, "cuMemGetInfo", false)                    \
  X(cuMemAllocPitch_v2, "cuMemAllocPitch", false)              \
  X(cuMemAllocManaged, "cuMemAllocManaged", false)             \
  X(cuMemAllocHost_v2, "cuMemAllocHost", false)                \
  X(cuMemHostAlloc, "cuMemHostAlloc", false)                   \
  X(cuMemFreeHost, "cuMemFreeHost", false)                     \
  X(cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer", false) \
  X(cuMemHostGetFlags, "cuMemHostGetFlags", false)             \
  X(cuMemGetAddressRange_v2, "cuMemGetAddressRange", false)    \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", false)     \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", false)   \
  X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", false)     \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", false)             \
  X(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", false)        \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", false)         \
  X(cuMemAllocAsync, "cuMemAllocAsync", false)                 \
  X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", true)             \
  X(cuMemFreeAsync, "cuMemFreeAsync", false)                   \
  X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", true)               \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", false) \
  X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", true) \
  X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", false) \
  X(cuDeviceGetMemPool, "cuDeviceGetMemPool", false)           \
  X(cuDeviceSetMemPool, "cuDeviceSetMemPool", false)           \
  X(cuMemPoolCreate, "cuMemPoolCreate", false)                 \
  X(cuMemPoolDestroy, "cuMemPoolDestroy", false)               \
  X(cuMemPoolTrimTo, "cuMemPoolTrimTo", false)                 \
  X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", false)     \
  X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", false)     \
  X(cuMemcpy, "cuMemcpy", false)                               \
  X(cuMemcpy_ptds, "cuMemcpy", true)                           \
  X(cuMemcpyAsync, "cuMemcpyAsync", false)                     \
  X(cuMemcpyAsync_ptsz, "cuMemcpyAsync", true)                 \
  X(cuMemcpyHtoD_v2, "cuMemcpyHtoD", false)                    \
  X(cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD", true)                \
  X(cuMemcpyDtoH_v2, "cuMemcpyDtoH", false)                    \
  X(cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH", true)                \
  X(cuMemcpyDtoD_v2, "cuMemcpyDtoD", false)                    \
  X(cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD", true)                \
  X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync", false)          \
  X(cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync", true)      \
  X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", false)          \
  X(cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync", true)      \
  X(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync", false)          \
  X(cuMemcpyDtoDAsync_v2_ptsz, "cuMemcpyDtoDAsync", true)      \
  X(cuMemsetD8_v2, "cuMemsetD8", false)                        \
  X(cuMemsetD8_v2_ptds, "cuMemsetD8", true)                    \
  X(cuMemsetD8Async, "cuMemsetD8Async", false)                 \
  X(cuMemsetD8Async_ptsz, "cuMemsetD8Async", true)             \
  X(cuMemsetD2D8_v2, "cuMemsetD2D8", false)                    \
  X(cuMemsetD2D8_v2_ptds, "cuMemsetD2D8", true)                \
  X(cuMemsetD2D8Async, "cuMemsetD2D8Async", false)             \
  X(cuMemsetD2D8Async_ptsz, "cuMemsetD2D8Async", true)         \
  X(cuStreamCreate, "cuStreamCreate", false)                   \
  X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", false) \
  X(cuStreamDestroy_v2, "cuStreamDestroy", false)              \
  X(cuStreamSynchronize, "cuStreamSynchronize", false)         \
  X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", true)     \
  X(cuStreamQuery, "cuStreamQuery", false)                     \
  X(cuStreamQuery_ptsz, "cuStreamQuery", true)                 \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", false)             \
  X(cuStreamWaitEvent_ptsz, "cuStreamWaitEvent", true)         \
  X(cuStreamGetFlags, "cuStreamGetFlags", false)               \
  X(cuStreamGetFlags_ptsz, "cuStreamGetFlags", true)           \
  X(cuStreamGetPriority, "cuStreamGetPriority", false)         \
  X(cuStreamGetPriority_ptsz, "cuStreamGetPriority", true)     \
  X(cuStreamGetId, "cuStreamGetId", false)                     \
  X(cuStreamGetId_ptsz, "cuStreamGetId", true)                 \
  X(cuStreamGetDevice, "cuStreamGetDevice", false)             \
  X(cuStreamGetDevice_ptsz, "cuStreamGetDevice", true)         \
  X(cuLaunchHostFunc, "cuLaunchHostFunc", false)               \
  X(cuLaunchHostFunc_ptsz, "cuLaunchHostFunc", true)           \
  X(cuStreamAddCallback, "cuStreamAddCallback", false)         \
  X(cuStreamAddCallback_ptsz, "cuStreamAddCallback", true)     \
  X(cuEventCreate, "cuEventCreate", false)                     \
  X(cuEventRecord, "cuEventRecord", false)                     \
  X(cuEventRecord_ptsz, "cuEventRecord", true)                 \
  X(cuEventRecordWithFlags, "cuEventRecordWithFlags", false)   \
  X(cuEventRecordWithFlags_ptsz, "cuEventRecordWithFlags", true) \
  X(cuEventQuery, "cuEventQuery", false)                       \
  X(cuEventSynchronize, "cuEventSynchronize", false)           \
  X(cuEventDestroy_v2, "cuEventDestroy", false)                \
  X(cuEventElapsedTime_v2, "cuEventElapsedTime", false)         \
  /* kernels (rt_kernels.cpp) */                               \
  X(cuModuleLoadData, "cuModuleLoadData", false)               \
  X(cuModuleGetFunction, "cuModuleGetFunction", false)         \
  X(cuModuleGetGlobal_v2, "cuModuleGetGlobal", false)          \
  X(cuLaunchKernel, "cuLaunchKernel", false)                   \
  X(cuLaunchKernel_ptsz, "cuLaunchKernel", true)               \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", false)               \
  X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", true)           \
  X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", false) \
  X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", true) \
  X(cuFuncGetAttribute, "cuFuncGetAttribute", false)           \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", false)           \
  X(cuFuncSetCacheConfig, "cuFuncSetCacheConfig", false)       \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,      \
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", false) \
  X(cuOccupancyAvailableDynamicSMemPerBlock, "cuOccupancyAvailableDynamicSMemPerBlock", false) \
  X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", false) \
  /* host registration, peer access, profiler, managed hints, 2D (rt_misc.cpp) */ \
  X(cuMemHostRegister_v2, "cuMemHostRegister", false)          \
  X(cuMemHostUnregister, "cuMemHostUnregister", false)         \
  X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", false)     \
  X(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", false)   \
  X(cuDeviceGetP2PAttribute, "cuDeviceGetP2PAttribute", false) \
  X(cuProfilerStart, "cuProfilerStart", false)                 \
  X(cuProfilerStop, "cuProfilerStop", false)                   \
  X(cuMemAdvise_v2, "cuMemAdvise", false)                      \
  X(cuMemPrefetchAsync_v2, "cuMemPrefetchAsync", false)        \
  X(cuMemPrefetchAsync_v2_ptsz, "cuMemPrefetchAsync", true)    \
  X(cuMemRangeGetAttribute, "cuMemRangeGetAttribute", false)   \
  X(cuMemRangeGetAttributes, "cuMemRangeGetAttributes", false) \
  X(cuMemcpyPeer, "cuMemcpyPeer", false)                       \
  X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", false)             \
  X(cuMemcpy2D_v2, "cuMemcpy2D", false)                        \
  X(cuMemcpy2D_v2_ptds, "cuMemcpy2D", true)                    \
  X(cuMemcpy2DAsync_v2, "cuMemcpy2DAsync", false)              \
  X(cuMemcpy2DAsync_v2_ptsz, "cuMemcpy2DAsync", true)         \
  /* stream capture and graphs (rt_graph.cpp) */              \
  X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", false)    \
  X(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", true) \
  X(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", false) \
  X(cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph", true) \
  X(cuStreamEndCapture, "cuStreamEndCapture", false)           \
  X(cuStreamEndCapture_ptsz, "cuStreamEndCapture", true)       \
  X(cuStreamIsCapturing, "cuStreamIsCapturing", false)         \
  X(cuStreamIsCapturing_ptsz, "cuStreamIsCapturing", true)     \
  X(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo", false) \
  X(cuStreamGetCaptureInfo_v3_ptsz, "cuStreamGetCaptureInfo", true) \
  X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", false) \
  X(cuGraphCreate, "cuGraphCreate", false)                     \
  X(cuGraphDestroy, "cuGraphDestroy", false)                   \
  X(cuGraphAddEmptyNode, "cuGraphAddEmptyNode", false)         \
  X(cuGraphAddMemsetNode, "cuGraphAddMemsetNode", false)       \
  X(cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode", false)       \
  X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", false)   \
  X(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode", false)     \
  X(cuGraphAddNode_v2, "cuGraphAddNode", false)                \
  X(cuGraphGetNodes, "cuGraphGetNodes", false)                 \
  X(cuGraphNodeGetType, "cuGraphNodeGetType", false)           \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", false) \
  X(cuGraphUpload, "cuGraphUpload", false)                     \
  X(cuGraphUpload_ptsz, "cuGraphUpload", true)                 \
  X(cuGraphLaunch, "cuGraphLaunch", false)                     \
  X(cuGraphLaunch_ptsz, "cuGraphLaunch", true)                 \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", false)           \
  X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", false)       \
  X(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", false) \
  X(cuDeviceSetGraphMemAttribute, "cuDeviceSetGraphMemAttribute", false)

struct DriverApi {
  decltype(&::cuGetProcAddress_v2) cuGetProcAddress_v2 = nullptr;
#define SIM_RT_MEMBER(FN, NAME, PT) decltype(&::FN) FN = nullptr;
  SIM_RT_DRIVER_FUNCS(SIM_RT_MEMBER)
#undef SIM_RT_MEMBER
};

// Loads the driver once; cudaSuccess or the reason it could not.
cudaError_t init();
// The driver table; valid after init() succeeded.
const DriverApi& drv();
// init() + make sure a context is current on this thread (the primary
// context of the thread's device, retained once per process).
cudaError_t ctx();
// The device the calling thread works on (after ctx()).
int current_device();
// Makes dev's primary context current (cudaSetDevice).
cudaError_t activate(int dev);
int device_count();

// CUresult -> cudaError_t, as the real runtime reports them.
cudaError_t map(CUresult r);
// Records e as the thread's last error (unless success/not-ready), returns e.
cudaError_t ret(cudaError_t e);
inline cudaError_t ret(CUresult r) { return ret(map(r)); }

// Drops the modules the runtime loaded into ctx (cudaDeviceReset destroyed
// them with the context's state); rt_kernels.cpp loads them again on use.
void forget_modules(CUcontext ctx);

}  // namespace rt

#define RT_REQUIRE_CTX()                                   \
  do {                                                     \
    if (cudaError_t rt_e_ = ::rt::ctx()) return ::rt::ret(rt_e_); \
  } while (0)
