#include "hook_support.h"

#include <pthread.h>

#include <algorithm>

#include "config.h"
#include "diagnostics.h"
#include "real_cuda.h"
#include "stacks/unwinder.h"

namespace cumemtrace::preload {

thread_local int ReentryGuard::depth_ = 0;

Recorder& recorder() {
  // Leaked on purpose: it must outlive every static destructor that might
  // still free device memory.
  static Recorder* const instance = new Recorder(config(), &query_device_from_driver,
                                                     native_stack_platform());
  return *instance;
}

// Every note_* catches everything: out of host memory while recording, the
// application's call still succeeded and its result must be returned; the
// trace loses the event.

void note_allocation(const AllocRequest& request, std::uintptr_t ptr, std::size_t size) noexcept {
  try {
    // Asked after the real call: it made the context current (the runtime's
    // device, or the context the program made current with the driver API).
    // Exact also when a framework switches contexts with cuCtxSetCurrent,
    // which a cache invalidated by cudaSetDevice would miss.
    int dev = request.dev;
    if (dev == kCurrentDevice) dev = current_device();
    if (dev == kDeviceOfPointer) dev = device_of_pointer(ptr);
    recorder().on_alloc({.api = request.api,
                         .kind = request.kind,
                         .dev = dev,
                         .ptr = ptr,
                         .size = size,
                         .stream = request.stream,
                         .context_bound = request.context_bound});
  } catch (...) {
  }
}

FreeOutcome note_free(const FreeFacts& facts) noexcept {
  try {
    return recorder().on_free(facts);
  } catch (...) {
    return FreeOutcome::recorded;
  }
}

void adjust_memory_info(std::size_t& free_bytes, std::size_t& total_bytes) noexcept {
  std::size_t cached = 0;
  try {
    cached = recorder().cached_free_bytes(current_device());
  } catch (...) {
  }
  free_bytes = std::min(total_bytes, free_bytes + std::min(cached, total_bytes));
}

void note_device_reset(const char* api, int dev) noexcept {
  try {
    recorder().on_device_reset(api, dev);
  } catch (...) {
  }
}

void note_vmm_retain(std::uint64_t handle) noexcept {
  try {
    recorder().on_vmm_retain(handle);
  } catch (...) {
  }
}

void note_map(const char* api, std::uintptr_t ptr, std::size_t size, std::uint64_t handle) noexcept {
  try {
    recorder().on_map(api, ptr, size, handle, current_device());
  } catch (...) {
  }
}

void note_unmap(std::uintptr_t ptr, std::size_t size) noexcept {
  try {
    recorder().on_unmap(ptr, size);
  } catch (...) {
  }
}

namespace {

void on_fork_in_child() { recorder().on_fork_child(); }

__attribute__((constructor)) void cumemtrace_load() {
  // Options are read once, here, so a bad value is reported at start-up.
  recorder();
  pthread_atfork(nullptr, nullptr, &on_fork_in_child);
}

// Runs after the program's own static destructors and atexit handlers (the
// preloaded object is finalised after the objects that were loaded after
// it), so frees made during their teardown are in the trace.
__attribute__((destructor)) void cumemtrace_unload() { recorder().on_exit(); }

}  // namespace
}  // namespace cumemtrace::preload
