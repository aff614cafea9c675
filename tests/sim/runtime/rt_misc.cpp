// Runtime calls a client makes at start-up beyond allocation: host
// registration, peer access and peer copies, the profiler, managed-memory
// hints and 2D copies. Each becomes the driver call of the same name
// (cudaHostRegister -> cuMemHostRegister_v2, cudaDeviceEnablePeerAccess ->
// cuCtxEnablePeerAccess on the peer's primary context, cudaMemcpy2D ->
// cuMemcpy2D_v2, ...) through pointers from cuGetProcAddress_v2.
#include <cstring>

#include "rt_internal.h"

using rt::drv;

namespace {

CUdeviceptr dp(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// The driver codes of this area that rt::map does not know, as the runtime
// reports them (driver_types.h: cudaErrorPeerAccess*, cudaErrorHostMemory*).
cudaError_t ret(CUresult r) {
  switch (r) {
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return rt::ret(cudaErrorPeerAccessAlreadyEnabled);
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return rt::ret(cudaErrorPeerAccessNotEnabled);
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return rt::ret(cudaErrorPeerAccessUnsupported);
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
      return rt::ret(cudaErrorHostMemoryAlreadyRegistered);
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return rt::ret(cudaErrorHostMemoryNotRegistered);
    default: return rt::ret(r);
  }
}

bool valid_device(int d) { return d >= 0 && d < rt::device_count(); }

// dev's primary context, retained by the runtime once per process as for
// its own device (rt::activate); the calling thread's current context and
// device are restored.
cudaError_t primary_of(int dev, CUcontext* out) {
  CUcontext mine = nullptr;
  if (CUresult r = drv().cuCtxGetCurrent(&mine)) return rt::map(r);
  if (cudaError_t e = rt::activate(dev)) return e;
  CUcontext c = nullptr;
  CUresult r = drv().cuCtxGetCurrent(&c);
  if (CUresult r2 = drv().cuCtxSetCurrent(mine)) return rt::map(r2);
  if (cudaError_t e = rt::ctx()) return e;  // the thread's device follows the restored context
  if (r) return rt::map(r);
  *out = c;
  return cudaSuccess;
}

// The memory types of both sides of a copy of `kind`.
bool memory_types(cudaMemcpyKind kind, CUmemorytype* src, CUmemorytype* dst) {
  switch (kind) {
    case cudaMemcpyHostToHost: *src = *dst = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyHostToDevice: *src = CU_MEMORYTYPE_HOST; *dst = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDeviceToHost: *src = CU_MEMORYTYPE_DEVICE; *dst = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyDeviceToDevice: *src = *dst = CU_MEMORYTYPE_DEVICE; return true;
    // Unified addressing: the driver infers each side from the pointer.
    case cudaMemcpyDefault: *src = *dst = CU_MEMORYTYPE_UNIFIED; return true;
    default: return false;
  }
}

cudaError_t memcpy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                     size_t height, cudaMemcpyKind kind, bool async, cudaStream_t s, bool pt) {
  RT_REQUIRE_CTX();
  CUDA_MEMCPY2D c;
  std::memset(&c, 0, sizeof c);
  if (!memory_types(kind, &c.srcMemoryType, &c.dstMemoryType)) {
    return rt::ret(cudaErrorInvalidMemcpyDirection);
  }
  if (width == 0 || height == 0) return cudaSuccess;
  // "width must not exceed either dpitch or spitch"; "returns an error if
  // dpitch or spitch exceeds the maximum allowed" (cudaMemcpy2D; the
  // device's CU_DEVICE_ATTRIBUTE_MAX_PITCH is 2^31 - 1).
  if (width > dpitch || width > spitch || dpitch > 2147483647u || spitch > 2147483647u) {
    return rt::ret(cudaErrorInvalidPitchValue);
  }
  if (c.srcMemoryType == CU_MEMORYTYPE_HOST) {
    c.srcHost = src;
  } else {
    c.srcDevice = dp(src);
  }
  if (c.dstMemoryType == CU_MEMORYTYPE_HOST) {
    c.dstHost = dst;
  } else {
    c.dstDevice = dp(dst);
  }
  c.srcPitch = spitch;
  c.dstPitch = dpitch;
  c.WidthInBytes = width;
  c.Height = height;
  const auto& d = drv();
  if (async) {
    return ret((pt ? d.cuMemcpy2DAsync_v2_ptsz : d.cuMemcpy2DAsync_v2)(&c, reinterpret_cast<CUstream>(s)));
  }
  return ret((pt ? d.cuMemcpy2D_v2_ptds : d.cuMemcpy2D_v2)(&c));
}

cudaError_t memcpy_peer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                        bool async, cudaStream_t s) {
  RT_REQUIRE_CTX();
  if (!valid_device(dstDevice) || !valid_device(srcDevice)) return rt::ret(cudaErrorInvalidDevice);
  CUcontext dc = nullptr, sc = nullptr;
  if (cudaError_t e = primary_of(dstDevice, &dc)) return rt::ret(e);
  if (cudaError_t e = primary_of(srcDevice, &sc)) return rt::ret(e);
  if (async) {
    return ret(drv().cuMemcpyPeerAsync(dp(dst), dc, dp(src), sc, count, reinterpret_cast<CUstream>(s)));
  }
  return ret(drv().cuMemcpyPeer(dp(dst), dc, dp(src), sc, count));
}

