// What the generated surface files (tests/sim/tools/gen_surface.py) and the
// hand-written sources share. Deliberately free of the CUDA headers: the
// generated file declares every exported function as `void f()` only to take
// its address, which would clash with cuda.h's prototypes.
#pragma once

namespace sim {

// One ABI of a driver function, for cuGetProcAddress (drv_entry.cpp): the
// base name a caller asks for, the CUDA version that introduced this ABI (the
// _vNNNN of its PFN_ typedef in cudaTypedefs.h), the function, and its
// per-thread-default-stream twin (_ptsz/_ptds) with that twin's version.
struct ProcRow {
  const char* base;
  int version;
  void* fn;
  void* pt_fn;
  int pt_version;
};
extern const ProcRow kProcTable[];
extern const unsigned kProcTableSize;

// A driver function the sim does not model: CUDA_ERROR_NOT_INITIALIZED
// before cuInit, else CUDA_ERROR_NOT_SUPPORTED (drv_errors.cpp).
int unsupported_call(const char* name);

}  // namespace sim

namespace rt {

// A runtime function the sim does not model: cudaErrorNotSupported, which
// becomes the calling thread's last error like any failure (rt_errors.cpp).
int unsupported_call(const char* name);

}  // namespace rt
