// When the caching pool steps aside: a program whose allocations come from
// a caching allocator of its own (PyTorch's CUDACachingAllocator, CuPy's and
// RMM's pools, XLA's BFC allocator, TensorFlow's) already caches. Serving its
// segments from our pool too would cache twice: torch.cuda.empty_cache()
// hands segments back with cudaFree, the pool keeps them, and a route that
// does not go through the pool (cuMemCreate for NCCL or PyTorch's expandable
// segments, managed memory, another process) then runs out of memory that
// nobody uses (issue 18). Those calls go to the driver and are recorded as
// in passthrough mode; every other caller keeps the pool.
//
// The caller is the return address of the program's call into our hook
// (note_hook_caller, set by every exported hook and wrapper), looked up once
// per call site with dladdr and matched against CUMEMTRACE_POOL_STEP_ASIDE
// (config/step_aside_rule.h); the verdict is cached lock-free per return
// address.
#pragma once

namespace cumemtrace::preload {

// The return address of the latest call into one of our hooks on this
// thread. Only the outermost hook's value is read, before any nested call.
inline thread_local const void* t_hook_caller __attribute__((tls_model("initial-exec"))) = nullptr;

inline void note_hook_caller(const void* return_address) { t_hook_caller = return_address; }

// Whether the pool leaves the calling thread's current request to the
// driver (see above). Cheap after the first call from a call site.
bool pool_steps_aside() noexcept;

}  // namespace cumemtrace::preload
