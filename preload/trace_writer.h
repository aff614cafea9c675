// Buffered JSON Lines writer for the injected side.
//
// Every event line is committed under one short lock that also takes its
// timestamp, so lines appear in non-decreasing `t` and a `free` committed
// before the real free always precedes the `alloc` that later reuses the
// address (TRACE_FORMAT.md, Order). Building the line happens before the lock;
// the lock covers a clock read and a memcpy. Full buffers are written by the
// thread that filled them, after it has released the buffer lock, so other
// threads keep appending to the spare buffer meanwhile.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "line_buffer.h"

namespace cumemtrace::preload {

class TraceWriter {
 public:
  // `monotonic_start_ns` is t = 0 of the trace.
  TraceWriter(std::uint64_t monotonic_start_ns, std::size_t buffer_bytes);
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  ~TraceWriter();

  // Takes ownership of `fd` and writes `header` (a complete JSON object,
  // without the newline) as the first line.
  void attach(int fd, std::string path, const LineBuffer& header);

  bool is_open() const { return state_.load(std::memory_order_acquire) == State::open; }

  // Appends {"ev":"<ev>","t":<now><body>}\n where `body` holds the fields
  // that follow `t`, each starting with a comma. Returns the `t` it used.
  std::uint64_t emit(std::string_view ev, const LineBuffer& body);

  // Emits the `end` line, writes everything buffered and closes the file.
  // Later emits are dropped.
  void finish(const LineBuffer& end_body);

  // Forgets the file without writing: for a forked child, whose copy of the
  // buffer belongs to the parent's trace.
  void abandon_after_fork();

  // Lines that could not be written (write errors, events after `finish`).
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  static std::uint64_t monotonic_now_ns();

 private:
  enum class State : int { closed_before_open, open, finished };

  void write_out(std::vector<char>& chunk);  // caller holds io_mutex_

  const std::uint64_t start_ns_;
  const std::size_t flush_threshold_;
  std::atomic<State> state_{State::closed_before_open};
  std::atomic<std::uint64_t> dropped_{0};

  std::mutex buffer_mutex_;  // guards active_ and the order of lines
  std::vector<char> active_;
  std::uint64_t last_t_ = 0;

  std::mutex io_mutex_;      // guards fd_, spare_ and the order of writes
  std::vector<char> spare_;
  int fd_ = -1;
  std::string path_;
  bool warned_write_error_ = false;
};

}  // namespace cumemtrace::preload
