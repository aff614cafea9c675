// Runtime memory API: every call becomes the driver call the real runtime
// makes (cudaMalloc -> cuMemAlloc_v2, cudaFree -> cuMemFree_v2,
// cudaMallocAsync -> cuMemAllocAsync, ...), through pointers obtained from
// cuGetProcAddress_v2.
#include <cstdint>
#include <cstring>

#include "rt_internal.h"

using rt::drv;

namespace {

CUdeviceptr dp(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

cudaError_t memcpy_impl(void* dst, const void* src, size_t n, cudaMemcpyKind kind, bool async,
                        cudaStream_t s, bool pt) {
  RT_REQUIRE_CTX();
  const auto& d = drv();
  CUstream h = reinterpret_cast<CUstream>(s);
  // The per-thread entry points (_ptds/_ptsz) treat stream 0 as the
  // per-thread default stream.
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (async) {
        return rt::ret((pt ? d.cuMemcpyHtoDAsync_v2_ptsz : d.cuMemcpyHtoDAsync_v2)(dp(dst), src, n, h));
      }
      return rt::ret((pt ? d.cuMemcpyHtoD_v2_ptds : d.cuMemcpyHtoD_v2)(dp(dst), src, n));
    case cudaMemcpyDeviceToHost:
      if (async) {
        return rt::ret((pt ? d.cuMemcpyDtoHAsync_v2_ptsz : d.cuMemcpyDtoHAsync_v2)(dst, dp(src), n, h));
      }
      return rt::ret((pt ? d.cuMemcpyDtoH_v2_ptds : d.cuMemcpyDtoH_v2)(dst, dp(src), n));
    case cudaMemcpyDeviceToDevice:
      if (async) {
        return rt::ret(
            (pt ? d.cuMemcpyDtoDAsync_v2_ptsz : d.cuMemcpyDtoDAsync_v2)(dp(dst), dp(src), n, h));
      }
      return rt::ret((pt ? d.cuMemcpyDtoD_v2_ptds : d.cuMemcpyDtoD_v2)(dp(dst), dp(src), n));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      // Unified addressing: the driver infers each side from the pointer.
      if (async) return rt::ret((pt ? d.cuMemcpyAsync_ptsz : d.cuMemcpyAsync)(dp(dst), dp(src), n, h));
      return rt::ret((pt ? d.cuMemcpy_ptds : d.cuMemcpy)(dp(dst), dp(src), n));
    default:
      return rt::ret(cudaErrorInvalidMemcpyDirection);
  }
}

cudaError_t memset_impl(void* p, int value, size_t n, bool async, cudaStream_t s, bool pt) {
  RT_REQUIRE_CTX();
  const auto& d = drv();
  auto v = static_cast<unsigned char>(value);
  if (async) {
    return rt::ret((pt ? d.cuMemsetD8Async_ptsz : d.cuMemsetD8Async)(dp(p), v, n,
                                                                     reinterpret_cast<CUstream>(s)));
  }
  return rt::ret((pt ? d.cuMemsetD8_v2_ptds : d.cuMemsetD8_v2)(dp(p), v, n));
}

cudaError_t memset2d_impl(void* p, size_t pitch, int value, size_t w, size_t h, bool async,
                          cudaStream_t s, bool pt) {
  RT_REQUIRE_CTX();
  const auto& d = drv();
  auto v = static_cast<unsigned char>(value);
  if (async) {
    return rt::ret((pt ? d.cuMemsetD2D8Async_ptsz : d.cuMemsetD2D8Async)(
        dp(p), pitch, v, w, h, reinterpret_cast<CUstream>(s)));
  }
  return rt::ret((pt ? d.cuMemsetD2D8_v2_ptds : d.cuMemsetD2D8_v2)(dp(p), pitch, v, w, h));
}

cudaError_t malloc_async(void** p, size_t n, cudaStream_t s, bool pt) {
  if (!p) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  CUdeviceptr d = 0;
  CUresult r = (pt ? drv().cuMemAllocAsync_ptsz : drv().cuMemAllocAsync)(
      &d, n, reinterpret_cast<CUstream>(s));
  if (r) return rt::ret(r);
  *p = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t malloc_from_pool(void** p, size_t n, cudaMemPool_t pool, cudaStream_t s, bool pt) {
  if (!p) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  CUdeviceptr d = 0;
  CUresult r = (pt ? drv().cuMemAllocFromPoolAsync_ptsz : drv().cuMemAllocFromPoolAsync)(
      &d, n, reinterpret_cast<CUmemoryPool>(pool), reinterpret_cast<CUstream>(s));
  if (r) return rt::ret(r);
  *p = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t free_async(void* p, cudaStream_t s, bool pt) {
  RT_REQUIRE_CTX();
  return rt::ret((pt ? drv().cuMemFreeAsync_ptsz : drv().cuMemFreeAsync)(
      dp(p), reinterpret_cast<CUstream>(s)));
}

}  // namespace

cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  // A zero-byte request succeeds with a NULL pointer (no driver call).
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr d = 0;
  if (CUresult r = drv().cuMemAlloc_v2(&d, size)) return rt::ret(r);
  *devPtr = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  // cudaFree(NULL) is the idiom for "create the context now": it
  // initialises and succeeds.
  RT_REQUIRE_CTX();
  if (!devPtr) return cudaSuccess;
  return rt::ret(drv().cuMemFree_v2(dp(devPtr)));
}

cudaError_t CUDARTAPI cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  if (!devPtr) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  CUdeviceptr d = 0;
  if (CUresult r = drv().cuMemAllocManaged(&d, size, flags)) return rt::ret(r);
  *devPtr = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (!devPtr || !pitch) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  CUdeviceptr d = 0;
  if (CUresult r = drv().cuMemAllocPitch_v2(&d, pitch, width, height, 4)) return rt::ret(r);
  *devPtr = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc3D(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent) {
  if (!pitchedDevPtr) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  // height × depth rows of `width` bytes, pitched as cudaMallocPitch pitches
  // them; xsize/ysize echo the logical extent (cudaMalloc3D). A zero extent
  // is refused as cuMemAllocPitch refuses it.
  if (extent.depth != 0 && extent.height > SIZE_MAX / extent.depth) {
    return rt::ret(cudaErrorMemoryAllocation);
  }
  CUdeviceptr d = 0;
  std::size_t pitch = 0;
  if (CUresult r = drv().cuMemAllocPitch_v2(&d, &pitch, extent.width, extent.height * extent.depth, 4)) {
    return rt::ret(r);
  }
  *pitchedDevPtr = cudaPitchedPtr{reinterpret_cast<void*>(d), pitch, extent.width, extent.height};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size) {
  if (!ptr) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemAllocHost_v2(ptr, size));
}

