// What every hook needs: the process's recorder, a re-entry guard, and
// calls into the recorder that can never throw into the host program.
#pragma once

#include <cstdint>
#include <optional>

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

void record_alloc_noexcept(const AllocationFacts& facts) noexcept;
// False if the pointer was not one we recorded.
bool record_free_noexcept(const char* api, std::uintptr_t ptr,
                          std::optional<std::uintptr_t> stream) noexcept;

}  // namespace cumemtrace::preload
