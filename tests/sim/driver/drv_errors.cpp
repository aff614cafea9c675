// cuGetErrorName / cuGetErrorString. The names come from the toolkit's
// cuda.h (generated into sim_cu_errors.inc at configure time), so every
// CUresult the header defines has its name.
#include "drv_internal.h"
#include "sim_surface.h"

namespace {

const char* error_name(CUresult e) {
  switch (e) {
#define SIM_CU_ERROR(NAME) \
  case NAME:               \
    return #NAME;
#include "sim_cu_errors.inc"
#undef SIM_CU_ERROR
    default:
      return nullptr;
  }
}

// The driver's descriptions of the codes the sim can return.
const char* error_string(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT: return "context already current";
    case CUDA_ERROR_ALREADY_MAPPED: return "resource already mapped";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_NOT_PERMITTED: return "operation not permitted";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
    case CUDA_ERROR_UNKNOWN: return "unknown error";
    default: return nullptr;
  }
}

}  // namespace

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const char* n = error_name(error);
  *pStr = n;  // NULL for an unknown code, as documented
  return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const char* n = error_name(error);
  if (!n) {
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  const char* s = error_string(error);
  *pStr = s ? s : n;  // codes the sim never returns: their name
  return CUDA_SUCCESS;
}

// Every exported driver function the sim does not model (the generated
// sim_driver_surface.cpp) ends here. The driver API documents
// CUDA_ERROR_NOT_SUPPORTED for "the attempted operation is not supported on
// the current system or device"; before cuInit every entry point answers
// CUDA_ERROR_NOT_INITIALIZED first, as the real driver's do.
int sim::unsupported_call(const char* name) {
  simcfg::note_unsupported(name);
  if (CUresult r = check_init(); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_NOT_SUPPORTED;
}
