// What every hook needs: the process's recorder, a re-entry guard, and the
// core functions every allocation and free goes through.
//
// The seam for the caching pool (issue 4) is allocate() and release():
// every hook that obtains or gives back memory builds a request (api, kind,
// size, stream) and passes the real CUDA call as `upstream`. With
// CUMEMTRACE_POOL=caching (the default) the requests the pool serves
// (`pooled`: cudaMalloc, cudaMallocAsync, cuMemAlloc_v2, cuMemAllocAsync and
// their _ptsz forms, and every device free) are served from the device's
// pool (pool_glue.h) and the pointer is written to the application's
// out-parameter here; the real call runs only when the pool cannot serve a
// request, so that CUDA itself answers it (see allocate()). Everything else,
// and everything in passthrough mode, calls upstream (which writes the
// out-parameter itself) and records what happened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>

#include <cuda.h>

#include "cumemtrace/pool/pool_stats.h"
#include "hooks/capture.h"
#include "hooks/step_aside.h"
#include "record/recorder.h"

namespace cumemtrace::preload {

// The recorder of this process, created on first use and never destroyed:
// hooks may run during exit, after static destructors. A forked child gets a
// recorder of its own (hook_support.cpp).
Recorder& recorder();

// The recorder if one exists, else nullptr; async-signal-safe (signal
// handlers and exec, which may run in a vfork child, use it).
Recorder* recorder_if_any();

// Resolves the real exec functions (hooks/exec.cpp); called once at load,
// never later (a vfork child must not call dlsym).
void resolve_exec_functions();

// Readies the exports of hooks/exit.cpp (_exit, _Exit, syscall, the
// at_quick_exit handler); called once at load.
void install_exit_hooks();

// Marks that this thread is inside a hook. A hooked function that the real
// CUDA library calls from inside another hook (runtime → driver) is then
// forwarded without being recorded a second time: one allocation is recorded
// once, by the outermost layer that saw it (DESIGN.md).
class ReentryGuard {
 public:
  ReentryGuard() : outermost_(depth_++ == 0) {}
  ~ReentryGuard() { --depth_; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  bool outermost() const { return outermost_; }
  // Whether this thread is inside a hook now: a signal handler that runs
  // here interrupted our code, which may hold our locks (hooks/exit.cpp).
  static bool active() { return depth_ > 0; }

 private:
  static thread_local int depth_ __attribute__((tls_model("initial-exec")));
  const bool outermost_;
};

// The device an allocation is on when the hook cannot name it: the current
// context's, asked of the driver after the real call succeeded.
inline constexpr int kCurrentDevice = -1;
// The device the returned pointer is on, asked of the driver: for memory
// from an explicit pool, which may belong to another device.
inline constexpr int kDeviceOfPointer = -2;

struct AllocRequest {
  const char* api = "";  // the function the application called
  format::MemoryKind kind = format::MemoryKind::device;
  std::size_t size = 0;  // what the application asked for
  std::optional<std::uintptr_t> stream = std::nullopt;
  bool context_bound = true;  // false: stream-ordered (survives a device reset)
  int dev = kCurrentDevice;
  // The caching pool may serve it (plain device memory, current device).
  bool pooled = false;
  // For runtime functions: the real function called, so a thread without a
  // current context can have the runtime set its context up first (its own
  // cudaFree(NULL)), as the real call would have.
  const void* runtime = nullptr;
};

// What a real allocation call produced. Success is 0 for both APIs
// (cudaSuccess, CUDA_SUCCESS).
template <typename Result>
struct Obtained {
  Result rc{};
  std::uintptr_t ptr = 0;  // 0: nothing to record (failure, or a 0-byte cudaMalloc)
  std::size_t size = 0;    // bytes the allocation spans when the request cannot say
                           // (pitched and 3D allocations); 0: request.size
};

// What a real call wrote to the application's out-parameter (a pointer, a
// CUdeviceptr, a 32-bit CUdeviceptr_v1 or a VMM handle), when it succeeded.
template <typename Result, typename Out>
Obtained<Result> obtained(Result rc, const Out* out, std::size_t size = 0) {
  std::uintptr_t value = 0;
  if (rc == Result{} && out) {
    if constexpr (std::is_pointer_v<Out>) {
      value = reinterpret_cast<std::uintptr_t>(*out);
    } else {
      value = static_cast<std::uintptr_t>(*out);
    }
  }
  return {rc, value, size};
}

// The per-thread default stream's handle in both APIs (cudaStreamPerThread,
// CU_STREAM_PER_THREAD).
inline constexpr std::uintptr_t kPerThreadStream = 0x2;

// The stream recorded for a stream-ordered call. In a _ptsz function stream
// 0 is the calling thread's per-thread default stream: recorded as such, so
// one value names one stream in the trace.
inline std::optional<std::uintptr_t> stream_handle(const void* stream, bool per_thread) {
  if (per_thread && stream == nullptr) return kPerThreadStream;
  return reinterpret_cast<std::uintptr_t>(stream);
}

// Internal: record, never throwing into the host program.
void note_allocation(const AllocRequest& request, std::uintptr_t ptr, std::size_t size) noexcept;
FreeOutcome note_free(const FreeFacts& facts) noexcept;
// A stream-ordered request that succeeded while some capture is in
// progress: if its stream captures, it made a memory node of the capture's
// graph, recorded as graph memory (true); else false (hooks/graphs.cpp).
bool note_graph_node(const AllocRequest& request, std::uintptr_t ptr, std::size_t size) noexcept;

// Whether CUMEMTRACE_POOL is `caching`.
bool caching_pool() noexcept;

// A request served by the caching pool: the pointer (recorded already), or
// 0 when the pool could not serve it; then `oom` says whether it ran out of
// memory (the report is for note_pool_oom).
struct PoolAttempt {
  std::uintptr_t ptr = 0;
  bool oom = false;
  pool::OomReport report;
};
PoolAttempt pool_allocate(const AllocRequest& request) noexcept;
void note_pool_oom(const char* api, const pool::OomReport& report) noexcept;

enum class PoolRelease : std::uint8_t {
  freed,         // the pool took the block back; the free is recorded
  invalid,       // inside pool memory but not a live block: recorded as an error
  not_pooled,    // not pool memory: the real free decides
  forward_only,  // recorded, but the pool no longer holds it (a racing reset)
};
PoolRelease pool_release(const FreeFacts& facts) noexcept;
// Whether a device free names memory of a caching pool (frees nothing).
bool pool_owns(const FreeFacts& facts) noexcept;

template <typename Out>
void write_out(Out* out, std::uintptr_t ptr) {
  if constexpr (std::is_pointer_v<Out>) {
    *out = reinterpret_cast<Out>(ptr);
  } else {
    *out = static_cast<Out>(ptr);
  }
}

// Obtains memory for `request`: `upstream(bytes)` is the real call and
// returns Obtained<Result>; `out` is the application's out-parameter.
//
// A pooled request the pool cannot serve goes to the real call with the
// same arguments, and its answer is the application's. After the pool's
// out-of-memory ladder (which ends by releasing every cached segment) the
// driver holds only what the application holds, so the real call fails as
// it would have without us, and the runtime itself sets its last-error
// state (cudaErrorMemoryAllocation, returned once by cudaGetLastError: not
// sticky) — nothing of the runtime's is imitated. If it succeeds instead
// (the pool needed a whole segment where the device had room only for the
// request, or another process freed memory meanwhile) the application gets
// what CUDA would have given it, recorded as a passthrough allocation: the
// pool never turns a request CUDA would meet into a failure. The `oom` event
// is written once both failed, before the error is returned.
template <typename Result, typename Out, typename Upstream>
Result allocate_from_pool(const AllocRequest& request, Out* out, Upstream& upstream) {
  const PoolAttempt attempt = pool_allocate(request);
  if (attempt.ptr != 0) {
    write_out(out, attempt.ptr);
    return Result{};
  }
  const Obtained<Result> got = upstream(request.size);
  if (got.rc == Result{} && got.ptr != 0) {
    note_allocation(request, got.ptr, got.size != 0 ? got.size : request.size);
  } else if (got.rc != Result{} && attempt.oom) {
    note_pool_oom(request.api, attempt.report);
  }
  return got.rc;
}

// Device memory the pool caches but nobody uses goes back to the driver:
// for a request on a route the pool does not serve that ran out of memory.
// True when something was given back (the request is then worth retrying).
bool release_pool_caches() noexcept;
// The `oom` event of such a request that failed after the retry.
void note_outside_oom(const AllocRequest& request) noexcept;

// A route the pool does not serve (cuMemCreate, which NCCL and PyTorch's
// expandable segments use; managed, pitched, explicit-pool memory; a caller
// the pool steps aside for) ran out of memory while the pool caches free
// memory: without us the driver would have had it (issue 18: 45 x 20 MiB
// cudaMalloc'd and freed, then cuMemCreate of 800 MiB on a 1 GiB device).
// The cache goes back and the call is tried once more. Only at the driver
// layer: a runtime call that reaches the driver through us is retried there,
// so the runtime never sees the first failure and its last-error state stays
// the program's (DESIGN.md: no stale last error).
template <typename Result>
bool retry_outside_pool(const AllocRequest& request, Result rc) {
  if constexpr (std::is_same_v<Result, CUresult>) {
    return rc == CUDA_ERROR_OUT_OF_MEMORY && request.kind != format::MemoryKind::host_pinned && caching_pool() &&
           release_pool_caches();
  } else {
    return false;
  }
}

template <typename Result, typename Out, typename Upstream>
Result allocate(const AllocRequest& request, Out* out, Upstream&& upstream) {
  ReentryGuard guard;
  const bool record = guard.outermost();
  // A NULL out-parameter or 0 bytes: the real call answers (an error, or a
  // NULL pointer without any memory). The pool's path is a function of its
  // own: the passthrough path never builds its out-of-memory report.
  // A capture in progress may divert it to the real call (hooks/capture.h).
  if (record && request.pooled && out && request.size != 0 && caching_pool() && !pool_steps_aside() &&
      !capture_diverts(request.stream)) {
    return allocate_from_pool<Result>(request, out, upstream);
  }
  Obtained<Result> got = upstream(request.size);
  if (got.rc != Result{} && retry_outside_pool(request, got.rc)) got = upstream(request.size);
  if (record && got.rc == Result{} && got.ptr != 0) {
    const std::size_t size = got.size != 0 ? got.size : request.size;
    // One relaxed load while nothing captures (hooks/capture.h).
    if (g_active_captures.load(std::memory_order_relaxed) == 0 || !request.stream ||
        !note_graph_node(request, got.ptr, size)) {
      note_allocation(request, got.ptr, size);
    }
  } else if (record && got.rc != Result{} && request.kind != format::MemoryKind::host_pinned && caching_pool() &&
             static_cast<int>(got.rc) == 2) {
    // cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY are both 2.
    note_outside_oom(request);
  }
  return got.rc;
}

// A request the pool never serves (no out-parameter to hand it).
template <typename Result, typename Upstream>
Result allocate(const AllocRequest& request, Upstream&& upstream) {
  return allocate<Result>(request, static_cast<void**>(nullptr), upstream);
}

// Gives back the memory at `facts.ptr`: `upstream()` is the real free. The
// free (or an unknown_pointer / double_free error) is recorded before the
// real call, so it precedes any alloc that reuses the address; the real free
// always runs, so CUDA reports the application's misuse as it would without
// us. NULL frees nothing and is only forwarded (cudaFree(NULL) creates the
// context).
template <typename Result, typename Upstream>
Result release_recorded(bool record, const FreeFacts& facts, Upstream&& upstream) {
  if (!record || facts.ptr == 0) return upstream();
  // A free captured into a graph frees nothing now, and CUDA refuses one of
  // memory the graph did not allocate (cuMemFreeAsync: during capture it
  // "must ... be passed the address of a graph allocation"), which leaves
  // that memory the program's: recorded only once CUDA accepted it.
  if (facts.stream && capture_diverts(facts.stream)) {
    const Result rc = upstream();
    if (rc == Result{}) note_free(facts);
    return rc;
  }
  const FreeOutcome outcome = note_free(facts);
  const Result rc = upstream();
  if (outcome == FreeOutcome::other_kind && rc == Result{}) {
    // The real library freed memory of a kind this function is not meant
    // for (it said so by succeeding): account for it now.
    FreeFacts any = facts;
    any.releases = Releases::any_kind;
    note_free(any);
  }
  return rc;
}

template <typename Result, typename Upstream>
Result release(const FreeFacts& facts, Upstream&& upstream) {
  ReentryGuard guard;
  return release_recorded<Result>(guard.outermost(), facts, upstream);
}

// A device free (cudaFree, cudaFreeAsync, cuMemFree*, cuMemFreeAsync*):
// pool memory goes back to its pool, never to the real free (which would
// release a whole segment under the pool). A pointer inside pool memory that
// is not a live block (a double free, an interior pointer) is refused with
// `reject()`, which makes the real library report its invalid-value error as
// it would for such a pointer (and set the runtime's last error). Anything
// else is the real free's business.
template <typename Result, typename Upstream, typename Reject>
Result release(const FreeFacts& facts, Upstream&& upstream, Reject&& reject) {
  ReentryGuard guard;
  if (guard.outermost() && facts.ptr != 0 && caching_pool()) {
    // In a capture, cudaFreeAsync "must ... be passed the address of a graph
    // allocation" (cuMemFreeAsync); a pool block never is one, so CUDA's
    // refusal (which also invalidates the capture) answers, and the block
    // stays the program's, as it would without us.
    if (facts.stream && capture_diverts(facts.stream) && pool_owns(facts)) return reject();
    switch (pool_release(facts)) {
      case PoolRelease::freed: return Result{};
      case PoolRelease::invalid: return reject();
      case PoolRelease::forward_only: return upstream();
      case PoolRelease::not_pooled: break;
    }
  }
  return release_recorded<Result>(guard.outermost(), facts, upstream);
}

// A host address no CUDA allocation can have, for reject(): the real free
// refuses it with its invalid-value error.
void* not_a_device_pointer() noexcept;

// What cudaMemGetInfo / cuMemGetInfo report to the application: the
// driver's figures plus memory our pool caches but the application does not
// hold (DevicePool::application_memory_info), with free ≤ total always.
void adjust_memory_info(std::size_t& free_bytes, std::size_t& total_bytes) noexcept;

template <typename Result, typename Size, typename Upstream>
Result memory_info(Size* free_bytes, Size* total_bytes, Upstream&& upstream) {
  ReentryGuard guard;
  const Result rc = upstream();
  if (guard.outermost() && rc == Result{} && free_bytes && total_bytes) {
    std::size_t f = *free_bytes, t = *total_bytes;
    adjust_memory_info(f, t);
    *free_bytes = static_cast<Size>(f);  // the 32-bit ABI: f ≤ t ≤ what it held
    *total_bytes = static_cast<Size>(t);
  }
  return rc;
}

// cudaDeviceReset / cuDevicePrimaryCtxReset: what the reset frees is
// recorded as freed (api = the reset function) before the real reset, then
// the reset runs; once it succeeded, the device's pool forgets its segments
// (the reset freed them) and each gets its segment_free. `device()` names
// the device, or returns < 0 if unknown.
void note_device_reset(const char* api, int dev) noexcept;
void note_device_reset_done(int dev) noexcept;

template <typename Result, typename DeviceOf, typename Upstream>
Result reset_device(const char* api, DeviceOf&& device, Upstream&& upstream) {
  ReentryGuard guard;
  int dev = -1;
  if (guard.outermost()) {
    dev = device();
    if (dev >= 0) note_device_reset(api, dev);
  }
  const Result rc = upstream();
  if (dev >= 0 && rc == Result{}) note_device_reset_done(dev);
  return rc;
}

// cudaStreamDestroy / cuStreamDestroy: before the real call, the pools stop
// reusing blocks in that stream's order (a new stream may get the handle
// while the old one's work still runs: cuStreamDestroy returns at once).
void note_stream_destroyed(std::uintptr_t stream) noexcept;

template <typename Result, typename Upstream>
Result destroy_stream(std::uintptr_t stream, Upstream&& upstream) {
  ReentryGuard guard;
  if (guard.outermost() && stream != 0) note_stream_destroyed(stream);
  return upstream();
}

// cudaDeviceSynchronize / cuCtxSynchronize of a context we pool in: blocks
// freed before it began are safe to reuse afterwards, without the pool
// synchronising again. `ctx`: the synchronised context, null for current.
// A ticket of 0 means "no pool to tell".
std::uint64_t sync_ticket_for(void* ctx) noexcept;
void note_synchronized(void* ctx, std::uint64_t ticket) noexcept;

template <typename Result, typename Upstream>
Result synchronize(void* ctx, Upstream&& upstream) {
  ReentryGuard guard;
  const std::uint64_t ticket = guard.outermost() ? sync_ticket_for(ctx) : 0;
  const Result rc = upstream();
  if (ticket != 0 && rc == Result{}) note_synchronized(ctx, ticket);
  return rc;
}

// Virtual memory management, recorded around the real call by the outermost
// hook (see recorder.h for what each becomes in the trace).
void note_vmm_retain(std::uint64_t handle) noexcept;
void note_map(const char* api, std::uintptr_t ptr, std::size_t size, std::uint64_t handle) noexcept;
void note_unmap(std::uintptr_t ptr, std::size_t size) noexcept;

}  // namespace cumemtrace::preload
