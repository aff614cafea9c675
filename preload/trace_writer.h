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
#include <cstring>
#include <memory>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>

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

  // One event line: {"ev":"<ev>","t":<now><body>} where `body` holds the
  // fields that follow `t`, each starting with a comma.
  struct Line {
    std::string_view ev;
    const LineBuffer& body;
  };

  // Appends the lines, in order, with one timestamp under one lock (an alloc
  // and its segment twin cost one lock). Returns the `t` they carry.
  std::uint64_t emit(std::initializer_list<Line> lines);
  std::uint64_t emit(std::string_view ev, const LineBuffer& body) { return emit({Line{ev, body}}); }

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

  // A byte buffer that appends with one memcpy; it grows only for a line
  // longer than the slack it keeps beyond the flush threshold.
  class Chunk {
   public:
    explicit Chunk(std::size_t capacity);
    void append(std::string_view s) {
      if (size_ + s.size() > capacity_) grow(s.size());
      std::memcpy(data_.get() + size_, s.data(), s.size());
      size_ += s.size();
    }
    const char* data() const { return data_.get(); }
    std::size_t size() const { return size_; }
    void clear() { size_ = 0; }

   private:
    void grow(std::size_t more);
    std::unique_ptr<char[]> data_;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
  };

  void write_out(Chunk& chunk);  // caller holds io_mutex_

  const std::uint64_t start_ns_;
  const std::size_t flush_threshold_;
  std::atomic<State> state_{State::closed_before_open};
  std::atomic<std::uint64_t> dropped_{0};

  std::mutex buffer_mutex_;  // guards active_ and the order of lines
  Chunk active_;
  std::uint64_t last_t_ = 0;

  std::mutex io_mutex_;      // guards fd_, spare_ and the order of writes
  Chunk spare_;
  int fd_ = -1;
  std::string path_;
  bool warned_write_error_ = false;
};

}  // namespace cumemtrace::preload
