// The caching allocators of the frameworks people profile, by the libraries
// that call cudaMalloc / cuMemAlloc for them. The preload leaves their
// requests to the driver (contract/options/step_aside_rule.h, option
// CUMEMTRACE_POOL_STEP_ASIDE=auto); the analyzer's advice recognises their
// segments in a trace, which cannot be replayed tensor by tensor
// (analyzer/commands/advise.h).
//  - PyTorch: c10/cuda/CUDACachingAllocator.cpp, in libc10_cuda.so.
//  - CuPy's MemoryPool: its extension modules under cupy/ and cupy_backends/
//    (CuPy >= 13 links the runtime statically into cupy_backends).
//  - RMM's pool resources: librmm.so and the rmm/ Python package.
//  - XLA's BFC allocator (JAX): xla_extension.so, jaxlib/.
//  - TensorFlow's BFC allocator: libtensorflow_framework.so,
//    _pywrap_tensorflow_internal.so.
#pragma once

#include <string_view>

namespace cumemtrace {

struct CachingAllocatorLibrary {
  std::string_view framework;  // as a user knows it: "PyTorch"
  std::string_view pattern;    // fnmatch(3), flags 0, on the library's path as the loader names it
};

inline constexpr CachingAllocatorLibrary kCachingAllocatorLibraries[] = {
    {"PyTorch", "*/libc10_cuda.so*"},
    {"CuPy", "*/cupy/*"},
    {"CuPy", "*/cupy_backends/*"},
    {"RMM", "*/librmm.so*"},
    {"RMM", "*/rmm/*"},
    {"JAX", "*/xla_extension.so*"},
    {"JAX", "*/jaxlib/*"},
    {"TensorFlow", "*/libtensorflow_framework.so*"},
    {"TensorFlow", "*/_pywrap_tensorflow_internal.so*"},
};

}  // namespace cumemtrace
