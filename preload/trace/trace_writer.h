// The trace writer of the injected side: lock-free on the recording threads,
// crash-safe on the way out.
//
// Recording (emit) takes no lock. Each thread appends its lines to its own
// log (flush_log.h); one atomic counter gives every emit() its place `seq`,
// taken after the clock is read, so a `free` recorded before the real free
// always precedes the `alloc` that later reuses the address (TRACE_FORMAT.md,
// Order: the free's counter increment happens-before the alloc's). Whoever
// holds the output lock — a background thread every flush interval or when a
// thread's buffer fills, the exit path, a signal handler — merges the logs in
// `seq` order, formats `t` (kept non-decreasing) and writes whole lines.
//
// Output paths and what they may touch:
//  - the background thread (flush_thread.cpp): everything;
//  - finish() at exit: everything, waiting a bounded time for the lock;
//  - *_from_signal(): async-signal-safe only: a try-lock that gives up, no
//    allocation, no waiting on other threads, write(2);
//  - abandon_after_fork(): touches no lock (a forked child builds a new writer).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pending/compact_event.h"
#include "trace/flush_log.h"
#include "trace/flush_sink.h"
#include "trace/pending_arena.h"
#include "text/line_buffer.h"
#include "trace/tick_clock.h"

namespace cumemtrace::preload {

class TraceWriter {
 public:
  static constexpr std::uint32_t kDefaultFlushIntervalMs = 200;

  // `monotonic_start_ns` is t = 0 of the trace; `buffer_bytes` the size of
  // each thread's buffer chunks (a full chunk wakes the background thread).
  // `memory_cap_bytes`: how much the logs may hold before events are
  // dropped (0: 256 MiB; never under 16 chunks).
  TraceWriter(std::uint64_t monotonic_start_ns, std::size_t buffer_bytes,
              std::uint32_t flush_interval_ms = kDefaultFlushIntervalMs, std::uint64_t memory_cap_bytes = 0);
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  // Stops the background thread and frees the logs; no emit may run. The
  // preload never destroys its writer (hooks may run during exit).
  ~TraceWriter();

  // Takes ownership of `fd`, writes `header` (a complete JSON object without
  // the newline) as the first line and starts the background thread. A path
  // ending in ".zst" is written as a zstd stream. False if that fails (the
  // descriptor is closed and nothing is traced).
  bool attach(int fd, std::string path, const contract::LineBuffer& header);

  // Before attach(): keep the logs in `<trace>.pending`
  // (pending/pending_log.h), so that a trace whose process is killed can be
  // completed afterwards.
  void keep_pending_file(bool keep) { keep_pending_ = keep; }
  // Whether it does (the file could be set up).
  bool has_pending_file() const { return arena_.is_open(); }

  bool is_open() const { return state_.load(std::memory_order_acquire) == State::open; }

  // One event line: {"ev":"<ev>","t":<t><body>} where `body` holds the
  // fields that follow `t`, each starting with a comma.
  struct Line {
    std::string_view ev;
    const contract::LineBuffer& body;
  };

  // Records the lines, in order, with one timestamp: CLOCK_MONOTONIC itself,
  // so what the library times by that clock (the pool's samples, "at most
  // every CUMEMTRACE_POOL_SAMPLE_MS") holds in `t` exactly. `t` never
  // decreases in the file.
  void emit(std::initializer_list<Line> lines);
  void emit(std::string_view ev, const contract::LineBuffer& body) { emit({Line{ev, body}}); }
  // The same for alloc and free lines kept as their facts: the background
  // thread formats them (pending/compact_event.h), not the recording
  // thread, and their `t` is the cheaper TSC read where there is one
  // (tick_clock.h).
  // False when they were dropped (counted in `end`), not recorded.
  bool emit_compact(std::initializer_list<contract::pending::CompactEvent> events);

  // Everything emitted before the call reaches the kernel before it returns.
  void flush();

  // Writes everything, then the `end` line: {"ev":"end","t":…<end_body>,"dropped":N}
  // and closes the file. Later emits are counted as dropped, not written.
  void finish(const contract::LineBuffer& end_body);

  // Async-signal-safe. Writes what the threads have recorded so far; nothing
  // if the output lock cannot be had (held by this thread, or by another for
  // longer than a short wait).
  void flush_from_signal();
  // Async-signal-safe. flush_from_signal, then the `end` line; the trace is
  // finished.
  void finish_from_signal(const contract::LineBuffer& end_body);

