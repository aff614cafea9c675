// cuGetProcAddress / cuGetProcAddress_v2 over the (name, version) table.
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
#include "sim_surface.h"

using namespace sim;

namespace {

// The table is generated at build time from the toolkit's libcuda.so and the
// PFN_ typedefs of cudaTypedefs.h (tests/sim/tools/gen_surface.py), so it
// holds every function the sim exports, modelled or not: nothing to add here
// when a function is modelled.
enum class Found { Ok, NotFound, VersionTooLow };

Found lookup(const char* symbol, int version, cuuint64_t flags, void** pfn) {
  const ProcRow* best = nullptr;
  bool known = false;
  for (unsigned i = 0; i < kProcTableSize; ++i) {
    const ProcRow& e = kProcTable[i];
    if (std::strcmp(e.base, symbol) != 0) continue;
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
