#include "hook_support.h"

#include <pthread.h>

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

void record_alloc_noexcept(const AllocationFacts& facts) noexcept {
  try {
    recorder().on_alloc(facts);
  } catch (...) {
    // Out of host memory while recording: the application's allocation
    // succeeded and must be returned; the trace loses this event.
  }
}

bool record_free_noexcept(const char* api, std::uintptr_t ptr,
                          std::optional<std::uintptr_t> stream) noexcept {
  try {
    return recorder().on_free(api, ptr, stream);
  } catch (...) {
    return false;
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
