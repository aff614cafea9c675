// Call stacks for alloc/free/oom/error events: capture the calling thread's
// stack, intern it, and write its `stack` event the first time it is seen.
// How a stack is captured is injected (the preload uses libunwind; tests use
// fakes), so this part is unit-tested without unwinding anything.
#pragma once

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

// What the recorder's process provides for stacks; all null: no stacks.
struct StackPlatform {
  CaptureStack capture = nullptr;
  SymbolTableLookup symbol_table = nullptr;
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

  // The id of the calling thread's current stack; when the stack is new, its
  // `stack` event is written before this returns. 0 when capture is off,
  // nothing was captured, or the table is full.
  std::uint32_t current_stack_id();

 private:
  void write_stack_event(std::uint32_t id, std::span<const std::uintptr_t> ips);

  const std::size_t depth_;
  const CaptureStack capture_;
  TraceWriter& writer_;
  const bool enabled_;
  FrameNamer namer_;
  // Made on the first capture: a process that never allocates device memory
  // (a shell the program starts) reserves nothing.
  std::once_flag table_once_;
  std::unique_ptr<StackTable> table_;
  std::atomic<bool> warned_full_{false};
};

}  // namespace cumemtrace::preload