static_assert(sizeof(cudaMemLocation) == sizeof(CUmemLocation), "location layout");

CUmemLocation loc_of(const cudaMemLocation& l) {
  // cudaMemLocationType* == CU_MEM_LOCATION_TYPE_* (driver_types.h, cuda.h).
  CUmemLocation c;
  std::memcpy(&c, &l, sizeof c);
  return c;
}

cudaError_t prefetch(const void* p, size_t count, cudaMemLocation loc, unsigned flags,
                     cudaStream_t s, bool pt) {
  RT_REQUIRE_CTX();
  return ret((pt ? drv().cuMemPrefetchAsync_v2_ptsz : drv().cuMemPrefetchAsync_v2)(
      dp(p), count, loc_of(loc), flags, reinterpret_cast<CUstream>(s)));
}

}  // namespace

// ---- host registration --------------------------------------------------------------
// cudaHostRegister{Portable,Mapped,IoMemory,ReadOnly} == CU_MEMHOSTREGISTER_*.
cudaError_t CUDARTAPI cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  RT_REQUIRE_CTX();
  return ret(drv().cuMemHostRegister_v2(ptr, size, flags));
}

cudaError_t CUDARTAPI cudaHostUnregister(void* ptr) {
  RT_REQUIRE_CTX();
  return ret(drv().cuMemHostUnregister(ptr));
}

// ---- peer access ----------------------------------------------------------------------
// cudaDeviceEnablePeerAccess: "cudaErrorInvalidDevice if cudaDeviceCanAccessPeer()
// indicates that the current device cannot directly access memory from
// peerDevice" (its own device included), cudaErrorPeerAccessAlreadyEnabled,
// cudaErrorInvalidValue for flags other than 0 (cuda_runtime_api.h).
cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  RT_REQUIRE_CTX();
  if (!valid_device(peerDevice)) return rt::ret(cudaErrorInvalidDevice);
  CUcontext peer = nullptr;
  if (cudaError_t e = primary_of(peerDevice, &peer)) return rt::ret(e);
  CUresult r = drv().cuCtxEnablePeerAccess(peer, flags);
  if (r == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED || r == CUDA_ERROR_INVALID_CONTEXT) {
    return rt::ret(cudaErrorInvalidDevice);
  }
  return ret(r);
}

// "cudaErrorPeerAccessNotEnabled if direct access to memory on peerDevice has
// not yet been enabled from the current device."
cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peerDevice) {
  RT_REQUIRE_CTX();
  if (!valid_device(peerDevice)) return rt::ret(cudaErrorInvalidDevice);
  CUcontext peer = nullptr;
  if (cudaError_t e = primary_of(peerDevice, &peer)) return rt::ret(e);
  CUresult r = drv().cuCtxDisablePeerAccess(peer);
  // The current context itself was never enabled as its own peer.
  if (r == CUDA_ERROR_INVALID_CONTEXT) return rt::ret(cudaErrorPeerAccessNotEnabled);
  return ret(r);
}

