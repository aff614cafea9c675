// Call stacks for alloc/free/oom/error events: capture the calling thread's
// stack, intern it, and write its `stack` event the first time it is seen.
// How a stack is captured is injected (the preload uses libunwind; tests use
// fakes), so this part is unit-tested without unwinding anything.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "stacks/frame_namer.h"
#include "stacks/stack_table.h"
#include "trace_writer.h"

namespace cumemtrace::preload {

// Writes up to `max` return addresses of the calling thread, innermost
// first, with cumemtrace's own frames already left out; returns the count.
using CaptureStack = std::size_t (*)(std::uintptr_t* out, std::size_t max);

// Writes up to `max` return addresses of the calling thread, innermost
// first, own frames included (the signature of libunwind's unw_backtrace);
// returns the count.
using RawBacktrace = int (*)(void** out, int max);

// A raw backtrace and the code whose frames it leaves out: return addresses
// in [own_begin, own_end) (cumemtrace's own code).
struct RawBacktraceRoute {
  RawBacktrace backtrace = nullptr;
  std::uintptr_t own_begin = 0;
  std::uintptr_t own_end = 0;
};

// What the recorder's process provides for stacks; all null: no stacks.
struct StackPlatform {
  CaptureStack capture = nullptr;
  SymbolTableLookup symbol_table = nullptr;
  // When set, used instead of `capture`, resolved at the first capture (the
  // preload loads libunwind then, not in every process it is injected
  // into). The backtrace is called straight from the recording function's
  // frame (current_stack_id is inlined there), so the unwinder walks no
  // frame of a capture function: every frame costs it about the same.
  RawBacktraceRoute (*raw_backtrace)() = nullptr;
};

class StackRecorder {
 public:
  // Room for this many distinct stacks, and return addresses in all; the
  // memory is reserved, not touched, until stacks are stored.
  static constexpr std::size_t kSlots = std::size_t{1} << 17;
  static constexpr std::size_t kFrames = std::size_t{1} << 22;

  // `depth` 0 (CUMEMTRACE_STACKS=0) or no capture function: every id is 0.
  StackRecorder(unsigned depth, const StackPlatform& platform, TraceWriter& writer,
                std::string perf_map_path = {});

  bool enabled() const { return enabled_; }

  // Frames of ours above the application's that a raw backtrace may hold
  // (the hook, its helpers, the recorder), with room to spare.
  static constexpr std::size_t kOwnFramesAllowance = 16;

  // The id of the calling thread's current stack; when the stack is new, its
  // `stack` event is written before this returns. 0 when capture is off,
  // nothing was captured, or the table is full. Always inlined: the
  // unwinder then starts in the caller's frame, not in one of ours.
  [[gnu::always_inline]] std::uint32_t current_stack_id() {
    if (!enabled_) return 0;
    if (!prepared_.load(std::memory_order_acquire)) [[unlikely]] prepare();
    std::uintptr_t ips[StackTable::kMaxDepth];
    std::size_t n = 0;
    if (backtrace_ != nullptr) {
      void* raw[StackTable::kMaxDepth + kOwnFramesAllowance];
      const int got = backtrace_(raw, static_cast<int>(depth_ + kOwnFramesAllowance));
      for (int i = 0; i < got && n < depth_; ++i) {
        const auto ip = reinterpret_cast<std::uintptr_t>(raw[i]);
        if (ip - own_begin_ >= own_size_) ips[n++] = ip;  // outside our code
      }
    } else if (capture_ != nullptr) {
      n = std::min(capture_(ips, depth_), depth_);
    }
    return intern(std::span<const std::uintptr_t>(ips, n));
  }

 private:
  // Made on the first capture: the table, and the raw backtrace.
  void prepare();
  std::uint32_t intern(std::span<const std::uintptr_t> ips);
  void write_stack_event(std::uint32_t id, std::span<const std::uintptr_t> ips);

  const std::size_t depth_;
  const CaptureStack capture_;
  RawBacktraceRoute (*const resolve_backtrace_)();
  // Set by prepare(), before prepared_.
  RawBacktrace backtrace_ = nullptr;
  std::uintptr_t own_begin_ = 0;
  std::uintptr_t own_size_ = 0;  // own_end - own_begin: one unsigned compare per frame
  std::atomic<bool> prepared_{false};
  TraceWriter& writer_;
  const bool enabled_;
  FrameNamer namer_;
  // Made on the first capture: a process that never allocates device memory
  // (a shell the program starts) reserves nothing.
  std::once_flag prepare_once_;
  std::unique_ptr<StackTable> table_;
  std::atomic<bool> warned_full_{false};
};

}  // namespace cumemtrace::preload
