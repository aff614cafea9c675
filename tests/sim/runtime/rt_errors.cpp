// cudaGetErrorName / cudaGetErrorString. Names come from the toolkit's
// driver_types.h (generated into sim_cuda_errors.inc at configure time).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rt_internal.h"
#include "sim_surface.h"

namespace {

const char* name_of(cudaError_t e) {
  switch (e) {
#define SIM_CUDA_ERROR(NAME) \
  case NAME:                 \
    return #NAME;
#include "sim_cuda_errors.inc"
#undef SIM_CUDA_ERROR
    default:
      return nullptr;
  }
}

// The runtime's descriptions of the codes the sim can return.
const char* text_of(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorDeviceUninitialized: return "invalid device context";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorMapBufferObjectFailed: return "mapping of buffer object failed";
    case cudaErrorTooManyPeers: return "peer mapping resources exhausted";
    case cudaErrorUnknown: return "unknown error";
    default: return nullptr;
  }
}

}  // namespace

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  const char* n = name_of(error);
  return n ? n : "unrecognized error code";
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  if (const char* t = text_of(error)) return t;
  const char* n = name_of(error);
  return n ? n : "unrecognized error code";
}

// Every exported runtime function the sim does not model (the generated
// sim_runtime_surface.cpp) ends here: cudaErrorNotSupported ("This error
// indicates the attempted operation is not supported on the current system or
// device"), recorded as the thread's last error like any other failure.
// SIMCUDA_LOG_UNSUPPORTED=1 names it on stderr, as the driver does (the
// runtime reads the variable itself: it does not parse the driver's options).
int rt::unsupported_call(const char* name) {
  static const bool log = [] {
    const char* v = std::getenv("SIMCUDA_LOG_UNSUPPORTED");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (log) std::fprintf(stderr, "simcuda: %s is not simulated; it answers \"not supported\"\n", name);
  return rt::ret(cudaErrorNotSupported);
}
