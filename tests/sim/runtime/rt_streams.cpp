// Runtime streams, events and host callbacks. cudaStream_t and cudaEvent_t
// are the driver's CUstream and CUevent, as in the real runtime, so the
// special handles (0, cudaStreamLegacy, cudaStreamPerThread) pass through.
#include "rt_internal.h"

using rt::drv;

namespace {

CUstream cs(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
CUevent ce(cudaEvent_t e) { return reinterpret_cast<CUevent>(e); }

template <typename F>
cudaError_t call(F f) {
  RT_REQUIRE_CTX();
  return rt::ret(f());
}

}  // namespace

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* pStream) {
  if (!pStream) return rt::ret(cudaErrorInvalidValue);
  return call([&] { return drv().cuStreamCreate(reinterpret_cast<CUstream*>(pStream), 0); });
}
cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  if (!pStream) return rt::ret(cudaErrorInvalidValue);
  // cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING.
  return call([&] { return drv().cuStreamCreate(reinterpret_cast<CUstream*>(pStream), flags); });
}
cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags,
                                                   int priority) {
  if (!pStream) return rt::ret(cudaErrorInvalidValue);
  return call([&] {
    return drv().cuStreamCreateWithPriority(reinterpret_cast<CUstream*>(pStream), flags, priority);
  });
}
cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  RT_REQUIRE_CTX();
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s) {
  return call([&] { return drv().cuStreamDestroy_v2(cs(s)); });
}

#define SIM_RT_STREAM_PAIR(NAME, DRV, ...)                                           \
  cudaError_t CUDARTAPI NAME(cudaStream_t s) {                                      \
    return call([&] { return drv().DRV(cs(s)); });                                  \
  }                                                                                 \
  cudaError_t CUDARTAPI NAME##_ptsz(cudaStream_t s) {                               \
    return call([&] { return drv().DRV##_ptsz(cs(s)); });                           \
  }
SIM_RT_STREAM_PAIR(cudaStreamSynchronize, cuStreamSynchronize)
SIM_RT_STREAM_PAIR(cudaStreamQuery, cuStreamQuery)
#undef SIM_RT_STREAM_PAIR

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return call([&] { return drv().cuStreamWaitEvent(cs(s), ce(e), flags); });
}
cudaError_t CUDARTAPI cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return call([&] { return drv().cuStreamWaitEvent_ptsz(cs(s), ce(e), flags); });
}

#define SIM_RT_STREAM_GETTER(NAME, DRV, T, DT)                                       \
  cudaError_t CUDARTAPI NAME(cudaStream_t s, T* out) {                              \
    return call([&] { return drv().DRV(cs(s), reinterpret_cast<DT*>(out)); });      \
  }                                                                                 \
  cudaError_t CUDARTAPI NAME##_ptsz(cudaStream_t s, T* out) {                       \
    return call([&] { return drv().DRV##_ptsz(cs(s), reinterpret_cast<DT*>(out)); }); \
  }
SIM_RT_STREAM_GETTER(cudaStreamGetFlags, cuStreamGetFlags, unsigned int, unsigned int)
SIM_RT_STREAM_GETTER(cudaStreamGetPriority, cuStreamGetPriority, int, int)
SIM_RT_STREAM_GETTER(cudaStreamGetId, cuStreamGetId, unsigned long long, unsigned long long)
SIM_RT_STREAM_GETTER(cudaStreamGetDevice, cuStreamGetDevice, int, CUdevice)
#undef SIM_RT_STREAM_GETTER

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* userData) {
  return call([&] { return drv().cuLaunchHostFunc(cs(s), fn, userData); });
}
cudaError_t CUDARTAPI cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* userData) {
  return call([&] { return drv().cuLaunchHostFunc_ptsz(cs(s), fn, userData); });
}
// cudaStreamCallback_t and CUstreamCallback have the same ABI (handle,
// status enum, user pointer); the status is always success in the sim.
cudaError_t CUDARTAPI cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void* data,
                                            unsigned int flags) {
  return call([&] {
    return drv().cuStreamAddCallback(cs(s), reinterpret_cast<CUstreamCallback>(cb), data, flags);
  });
}
cudaError_t CUDARTAPI cudaStreamAddCallback_ptsz(cudaStream_t s, cudaStreamCallback_t cb,
                                                 void* data, unsigned int flags) {
  return call([&] {
    return drv().cuStreamAddCallback_ptsz(cs(s), reinterpret_cast<CUstreamCallback>(cb), data,
                                          flags);
  });
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) {
  if (!event) return rt::ret(cudaErrorInvalidValue);
  return call([&] { return drv().cuEventCreate(reinterpret_cast<CUevent*>(event), 0); });
}
cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return rt::ret(cudaErrorInvalidValue);
  // cudaEvent{BlockingSync,DisableTiming,Interprocess} == CU_EVENT_*.
  return call([&] { return drv().cuEventCreate(reinterpret_cast<CUevent*>(event), flags); });
}
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  return call([&] { return drv().cuEventRecord(ce(e), cs(s)); });
}
cudaError_t CUDARTAPI cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  return call([&] { return drv().cuEventRecord_ptsz(ce(e), cs(s)); });
}
cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int f) {
  return call([&] { return drv().cuEventRecordWithFlags(ce(e), cs(s), f); });
}
cudaError_t CUDARTAPI cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s,
                                                    unsigned int f) {
  return call([&] { return drv().cuEventRecordWithFlags_ptsz(ce(e), cs(s), f); });
}
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t e) {
  return call([&] { return drv().cuEventQuery(ce(e)); });
}
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t e) {
  return call([&] { return drv().cuEventSynchronize(ce(e)); });
}
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t e) {
  return call([&] { return drv().cuEventDestroy_v2(ce(e)); });
}
cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return call([&] { return drv().cuEventElapsedTime_v2(ms, ce(start), ce(end)); });
}
