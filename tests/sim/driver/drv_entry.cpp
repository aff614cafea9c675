// cuGetProcAddress / cuGetProcAddress_v2: the (name, version) table.
//
// Each row is one ABI of a driver function: the base name a caller asks for,
// the CUDA version that introduced that ABI (the _vNNNN suffix of its
// PFN_ typedef in cudaTypedefs.h), the function, and — where the driver has
// one — its per-thread-default-stream twin (_ptsz/_ptds) with the version
// that introduced it. Lookup, per the cuGetProcAddress documentation:
//  * the newest ABI whose version <= cudaVersion is returned
//    (e.g. "cuMemAlloc" at >= 3020 is cuMemAlloc_v2, below it cuMemAlloc);
//  * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM returns the per-thread
//    twin when one exists for that ABI, otherwise the legacy one;
//    CU_GET_PROC_ADDRESS_DEFAULT and _LEGACY_STREAM return the legacy one
//    (the header's inline cuGetProcAddress_v2_ptsz turns DEFAULT into
//    PER_THREAD for code compiled with per-thread default streams);
//  * unknown name: pfn NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; known name
//    but every ABI newer than cudaVersion: pfn NULL,
//    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT. cuGetProcAddress_v2 returns
//    CUDA_SUCCESS in both cases ("The API will return CUDA_SUCCESS and set
//    the returned pfn to NULL if ..."); the 11.x cuGetProcAddress (no status
//    argument) returns CUDA_ERROR_NOT_FOUND as documented for 11.3-11.8;
//  * cudaVersion greater than the driver version: CUDA_ERROR_INVALID_VALUE.
#include <cstring>

#include "drv_internal.h"

using namespace sim;

namespace {

struct Entry {
  const char* name;
  int version;
  void* fn;
  void* pt_fn;  // per-thread twin or nullptr
  int pt_version;
};

#define E(NAME, VER, FN) {NAME, VER, reinterpret_cast<void*>(&FN), nullptr, 0}
#define EP(NAME, VER, FN, PTFN, PTVER) \
  {NAME, VER, reinterpret_cast<void*>(&FN), reinterpret_cast<void*>(&PTFN), PTVER}

const Entry kTable[] = {
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    // devices
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDeviceComputeCapability", 2000, cuDeviceComputeCapability),
    E("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    E("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    // contexts
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuCtxCreate", 2000, cuCtxCreate),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxCreate", 11040, cuCtxCreate_v3),
    E("cuCtxCreate", 12050, cuCtxCreate_v4),
    E("cuCtxDestroy", 2000, cuCtxDestroy),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    E("cuCtxGetFlags", 7000, cuCtxGetFlags),
    E("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    // memory
    E("cuMemGetInfo", 2000, cuMemGetInfo),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemAlloc", 2000, cuMemAlloc),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemAllocPitch", 2000, cuMemAllocPitch),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemFree", 2000, cuMemFree),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemGetAddressRange", 2000, cuMemGetAddressRange),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    E("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    // legacy IPC
    E("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    E("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    E("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    E("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    E("cuMemAllocHost", 2000, cuMemAllocHost),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    E("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    EP("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020),
    EP("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020),
    EP("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz,
       11020),
    E("cuMemPoolCreate", 11020, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    // virtual memory management
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemGetAccess", 10020, cuMemGetAccess),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    // copies and sets
    EP("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds, 7000),
    EP("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz, 7000),
    EP("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds, 7000),
    EP("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz, 7000),
    E("cuMemcpyHtoD", 2000, cuMemcpyHtoD),
    EP("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, 7000),
    E("cuMemcpyDtoH", 2000, cuMemcpyDtoH),
    EP("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, 7000),
    E("cuMemcpyDtoD", 2000, cuMemcpyDtoD),
    EP("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, 7000),
    E("cuMemcpyHtoDAsync", 2000, cuMemcpyHtoDAsync),
    EP("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, 7000),
    E("cuMemcpyDtoHAsync", 2000, cuMemcpyDtoHAsync),
    EP("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, 7000),
    E("cuMemcpyDtoDAsync", 3000, cuMemcpyDtoDAsync),
    EP("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, 7000),
    E("cuMemsetD8", 2000, cuMemsetD8),
    EP("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds, 7000),
    E("cuMemsetD16", 2000, cuMemsetD16),
    EP("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds, 7000),
    E("cuMemsetD32", 2000, cuMemsetD32),
    EP("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds, 7000),
    EP("cuMemsetD2D8", 3020, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds, 7000),
    EP("cuMemsetD2D32", 3020, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, 7000),
    EP("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz, 7000),
    EP("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz, 7000),
    EP("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz, 7000),
    EP("cuMemsetD2D8Async", 3020, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz, 7000),
    EP("cuMemsetD2D32Async", 3020, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz, 7000),
    // streams and events
    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    E("cuStreamDestroy", 2000, cuStreamDestroy),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    EP("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz, 7000),
    EP("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz, 7000),
    EP("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz, 7000),
    EP("cuStreamAddCallback", 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz, 7000),
    EP("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz, 10000),
    EP("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz, 7000),
    EP("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz, 7000),
    EP("cuStreamGetId", 12000, cuStreamGetId, cuStreamGetId_ptsz, 12000),
    EP("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz, 9020),
    EP("cuStreamGetDevice", 12080, cuStreamGetDevice, cuStreamGetDevice_ptsz, 12080),
    E("cuEventCreate", 2000, cuEventCreate),
    EP("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz, 7000),
    EP("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz, 11010),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventDestroy", 2000, cuEventDestroy),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    E("cuEventElapsedTime", 2000, cuEventElapsedTime),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
};
#undef E
#undef EP

enum class Found { Ok, NotFound, VersionTooLow };

Found lookup(const char* symbol, int version, cuuint64_t flags, void** pfn) {
  const Entry* best = nullptr;
  bool known = false;
  for (const Entry& e : kTable) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    known = true;
    if (e.version <= version && (!best || e.version > best->version)) best = &e;
  }
  if (!best) return known ? Found::VersionTooLow : Found::NotFound;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  *pfn = (per_thread && best->pt_fn && version >= best->pt_version) ? best->pt_fn : best->fn;
  return Found::Ok;
}

CUresult get_proc(const char* symbol, void** pfn, int version, cuuint64_t flags,
                  CUdriverProcAddressQueryResult* status, bool v2) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t all = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~all) != 0) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (version > kDriverVersion) return CUDA_ERROR_INVALID_VALUE;
  // cuGetProcAddress works before cuInit (the runtime uses it to find cuInit).
  switch (lookup(symbol, version, flags, pfn)) {
    case Found::Ok:
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    case Found::VersionTooLow:
      if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return v2 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    case Found::NotFound:
    default:
      if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      return v2 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
  }
}

}  // namespace

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus, true);
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  return get_proc(symbol, pfn, cudaVersion, flags, nullptr, false);
}
