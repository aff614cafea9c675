// What every hook needs: the process's recorder, a re-entry guard, and the
// core functions every allocation and free goes through.
//
// The seam for the caching pool (issue 4) is allocate() and release():
// every hook that obtains or gives back memory builds a request (api, kind,
// size, stream) and passes the real CUDA call as `upstream`. Today both are
// passthrough: call upstream (which writes the application's out-parameter
// itself), record what happened. The pool replaces their bodies for the
// requests it serves (cudaMalloc, cudaFree, cudaMallocAsync, cudaFreeAsync,
// cuMemAlloc*, cuMemFree*: device memory; `request.api` and `kind` say
// which), calling `upstream(bytes)` only to grow a segment and release's
// `upstream()` only to return one. Handing a cached block to the program
// needs the out-parameter too: that change passes it from these hooks to
// allocate() alongside `upstream`; nothing else in the hooks moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "recorder.h"

namespace cumemtrace::preload {

// The recorder of this process, created on first use and never destroyed:
// hooks may run during exit, after static destructors. A forked child gets a
// recorder of its own (hook_support.cpp).
Recorder& recorder();

// The recorder if one exists, else nullptr; async-signal-safe (signal
// handlers and exec, which may run in a vfork child, use it).
Recorder* recorder_if_any();

// Resolves the real exec functions (flush_on_exec.cpp); called once at load,
// never later (a vfork child must not call dlsym).
void resolve_exec_functions();

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

// Obtains memory for `request`: `upstream(bytes)` is the real call and
// returns Obtained<Result>. Records the allocation after it succeeded.
template <typename Result, typename Upstream>
Result allocate(const AllocRequest& request, Upstream&& upstream) {
  ReentryGuard guard;
  const Obtained<Result> got = upstream(request.size);
  if (guard.outermost() && got.rc == Result{} && got.ptr != 0) {
    note_allocation(request, got.ptr, got.size != 0 ? got.size : request.size);
  }
  return got.rc;
}

// Gives back the memory at `facts.ptr`: `upstream()` is the real free. The
// free (or an unknown_pointer / double_free error) is recorded before the
// real call, so it precedes any alloc that reuses the address; the real free
// always runs, so CUDA reports the application's misuse as it would without
// us. NULL frees nothing and is only forwarded (cudaFree(NULL) creates the
// context).
template <typename Result, typename Upstream>
Result release(const FreeFacts& facts, Upstream&& upstream) {
  ReentryGuard guard;
  if (!guard.outermost() || facts.ptr == 0) return upstream();
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

// What cudaMemGetInfo / cuMemGetInfo report to the application: the
// driver's figures plus memory our pool caches but the application does not
// hold (Recorder::cached_free_bytes), with free ≤ total always.
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
// the reset runs. `device()` names the device, or returns < 0 if unknown.
void note_device_reset(const char* api, int dev) noexcept;

template <typename Result, typename DeviceOf, typename Upstream>
Result reset_device(const char* api, DeviceOf&& device, Upstream&& upstream) {
  ReentryGuard guard;
  if (guard.outermost()) {
    const int dev = device();
    if (dev >= 0) note_device_reset(api, dev);
  }
  return upstream();
}

// Virtual memory management, recorded around the real call by the outermost
// hook (see recorder.h for what each becomes in the trace).
void note_vmm_retain(std::uint64_t handle) noexcept;
void note_map(const char* api, std::uintptr_t ptr, std::size_t size, std::uint64_t handle) noexcept;
void note_unmap(std::uintptr_t ptr, std::size_t size) noexcept;

}  // namespace cumemtrace::preload