// cudaDevP2PAttr* == CU_DEVICE_P2P_ATTRIBUTE_*.
cudaError_t CUDARTAPI cudaDeviceGetP2PAttribute(int* value, enum cudaDeviceP2PAttr attr,
                                                int srcDevice, int dstDevice) {
  if (cudaError_t e = rt::init()) return rt::ret(e);
  return ret(drv().cuDeviceGetP2PAttribute(value, static_cast<CUdevice_P2PAttribute>(attr),
                                           srcDevice, dstDevice));
}

cudaError_t CUDARTAPI cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice,
                                     size_t count) {
  return memcpy_peer(dst, dstDevice, src, srcDevice, count, false, nullptr);
}
cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src,
                                          int srcDevice, size_t count, cudaStream_t stream) {
  return memcpy_peer(dst, dstDevice, src, srcDevice, count, true, stream);
}

// ---- profiler ------------------------------------------------------------------------
cudaError_t CUDARTAPI cudaProfilerStart(void) {
  RT_REQUIRE_CTX();
  return ret(drv().cuProfilerStart());
}
cudaError_t CUDARTAPI cudaProfilerStop(void) {
  RT_REQUIRE_CTX();
  return ret(drv().cuProfilerStop());
}

// ---- managed-memory hints -----------------------------------------------------------------
// cudaMemAdvise* == CU_MEM_ADVISE_*; cudaMemRangeAttribute* == CU_MEM_RANGE_ATTRIBUTE_*.
cudaError_t CUDARTAPI cudaMemAdvise(const void* devPtr, size_t count, enum cudaMemoryAdvise advice,
                                    struct cudaMemLocation location) {
  RT_REQUIRE_CTX();
  return ret(drv().cuMemAdvise_v2(dp(devPtr), count, static_cast<CUmem_advise>(advice),
                                  loc_of(location)));
}

cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void* devPtr, size_t count,
                                           struct cudaMemLocation location, unsigned int flags,
                                           cudaStream_t stream) {
  return prefetch(devPtr, count, location, flags, stream, false);
}
cudaError_t CUDARTAPI cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count,
                                                struct cudaMemLocation location,
                                                unsigned int flags, cudaStream_t stream) {
  return prefetch(devPtr, count, location, flags, stream, true);
}

cudaError_t CUDARTAPI cudaMemRangeGetAttribute(void* data, size_t dataSize,
                                               enum cudaMemRangeAttribute attribute,
                                               const void* devPtr, size_t count) {
  RT_REQUIRE_CTX();
  return ret(drv().cuMemRangeGetAttribute(data, dataSize,
                                          static_cast<CUmem_range_attribute>(attribute),
                                          dp(devPtr), count));
}

static_assert(sizeof(cudaMemRangeAttribute) == sizeof(CUmem_range_attribute), "attribute layout");

cudaError_t CUDARTAPI cudaMemRangeGetAttributes(void** data, size_t* dataSizes,
                                                enum cudaMemRangeAttribute* attributes,
                                                size_t numAttributes, const void* devPtr,
                                                size_t count) {
  RT_REQUIRE_CTX();
  return ret(drv().cuMemRangeGetAttributes(data, dataSizes,
                                           reinterpret_cast<CUmem_range_attribute*>(attributes),
                                           numAttributes, dp(devPtr), count));
}

// ---- 2D copies --------------------------------------------------------------------------
cudaError_t CUDARTAPI cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind) {
  return memcpy2d(dst, dpitch, src, spitch, width, height, kind, false, nullptr, false);
}
cudaError_t CUDARTAPI cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind kind) {
  return memcpy2d(dst, dpitch, src, spitch, width, height, kind, false, nullptr, true);
}
cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind kind,
                                        cudaStream_t stream) {
  return memcpy2d(dst, dpitch, src, spitch, width, height, kind, true, stream, false);
}
cudaError_t CUDARTAPI cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src,
                                             size_t spitch, size_t width, size_t height,
                                             enum cudaMemcpyKind kind, cudaStream_t stream) {
  return memcpy2d(dst, dpitch, src, spitch, width, height, kind, true, stream, true);
}