cudaError_t CUDARTAPI cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (!pHost) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  // cudaHostAlloc{Portable,Mapped,WriteCombined} == CU_MEMHOSTALLOC_*.
  return rt::ret(drv().cuMemHostAlloc(pHost, size, flags));
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  RT_REQUIRE_CTX();
  if (!ptr) return cudaSuccess;
  return rt::ret(drv().cuMemFreeHost(ptr));
}

cudaError_t CUDARTAPI cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (!pDevice) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  CUdeviceptr d = 0;
  if (CUresult r = drv().cuMemHostGetDevicePointer_v2(&d, pHost, flags)) return rt::ret(r);
  *pDevice = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemHostGetFlags(pFlags, pHost));
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free, size_t* total) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemGetInfo_v2(free, total));
}

cudaError_t CUDARTAPI cudaMallocAsync(void** p, size_t n, cudaStream_t s) {
  return malloc_async(p, n, s, false);
}
cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void** p, size_t n, cudaStream_t s) {
  return malloc_async(p, n, s, true);
}
cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** p, size_t n, cudaMemPool_t pool,
                                              cudaStream_t s) {
  return malloc_from_pool(p, n, pool, s, false);
}
cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void** p, size_t n, cudaMemPool_t pool,
                                                   cudaStream_t s) {
  return malloc_from_pool(p, n, pool, s, true);
}
cudaError_t CUDARTAPI cudaFreeAsync(void* p, cudaStream_t s) { return free_async(p, s, false); }
cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void* p, cudaStream_t s) { return free_async(p, s, true); }

cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  if (cudaError_t e = rt::init()) return rt::ret(e);
  return rt::ret(
      drv().cuDeviceGetDefaultMemPool(reinterpret_cast<CUmemoryPool*>(memPool), device));
}
cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) {
  if (cudaError_t e = rt::init()) return rt::ret(e);
  return rt::ret(drv().cuDeviceGetMemPool(reinterpret_cast<CUmemoryPool*>(memPool), device));
}
cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  if (cudaError_t e = rt::init()) return rt::ret(e);
  return rt::ret(drv().cuDeviceSetMemPool(device, reinterpret_cast<CUmemoryPool>(memPool)));
}

