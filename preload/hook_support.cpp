#include "hook_support.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "config.h"
#include "diagnostics.h"
#include "real_cuda.h"
#include "signal_handlers.h"
#include "stacks/unwinder.h"

namespace cumemtrace::preload {

thread_local int ReentryGuard::depth_ = 0;

namespace {

// Leaked on purpose: it must outlive every static destructor that might
// still free device memory. Replaced (not freed) in a forked child.
std::atomic<Recorder*> g_recorder{nullptr};

// The recorder a process, or a forked child, starts with.
Recorder* make_recorder() {
  return new Recorder(config(), &query_device_from_driver, native_stack_platform());
}

}  // namespace

Recorder& recorder() {
  Recorder* r = g_recorder.load(std::memory_order_acquire);
  if (r != nullptr) [[likely]] return *r;
  // First use: the library constructor, or a hook that ran before it.
  Recorder* fresh = make_recorder();
  if (g_recorder.compare_exchange_strong(r, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *r;
}

Recorder* recorder_if_any() { return g_recorder.load(std::memory_order_acquire); }

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

// A child forked without exec (pthread_atfork runs this in the child, in the
// forking thread, the only one there). The parent's recorder is left alone:
// its lines and file are the parent's, and its locks may be held by threads
// that do not exist here. The child starts from scratch, as a new process
// would: new buffers and locks, an empty live set (CUDA does not let a child
// use the parent's context, so what the parent had live is not the child's),
// no file until the child records its first event (named with its own pid,
// its header's ppid the parent), the writer thread started then.
void on_fork_in_child() {
  Recorder::forget_thread_ids_after_fork();
  signals::forget_lock_after_fork();
  Recorder* parent = g_recorder.load(std::memory_order_relaxed);
  if (parent == nullptr) return;
  parent->on_fork_child();
  Recorder* child = nullptr;
  try {
    child = make_recorder();
  } catch (...) {
    return;  // out of memory in the child: it runs untraced
  }
  if (config().fork == ForkMode::off) child->stop_recording();
  g_recorder.store(child, std::memory_order_release);
}

__attribute__((constructor)) void cumemtrace_load() {
  // Options are read once, here, so a bad value is reported at start-up.
  try {
    recorder();
  } catch (...) {
    warn("out of memory at start-up; this process is not traced");
  }
  resolve_exec_functions();
  TraceWriter::set_process_hooks(&signals::install, &signals::recheck);
  pthread_atfork(nullptr, nullptr, &on_fork_in_child);
}

// Runs after the program's own static destructors and atexit handlers (the
// preloaded object is finalised after the objects that were loaded after
// it), so frees made during their teardown are in the trace. A program that
// exits from its own handler of SIGINT/SIGTERM ends because of the signal.
__attribute__((destructor)) void cumemtrace_unload() {
  if (Recorder* r = recorder_if_any()) {
    r->on_exit(signals::in_program_handler() ? format::EndReason::signal : format::EndReason::exit);
  }
}

}  // namespace
}  // namespace cumemtrace::preload
