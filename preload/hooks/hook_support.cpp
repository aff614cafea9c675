#include "hooks/hook_support.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "options/config.h"
#include "text/diagnostics.h"
#include "pool/glue/pool_glue.h"
#include "pool/glue/device_order.h"
#include "pool/glue/driver_upstream.h"
#include "pool/glue/mempool_view.h"
#include "hooks/real_cuda.h"
#include "signals/handlers.h"
#include "stacks/unwinder.h"

namespace cumemtrace::preload {

thread_local int ReentryGuard::depth_ = 0;

namespace {

// Leaked on purpose: it must outlive every static destructor that might
// still free device memory. Replaced (not freed) in a forked child.
std::atomic<Recorder*> g_recorder{nullptr};

// The recorder a process, or a forked child, starts with.
Recorder* make_recorder() {
  return new Recorder(contract::config(), &query_device_from_driver,
                      native_stack_platform(contract::config().unwinder, contract::config().python));
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
  if (!caching_pool()) return;
  int dev = 0;
  // Only a pool made already: asking for memory information makes none.
  pool::DevicePool* pool = current_context_device(&dev) ? pool_of_device(dev) : nullptr;
  if (!pool) return;
  const pool::MemoryInfo info = pool->application_memory_info(free_bytes, total_bytes);
  free_bytes = info.free;
  total_bytes = info.total;
}

bool caching_pool() noexcept { return contract::config().pool == contract::Config::PoolMode::caching; }

namespace {

// The runtime's own context set-up on a thread with no current context: what
// its cudaMalloc would have done before allocating (cudaFree(NULL) is the
// documented idiom). Rare: once per thread that allocates first.
void let_runtime_make_context(const void* runtime_function) {
  using Free = int (*)(void*);
  if (auto free_fn = reinterpret_cast<Free>(sibling_symbol(runtime_function, "cudaFree"))) free_fn(nullptr);
}

}  // namespace

PoolAttempt pool_allocate(const AllocRequest& request) noexcept {
  PoolAttempt attempt;
  try {
    int dev = 0;
    pool::DevicePool* pool = current_device_pool(&dev);
    if (!pool && request.runtime && !current_context()) {
      let_runtime_make_context(request.runtime);
      pool = current_device_pool(&dev);
    }
    if (!pool) return attempt;
    const pool::Allocation a = request.stream ? pool->allocate_async(request.size, pool_stream(*request.stream))
                                              : pool->allocate(request.size);
    if (!a.ok()) {
      attempt.oom = a.result.status == pool::UpstreamStatus::out_of_memory;
      if (attempt.oom && a.oom) attempt.report = *a.oom;
      return attempt;
    }
    // Pool memory is the pool's segments: a reset of the device frees the
    // block exactly when it frees its segment (stream-ordered memory survives,
    // DevicePool::device_reset).
    recorder().on_alloc({.api = request.api,
                         .kind = request.kind,
                         .dev = dev,
                         .ptr = a.ptr,
                         .size = request.size,
                         .stream = request.stream,
                         .context_bound = !a.survives_reset,
                         .block = a.block});
    if (request.stream) note_pooled_stream_alloc(dev, request.size);
    sample_pool_if_due(dev);
    attempt.ptr = a.ptr;
  } catch (...) {
    // Out of host memory while recording: the block is the application's.
    // (Only the recorder can throw, after the pool succeeded.)
  }
  return attempt;
}

void note_pool_oom(const char* api, const pool::OomReport& report) noexcept {
  try {
    recorder().on_oom(api, report);
  } catch (...) {
  }
}

bool pool_owns(const FreeFacts& facts) noexcept {
  try {
    int dev = 0;
    return facts.releases == Releases::device && pool_owning(facts.ptr, &dev) != nullptr;
  } catch (...) {
    return false;
  }
}

PoolRelease pool_release(const FreeFacts& facts) noexcept {
  try {
    if (facts.releases != Releases::device) return PoolRelease::not_pooled;
    int dev = 0;
    pool::DevicePool* pool = pool_owning(facts.ptr, &dev);
    if (!pool) return PoolRelease::not_pooled;
    // Recorded first: once the pool has the block back, another thread may
    // be handed it and write its alloc.
    note_free(facts);
    const pool::FreeResult r = facts.stream ? pool->free_async(facts.ptr, pool_stream(*facts.stream))
                                            : pool->free(facts.ptr);
    switch (r.status) {
      case pool::FreeStatus::ok:
        if (r.stream_ordered) note_pooled_stream_free(dev, r.size);
        sample_pool_if_due(dev);
        return PoolRelease::freed;
      case pool::FreeStatus::invalid_pointer: return PoolRelease::invalid;
      case pool::FreeStatus::not_owned: break;
    }
    return PoolRelease::forward_only;
  } catch (...) {
    return PoolRelease::not_pooled;
  }
}

bool release_pool_caches() noexcept {
  try {
    struct Released {
      bool any = false;
    } released;
    for_each_pool(
        [](pool::DevicePool& pool, void* arg) {
          if (pool.stats().cached_free == 0) return;
          pool.release_cached();
          static_cast<Released*>(arg)->any = true;
        },
        &released);
    return released.any;
  } catch (...) {
    return false;
  }
}

void note_outside_oom(const AllocRequest& request) noexcept {
  try {
    int dev = request.dev >= 0 ? request.dev : current_device();
    pool::OomReport r;
    r.device = dev;
    r.size = request.size;
    r.block = request.size;
    if (const pool::DevicePool* pool = pool_of_device(dev)) {
      const pool::PoolStats s = pool->stats();
      r.allocated = s.allocated;
      r.reserved = s.reserved;
      r.cached_free = s.cached_free;
      r.largest_free = s.largest_free;
    }
    pool_driver_memory_info(dev, &r.device_free, &r.device_total);
    r.cause = r.cached_free + r.device_free >= r.block ? pool::OomCause::fragmentation : pool::OomCause::capacity;
    if (request.stream) {
      r.stream_ordered = true;
      r.stream = *request.stream;
    }
    recorder().on_oom(request.api, r);
  } catch (...) {
  }
}

void* not_a_device_pointer() noexcept {
  static char host_byte;
  return &host_byte;
}

void note_device_reset(const char* api, int dev) noexcept {
  try {
    recorder().on_device_reset(api, dev);
  } catch (...) {
  }
}

void note_device_reset_done(int dev) noexcept {
  try {
    pool_device_reset(dev);
  } catch (...) {
  }
}

void note_stream_destroyed(std::uintptr_t stream) noexcept {
  if (!caching_pool()) return;
  note_stream_destroyed(reinterpret_cast<void*>(stream));  // device_order.h: orderings stop waiting for it
  for_each_pool([](pool::DevicePool& pool, void* s) { pool.stream_destroyed(*static_cast<std::uintptr_t*>(s)); },
                &stream);
}

std::uint64_t sync_ticket_for(void* ctx) noexcept {
  if (!caching_pool()) return 0;
  pool::DevicePool* pool = pool_of_context(ctx);
  return pool ? pool->sync_ticket() : 0;
}

void note_synchronized(void* ctx, std::uint64_t ticket) noexcept {
  if (pool::DevicePool* pool = pool_of_context(ctx)) pool->device_synchronized(ticket);
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
  if (contract::config().fork == contract::ForkMode::off) child->stop_recording();
  g_recorder.store(child, std::memory_order_release);
}

__attribute__((constructor)) void cumemtrace_load() {
  // Options are read once, here, so a bad value is reported at start-up.
  try {
    recorder();
  } catch (...) {
    contract::warn("out of memory at start-up; this process is not traced");
  }
  resolve_exec_functions();
  install_exit_hooks();
  TraceWriter::set_process_hooks(&signals::install, &signals::recheck);
  pthread_atfork(nullptr, nullptr, &on_fork_in_child);
}

// Runs after the program's own static destructors and atexit handlers (the
// preloaded object is finalised after the objects that were loaded after
// it), so frees made during their teardown are in the trace. A program that
// exits from its own handler of SIGINT/SIGTERM ends because of the signal.
__attribute__((destructor)) void cumemtrace_unload() {
  if (Recorder* r = recorder_if_any()) {
    const int signo = signals::program_handler_signal();
    r->on_exit(signo != 0 ? format::EndReason::signal : format::EndReason::exit, signo);
  }
}

}  // namespace
}  // namespace cumemtrace::preload
