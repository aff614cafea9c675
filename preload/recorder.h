// The core of the injected side: turns what the hooks saw into trace events.
// It knows nothing of CUDA's headers; hooks pass plain facts in, and device
// details come from an injected query, so the core is unit-tested without CUDA.
//
// Today every allocation passes straight through to CUDA (the `passthrough`
// pool of DESIGN.md): each alloc/free has its segment twin, so reserved equals
// allocated. The caching pool will sit between on_alloc and the upstream.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "config.h"
#include "cumemtrace/trace_format.h"
#include "live_table.h"
#include "stacks/stack_recorder.h"
#include "trace_writer.h"

namespace cumemtrace::preload {

struct DeviceDescription {
  std::string name;
  std::uint64_t total_bytes = 0;
};

// Asks the driver about device `ordinal`; false if it cannot say.
using DeviceQuery = bool (*)(int ordinal, DeviceDescription& out);

struct AllocationFacts {
  const char* api = "";   // the function the application called (a plain ASCII literal)
  format::MemoryKind kind = format::MemoryKind::device;
  int dev = 0;
  std::uintptr_t ptr = 0;
  std::size_t size = 0;   // what the application asked for
  std::optional<std::uintptr_t> stream;  // for stream-ordered calls
};

class Recorder {
 public:
  static constexpr int kMaxDevices = 64;

  // `stacks`: how call stacks are captured (none by default, as in tests).
  Recorder(const Config& config, DeviceQuery query, const StackPlatform& stacks = {});
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // After the real allocation succeeded.
  void on_alloc(const AllocationFacts& facts);

  // Before the real free runs (so the free's line precedes any later alloc
  // that reuses the address). False if the pointer is not one we recorded.
  bool on_free(const char* api, std::uintptr_t ptr, std::optional<std::uintptr_t> stream);

  // A phase boundary from the marker API or NVTX (`name` is any text).
  void on_mark(format::MarkKind kind, std::string_view name);

  // Normal process exit: writes `end` and closes the trace.
  void on_exit();

  // In a forked child: the parent's buffered lines and file are not ours,
  // and locks held by the parent's other threads will never be released, so
  // from here on this recorder touches no lock and records nothing.
  void on_fork_child();

  const TraceWriter& writer() const { return writer_; }
  std::uint64_t live_count() const { return live_.count(); }
  std::uint64_t live_bytes() const { return live_.bytes(); }

 private:
  bool ensure_trace_open();
  void describe_device_once(int dev);
  void write_header();
  // ,"stack":<id> for an alloc/free/oom/error event: captures the calling
  // thread's stack, writing its `stack` event first if it is new. Called
  // only once the trace is open (the stack event must follow the header).
  void append_stack(LineBuffer& body) { body.field("stack", stacks_.current_stack_id()); }

  const Config& config_;
  const DeviceQuery query_;
  const std::uint64_t start_unix_ns_;
  TraceWriter writer_;
  LiveTable live_;
  StackRecorder stacks_;

  std::atomic<bool> inert_{false};
  std::once_flag open_once_;
  std::atomic<bool> open_failed_{false};
  std::mutex device_mutex_;
  std::atomic<bool> device_described_[kMaxDevices] = {};
};

}  // namespace cumemtrace::preload