  // Before exec: writes everything and the `end` line, and keeps the output
  // lock, so nothing follows `end` if the exec succeeds. If it fails,
  // exec_failed() takes `end` back and tracing goes on. Async-signal-safe
  // (exec may be called from a handler). False: nothing was written.
  bool begin_exec(const contract::LineBuffer& end_body);
  void exec_failed();

  // In a forked child: the buffered lines and the file belong to the parent,
  // and locks may be held by threads that do not exist here. Closes the
  // child's copy of the descriptor and touches nothing else.
  void abandon_after_fork();

  // Lines that could not be written (write errors, events after the end).
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Lines left out on purpose (the free of an allocation whose alloc line
  // was dropped), counted as dropped.
  void leave_out(std::uint64_t lines) { count_dropped(lines); }

  const std::string& path() const { return sink_.path(); }

  // Process-wide hooks of the preload: `on_open` runs when a writer's trace
  // opens (the preload installs its signal handlers then, not before: a
  // process that records nothing is left as it was); `periodic` runs on the
  // background thread after each flush (the preload re-checks its handlers).
  using ProcessHook = void (*)();
  static void set_process_hooks(ProcessHook on_open, ProcessHook periodic);

  // Test-only (tests/unit/preload/trace/flush_gap_test.cpp), null in production:
  // `seq_taken(seq)` runs on a recording thread right after it took its seq
  // and before its record is written, so a test can hold the thread inside
  // the window a drain must wait for; `flusher_waits(timeout_ns)` runs on the
  // background thread before each sleep, with the sleep's timeout. Null, each
  // costs one relaxed load of a global and a branch never taken.
  struct TestHooks {
    void (*seq_taken)(std::uint64_t seq) = nullptr;
    void (*flusher_waits)(std::uint64_t timeout_ns) = nullptr;
    // Runs with the pending file's commit open: the batch's lines are in
    // the file, the marks not yet flipped (the moment a kill makes a
    // recovery cut the file back).
    void (*batch_written)(std::uint64_t batch_lines) = nullptr;
  };
  static void set_test_hooks(const TestHooks& hooks);

  // In a forked child: the thread ids this thread cached are the parent's.
  static void forget_thread_ids_after_fork();

 private:
  // A record being written into the calling thread's log: its lines go at
  // `lines` (nullptr: none, counted as dropped); commit_record() publishes it.
  struct OpenRecord {
    flush::ThreadLog* log = nullptr;
    char* lines = nullptr;
    std::uint32_t size = 0;
  };
  // `entries` line entries of `line_bytes` in all, which make `lines` lines
  // of the trace (a compact event with its segment twin makes two): what is
  // counted as dropped if the record cannot be made. `exact_time`: `t` is
  // read from CLOCK_MONOTONIC itself, not through the TSC (tick_clock.h).
  OpenRecord open_record(std::size_t entries, std::size_t line_bytes, std::size_t lines, bool exact_time);
  void commit_record(const OpenRecord& record);

  enum class State : int { closed_before_open, open, finished };
  // How a drain treats a record that is still being written (a gap in seq).
  enum class Drain { background, final, signal };

  struct HeapEntry {
    std::uint64_t seq;
    flush::ThreadLog* log;
  };

  // Producer side (trace_writer.cpp).
  flush::ThreadLog* thread_log();
  flush::ThreadLog* claim_log();
  char* reserve(flush::ThreadLog& log, std::uint32_t size);
  flush::LogChunk* new_chunk(std::uint32_t size);
  void count_dropped(std::uint64_t lines) {
    if (lines == 0) return;
    dropped_.fetch_add(lines, std::memory_order_relaxed);
    // What a recovery writes in `end`: nothing lost without being counted.
    if (auto* h = dropped_in_pending_.load(std::memory_order_relaxed)) h->dropped.fetch_add(lines, std::memory_order_relaxed);
  }
  flush::LogChunk* allocate_chunk(std::uint32_t capacity);
  void destroy_chunk(flush::LogChunk* chunk);
  static flush::ThreadLog* first_log();

  // Consumer side (flush_merge.cpp); the caller holds the output lock.
  void drain(Drain mode);
  bool drain_round(Drain mode, bool skip_gaps);  // false: stopped at a gap
  bool peek(flush::ThreadLog& log, flush::RecordHeader& out);
  void format_record(flush::ThreadLog& log, const flush::RecordHeader& r, bool may_allocate);
  void append_line(std::string_view ev, std::string_view body, std::string_view t_text, bool may_allocate);
  void write_output();
  // The pending file's commit around each write (pending/pending_log.h).
  void begin_batch();
  void end_batch();
  void publish_clock();
  // After a write: drained chunks go back, and a thread waiting for memory
  // is told.
  void release_written();
  void write_end_line(const contract::LineBuffer& end_body);
  // At the end for good: records whose seq was taken but which never
  // reached the file (a thread stopped in the middle of an emit, or one that
  // commits after the end) are counted as dropped, never lost silently.
  void count_unwritten_records();
  void release_drained(flush::ThreadLog& log);
  void free_chunks(flush::ThreadLog& log);
  void release_all_logs();
  void recycle(flush::ThreadLog& log, flush::LogChunk* chunk);

  // Background thread and output lock (flush_thread.cpp).
  void start_flusher();
  void flusher_main();
  static void* flusher_entry(void* self);
  void wake_flusher();
  bool only_this_thread_left() const;
  bool lock_output(std::uint64_t budget_ns);
  bool try_lock_output_from_signal();
  void unlock_output();
  bool owned_by_this_process() const;
  static bool compression_is_safe_here();
  static void run_open_hook();
  static std::atomic<void (*)(std::uint64_t)> test_seq_taken_;
  static std::atomic<void (*)(std::uint64_t)> test_flusher_waits_;
  static std::atomic<void (*)(std::uint64_t)> test_batch_written_;

  const std::uint64_t id_;  // tells this writer's logs from another's
  bool keep_pending_ = false;
  flush::PendingArena arena_;
  contract::pending::Header* pending_header_ = nullptr;  // arena_'s, once open (the consumer's)
  // The same for count_dropped, which a recording thread may call while
  // attach() sets it.
  std::atomic<contract::pending::Header*> dropped_in_pending_{nullptr};
  // t = 0 of the trace (its start); ticks on the recording threads,
  // nanoseconds when lines are formatted (under the output lock).
  TickClock clock_;
  const std::uint32_t chunk_bytes_;
  const std::uint32_t flush_interval_ms_;
  const std::uint64_t memory_cap_;
  const pid_t owner_pid_;

  // Read at every emit; written only at open and close.
  std::atomic<State> state_{State::closed_before_open};

  // Written by the consumer: kept off the line every emit reads.
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> chunk_bytes_outstanding_{0};
  std::atomic<bool> warned_backlog_{false};
  // A wait for memory ran out: drop without waiting until some is given back.
  std::atomic<bool> backlog_dropping_{false};

  alignas(64) std::atomic<std::uint64_t> next_seq_{0};

  // Wakes the background thread (futex word) and tells waiting producers
  // that memory was given back (futex word).
  alignas(64) std::atomic<std::uint32_t> wake_word_{0};
  std::atomic<std::uint32_t> space_word_{0};
  std::atomic<std::uint32_t> backlog_waiters_{0};
  std::atomic<bool> flusher_started_{false};
  std::atomic<bool> flusher_stop_{false};
  std::atomic<bool> flusher_running_{false};
  std::atomic<pid_t> flusher_tid_{0};

  // Output lock: the thread id of its holder, 0 when free.
  alignas(64) std::atomic<pid_t> output_owner_{0};
  // Consumer state, guarded by the output lock.
  flush::TraceSink sink_;
  std::vector<HeapEntry> heap_;
  std::unique_ptr<char[]> out_;
  std::size_t out_capacity_ = 0;
  std::size_t out_size_ = 0;
  std::uint64_t out_lines_ = 0;
  std::uint64_t next_seq_to_write_ = 0;
  std::uint64_t records_written_ = 0;  // every seq taken is a record: the rest at `end` are counted dropped
  std::uint64_t last_t_written_ = 0;
  std::uint64_t gap_seq_ = 0;         // a gap the background drain is waiting on
  std::uint64_t gap_since_ns_ = 0;
  off_t exec_rollback_ = 0;
};

}  // namespace cumemtrace::preload
