// Which libraries the caching pool steps aside for
// (preload/hooks/step_aside.h says why): CUMEMTRACE_POOL_STEP_ASIDE is `auto`
// (the caching allocators below), `off` (the pool serves every caller), or a
// comma-separated list of fnmatch(3) patterns matched against the calling
// library's path as the loader names it (dladdr's dli_fname), e.g.
// "*/libmyalloc.so*".
#pragma once

#include <string_view>

namespace cumemtrace::contract {

// `auto` is the list of include/cumemtrace/caching_allocators.h, where
// each framework's library is named; PyTorch's not when
// PYTORCH_NO_CUDA_MEMORY_CACHING is set (PyTorch then allocates per tensor,
// "forceUncachedAllocator": any value), so that `cumemtrace run
// --torch-tensors` still makes our pool the cache.

// Whether a request from `library_path` is left to the driver under
// `setting` (auto, off, or patterns). `torch_uncached`: whether
// PYTORCH_NO_CUDA_MEMORY_CACHING is set in the process (read by the caller
// when it decides, since Python scripts often set it in os.environ after
// we loaded).
bool steps_aside_for(std::string_view setting, const char* library_path, bool torch_uncached);

// What is wrong with a setting, or empty: for the option's warning.
std::string_view step_aside_setting_problem(std::string_view setting);

}  // namespace cumemtrace::contract