static_assert(sizeof(cudaMemPoolProps) == sizeof(CUmemPoolProps), "pool props layout");

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* memPool,
                                        const struct cudaMemPoolProps* poolProps) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemPoolCreate(reinterpret_cast<CUmemoryPool*>(memPool),
                                       reinterpret_cast<const CUmemPoolProps*>(poolProps)));
}
cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(memPool)));
}
cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemPoolTrimTo(reinterpret_cast<CUmemoryPool>(memPool), minBytesToKeep));
}
cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void* value) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(memPool),
                                             static_cast<CUmemPool_attribute>(attr), value));
}
cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void* value) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuMemPoolSetAttribute(reinterpret_cast<CUmemoryPool>(memPool),
                                             static_cast<CUmemPool_attribute>(attr), value));
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
  return memcpy_impl(dst, src, n, kind, false, nullptr, false);
}
cudaError_t CUDARTAPI cudaMemcpy_ptds(void* dst, const void* src, size_t n,
                                      enum cudaMemcpyKind kind) {
  return memcpy_impl(dst, src, n, kind, false, nullptr, true);
}
cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t n,
                                      enum cudaMemcpyKind kind, cudaStream_t s) {
  return memcpy_impl(dst, src, n, kind, true, s, false);
}
cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t n,
                                           enum cudaMemcpyKind kind, cudaStream_t s) {
  return memcpy_impl(dst, src, n, kind, true, s, true);
}
cudaError_t CUDARTAPI cudaMemset(void* p, int v, size_t n) {
  return memset_impl(p, v, n, false, nullptr, false);
}
cudaError_t CUDARTAPI cudaMemset_ptds(void* p, int v, size_t n) {
  return memset_impl(p, v, n, false, nullptr, true);
}
cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  return memset_impl(p, v, n, true, s, false);
}
cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void* p, int v, size_t n, cudaStream_t s) {
  return memset_impl(p, v, n, true, s, true);
}
cudaError_t CUDARTAPI cudaMemset2D(void* p, size_t pitch, int v, size_t w, size_t h) {
  return memset2d_impl(p, pitch, v, w, h, false, nullptr, false);
}
cudaError_t CUDARTAPI cudaMemset2D_ptds(void* p, size_t pitch, int v, size_t w, size_t h) {
  return memset2d_impl(p, pitch, v, w, h, false, nullptr, true);
}
cudaError_t CUDARTAPI cudaMemset2DAsync(void* p, size_t pitch, int v, size_t w, size_t h,
                                        cudaStream_t s) {
  return memset2d_impl(p, pitch, v, w, h, true, s, false);
}
cudaError_t CUDARTAPI cudaMemset2DAsync_ptsz(void* p, size_t pitch, int v, size_t w, size_t h,
                                             cudaStream_t s) {
  return memset2d_impl(p, pitch, v, w, h, true, s, true);
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes* attributes,
                                               const void* ptr) {
  if (!attributes) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  // One cuPointerGetAttributes call (the real libcudart.so.13 asks the
  // driver for both cuPointerGetAttribute and cuPointerGetAttributes; which
  // one cudaPointerGetAttributes calls was not checked on a GPU, and
  // interposers such as HAMi-core hook the plural one for it). A pointer the
  // driver does not know comes back as CUDA_SUCCESS with NULL values
  // (memory type 0).
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                 CU_POINTER_ATTRIBUTE_HOST_POINTER};
  unsigned int type = 0;
  int managed = 0, ordinal = 0;
  CUdeviceptr device_ptr = 0;
  void* host_ptr = nullptr;
  void* data[] = {&type, &managed, &ordinal, &device_ptr, &host_ptr};
  if (CUresult r = drv().cuPointerGetAttributes(5, which, data, dp(ptr))) return rt::ret(r);
  if (type == 0) {
    // "In CUDA 11.0 forward passing host pointer will return
    //  cudaMemoryTypeUnregistered ... and call will return cudaSuccess."
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;  // cudaInvalidDeviceId
    attributes->devicePointer = nullptr;
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  attributes->device = ordinal;
  attributes->devicePointer = reinterpret_cast<void*>(device_ptr);
  attributes->hostPointer = host_ptr;
  if (managed) {
    attributes->type = cudaMemoryTypeManaged;
  } else if (type == CU_MEMORYTYPE_HOST) {
    attributes->type = cudaMemoryTypeHost;
  } else {
    attributes->type = cudaMemoryTypeDevice;
  }
  return cudaSuccess;
}

// ---- legacy IPC ------------------------------------------------------------------
// cudaIpcGetMemHandle -> cuIpcGetMemHandle, cudaIpcOpenMemHandle ->
// cuIpcOpenMemHandle_v2, cudaIpcCloseMemHandle -> cuIpcCloseMemHandle; the
// handle types are the same 64 bytes. A refusal is the thread's last error
// like any other (cudaGetLastError returns it once).
static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "IPC handle layout");

cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  if (!handle) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuIpcGetMemHandle(reinterpret_cast<CUipcMemHandle*>(handle), dp(devPtr)));
}

cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  if (!devPtr) return rt::ret(cudaErrorInvalidValue);
  RT_REQUIRE_CTX();
  CUipcMemHandle h;
  std::memcpy(&h, &handle, sizeof h);
  CUdeviceptr d = 0;
  // cudaIpcMemLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
  if (CUresult r = drv().cuIpcOpenMemHandle_v2(&d, h, flags)) return rt::ret(r);
  *devPtr = reinterpret_cast<void*>(d);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void* devPtr) {
  RT_REQUIRE_CTX();
  return rt::ret(drv().cuIpcCloseMemHandle(dp(devPtr)));
}
