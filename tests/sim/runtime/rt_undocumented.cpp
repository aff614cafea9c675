// Runtime exports whose shape a generated stub cannot take
// (tests/sim/tools/gen_surface.py refuses them): one returns a struct by
// value, and three are undocumented internals that no toolkit header
// declares, only nvcc-generated code or NVIDIA's own libraries call, and
// whose signatures we therefore do not know.
#include <cstdio>

#include "rt_internal.h"
#include "sim_surface.h"

// "Returns a channel descriptor with format f and number of bits of each
// component x, y, z, and w" (CUDA Runtime API, cudaCreateChannelDesc). Pure:
// no device, no error state.
cudaChannelFormatDesc CUDARTAPI cudaCreateChannelDesc(int x, int y, int z, int w,
                                                      cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}

// Undeclared anywhere in the toolkit (only CUPTI's callback ids name them,
// as __cudaRegisterHostVar_v13000 etc.). Registration hooks of nvcc's host
// code return nothing, like __cudaRegisterVar; registering nothing is the
// harmless answer. __cudaGetProcAddress's result type is unknown: it answers
// cudaErrorNotSupported like the other unmodelled functions (a caller that
// expected a pointer gets a non-null garbage value only if it ignores the
// runtime's error convention, which no documented caller can use).
#pragma GCC visibility push(default)
extern "C" {
void __cudaRegisterHostVar() { rt::unsupported_call("__cudaRegisterHostVar"); }
void __cudaRegisterUnifiedTable() { rt::unsupported_call("__cudaRegisterUnifiedTable"); }
int __cudaGetProcAddress() { return rt::unsupported_call("__cudaGetProcAddress"); }
}
#pragma GCC visibility pop
