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

#include "config.h"
#include "cumemtrace/trace_format.h"
#include "live_table.h"
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

  Recorder(const Config& config, DeviceQuery query);
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // After the real allocation succeeded.
  void on_alloc(const AllocationFacts& facts);

  // Before the real free runs (so the free's line precedes any later alloc
  // that reuses the address). False if the pointer is not one we recorded.
  bool on_free(const char* api, std::uintptr_t ptr, std::optional<std::uintptr_t> stream);

  // ---- lifecycle -----------------------------------------------------------

  // Process exit: writes `end` (reason exit, or signal when the program exits
  // from its own handler of a terminating signal) and closes the trace.
  void on_exit(format::EndReason reason = format::EndReason::exit);

  // Async-signal-safe. Writes everything recorded so far (before the
  // program's own handler of a terminating signal runs).
  void flush_from_signal() noexcept;
  // Async-signal-safe. The process is about to die of `signo` (default
  // action): writes everything and `end` with reason signal.
  void on_fatal_signal(int signo) noexcept;

  // Async-signal-safe. Before this process execs another program: writes
  // everything and `end` with reason exec. If the exec fails,
  // on_exec_failed() takes `end` back and recording goes on.
  bool on_exec_begin() noexcept;
  void on_exec_failed() noexcept;

  // This recorder is the parent's, seen from a forked child (which gets a
  // recorder of its own): the buffered lines and the file are the parent's,
  // and locks held by the parent's other threads will never be released, so
  // from here on this recorder touches no lock and records nothing.
  void on_fork_child();

  // Records nothing from now on (a forked child with CUMEMTRACE_FORK=off).
  void stop_recording() { inert_.store(true, std::memory_order_relaxed); }

  // Everything recorded so far reaches the kernel (tests).
  void flush() { writer_.flush(); }

  // In a forked child, before anything is recorded: thread ids cached by
  // the forking thread are the parent's.
  static void forget_thread_ids_after_fork();

  const TraceWriter& writer() const { return writer_; }
  std::uint64_t live_count() const { return live_.count(); }
  std::uint64_t live_bytes() const { return live_.bytes(); }

 private:
  bool ensure_trace_open();
  void describe_device_once(int dev);
  void write_header();

  const Config& config_;
  const DeviceQuery query_;
  const std::uint64_t start_unix_ns_;
  TraceWriter writer_;
  LiveTable live_;

  std::atomic<bool> inert_{false};
  std::once_flag open_once_;
  std::atomic<bool> open_failed_{false};
  std::mutex device_mutex_;
  std::atomic<bool> device_described_[kMaxDevices] = {};
};

}  // namespace cumemtrace::preload
