// TraceWriter: the recording side (emit, per-thread logs) and the lifecycle
// (attach, finish, signal and exec paths, fork). Merging and formatting are
// in flush_merge.cpp, the background thread and the output lock in
// flush_thread.cpp.
#include "trace/trace_writer.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <type_traits>

#include "text/diagnostics.h"
#include "trace/flush_futex.h"

namespace cumemtrace::preload {

using contract::LineBuffer;
using contract::warn;
using contract::pending::CompactEvent;
using flush::LogChunk;
using flush::LogState;
using flush::ThreadLog;

namespace {

std::atomic<std::uint64_t> g_next_writer_id{1};

// Every ThreadLog ever made, newest first; only ever pushed to (lock-free, so
// a fork can never leave it locked).
std::atomic<ThreadLog*> g_all_logs{nullptr};

// The calling thread's log. Initial-exec TLS with a constant initialiser: no
// __tls_get_addr call and no guard on each event.
struct ThreadSlot {
  std::uint64_t writer_id;
  ThreadLog* log;
  std::uint64_t generation;
};
thread_local ThreadSlot t_slot __attribute__((tls_model("initial-exec"))) = {0, nullptr, 0};

pthread_key_t g_exit_key;
pthread_once_t g_exit_key_once = PTHREAD_ONCE_INIT;

// Runs when a thread that recorded events exits: its log is handed to the
// consumer, which frees it once everything in it is written.
void retire_thread_log(void* value) {
  auto* log = static_cast<ThreadLog*>(value);
  if (log == nullptr || log != t_slot.log) return;
  auto expected = flush::ownership(t_slot.generation, LogState::owned);
  log->ownership.compare_exchange_strong(expected, flush::ownership(t_slot.generation, LogState::retired),
                                         std::memory_order_acq_rel);
  t_slot = {0, nullptr, 0};
}

}  // namespace

ThreadLog* TraceWriter::first_log() { return g_all_logs.load(std::memory_order_acquire); }

namespace {

void create_exit_key() { pthread_key_create(&g_exit_key, &retire_thread_log); }

constexpr std::uint32_t round_up(std::size_t n) {
  return static_cast<std::uint32_t>((n + flush::kRecordAlign - 1) & ~(flush::kRecordAlign - 1));
}

constexpr std::uint64_t kMiB = 1024 * 1024;
// How long a recording thread waits for the writer to catch up before an
// event is dropped rather than the program stalled.
constexpr std::uint64_t kBacklogWaitNs = 100'000'000;

}  // namespace

TraceWriter::TraceWriter(std::uint64_t monotonic_start_ns, std::size_t buffer_bytes,
                         std::uint32_t flush_interval_ms, std::uint64_t memory_cap_bytes)
    : id_(g_next_writer_id.fetch_add(1, std::memory_order_relaxed)),
      clock_(monotonic_start_ns, TickClock::tsc_is_the_system_clock()),
      chunk_bytes_(round_up(std::clamp<std::size_t>(buffer_bytes, 4096, 64 * kMiB))),
      flush_interval_ms_(std::max<std::uint32_t>(flush_interval_ms, 1)),
      // Enough for bursts; beyond it a thread waits for the disk, then drops.
      memory_cap_(std::max<std::uint64_t>(memory_cap_bytes != 0 ? memory_cap_bytes : 256 * kMiB,
                                          16ull * chunk_bytes_)),
      owner_pid_(::getpid()) {}

TraceWriter::~TraceWriter() {
  flusher_stop_.store(true, std::memory_order_release);
  wake_flusher();
  while (flusher_running_.load(std::memory_order_acquire)) {
    timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  release_all_logs();
}

bool TraceWriter::attach(int fd, std::string path, const LineBuffer& header) {
  const bool compress = path.ends_with(".zst");
  if (!lock_output(~0ull)) return false;
  out_capacity_ = std::max<std::size_t>(chunk_bytes_, 64 * 1024);
  out_.reset(new (std::nothrow) char[out_capacity_]);
  heap_.reserve(256);
  bool ok = out_ != nullptr && sink_.open(fd, std::move(path), compress);
  if (ok) {
    std::string first(header.view());
    first.push_back('\n');
    count_dropped(sink_.write_lines(first.data(), first.size(), 1));
    count_dropped(sink_.flush());
    // Before any thread can record: every chunk of a log comes from the
    // file once it is there.
    if (keep_pending_ && arena_.open(sink_.path(), chunk_bytes_, memory_cap_ / chunk_bytes_ + 1, clock_.start_ns(),
                                     clock_.counts_tsc())) {
      pending_header_ = &arena_.header();
      pending_header_->dropped.store(dropped(), std::memory_order_relaxed);
      dropped_in_pending_.store(pending_header_, std::memory_order_relaxed);
      pending_header_->durable.store(static_cast<std::uint64_t>(sink_.durable_offset()), std::memory_order_relaxed);
      pending_header_->frame_open.store(sink_.frame_open() ? 1 : 0, std::memory_order_relaxed);
      publish_clock();
    }
    state_.store(State::open, std::memory_order_release);
  } else if (out_ == nullptr) {
    ::close(fd);
  }
  unlock_output();
  if (ok) {
    start_flusher();
    run_open_hook();
  }
  return ok;
}

// ---- recording -------------------------------------------------------------

ThreadLog* TraceWriter::thread_log() {
  if (t_slot.writer_id == id_) [[likely]] return t_slot.log;
  return claim_log();
}

ThreadLog* TraceWriter::claim_log() {
  pthread_once(&g_exit_key_once, &create_exit_key);
  ThreadLog* log = nullptr;
  std::uint64_t generation = 0;
  for (ThreadLog* l = g_all_logs.load(std::memory_order_acquire); l != nullptr; l = l->next_log) {
    std::uint64_t o = l->ownership.load(std::memory_order_relaxed);
    if (flush::state_of(o) != LogState::free) continue;
    generation = flush::generation_of(o) + 1;
    if (l->ownership.compare_exchange_strong(o, flush::ownership(generation, LogState::owned),
                                             std::memory_order_acquire)) {
      log = l;
      break;
    }
  }
  if (log == nullptr) {
    log = new (std::nothrow) ThreadLog;
    if (log == nullptr) return nullptr;
    generation = 1;
    log->ownership.store(flush::ownership(generation, LogState::owned), std::memory_order_relaxed);
    ThreadLog* head = g_all_logs.load(std::memory_order_relaxed);
    do {
      log->next_log = head;
    } while (!g_all_logs.compare_exchange_weak(head, log, std::memory_order_release,
                                               std::memory_order_relaxed));
  }
  LogChunk* first = new_chunk(chunk_bytes_);
  if (first == nullptr) {
    log->ownership.store(flush::ownership(generation, LogState::free), std::memory_order_release);
    return nullptr;
  }
  log->tail = log->head = log->read_chunk = first;
  log->tail_used = 0;
  log->own_spares = nullptr;
  log->read_offset = 0;
  log->read_limit = 0;
  log->writer_id.store(id_, std::memory_order_release);
  t_slot = {id_, log, generation};
  pthread_setspecific(g_exit_key, log);
  return log;
}

LogChunk* TraceWriter::new_chunk(std::uint32_t size) {
  const std::uint32_t capacity = std::max(size, chunk_bytes_);
  const std::uint64_t start = TickClock::monotonic_ns();
  // Back-pressure: the background thread is behind (a slow or stuck disk).
  // Wait a little for it, then drop the event rather than stall the program.
  // Once a wait has run out, later events are dropped at once until memory
  // is given back: a stuck disk would otherwise cost every event the whole
  // wait (100 ms an allocation).
  auto over_cap = [&] {
    return chunk_bytes_outstanding_.load(std::memory_order_relaxed) + capacity > memory_cap_;
  };
  while (over_cap()) {
    if (backlog_dropping_.load(std::memory_order_relaxed)) return nullptr;
    const std::uint32_t seen = space_word_.load(std::memory_order_acquire);
    wake_flusher();
    if (!over_cap()) break;
    if (TickClock::monotonic_ns() - start > kBacklogWaitNs || !flusher_running_.load(std::memory_order_relaxed)) {
      backlog_dropping_.store(true, std::memory_order_relaxed);
      if (!warned_backlog_.exchange(true, std::memory_order_relaxed)) {
        warn("events arrive faster than the trace %s can be written; dropping events",
             path().c_str());
      }
      return nullptr;
    }
    const timespec step{0, 10'000'000};
    backlog_waiters_.fetch_add(1, std::memory_order_acq_rel);
    futex_wait(space_word_, seen, step);
    backlog_waiters_.fetch_sub(1, std::memory_order_acq_rel);
  }
  if (backlog_dropping_.load(std::memory_order_relaxed)) backlog_dropping_.store(false, std::memory_order_relaxed);
  LogChunk* chunk = allocate_chunk(capacity);
  if (chunk != nullptr) chunk_bytes_outstanding_.fetch_add(capacity, std::memory_order_relaxed);
  return chunk;
}

LogChunk* TraceWriter::allocate_chunk(std::uint32_t capacity) {
  // A record longer than a chunk (rare: a stack line of thousands of frames)
  // gets a chunk of its own from the heap.
  if (capacity == chunk_bytes_ && arena_.is_open()) {
    if (LogChunk* chunk = arena_.allocate()) return chunk;
  }
  return LogChunk::create(capacity);
}

void TraceWriter::destroy_chunk(LogChunk* chunk) {
  if (chunk == nullptr) return;
  if (chunk->slot != LogChunk::kHeapChunk) {
    arena_.release(chunk);
  } else {
    LogChunk::destroy(chunk);
  }
}

char* TraceWriter::reserve(ThreadLog& log, std::uint32_t size) {
  LogChunk* tail = log.tail;
  if (log.tail_used + size <= tail->capacity) [[likely]] return tail->bytes() + log.tail_used;
  if (log.own_spares == nullptr && log.spare_count.load(std::memory_order_relaxed) != 0) {
    log.own_spares = log.spares.exchange(nullptr, std::memory_order_acquire);
    log.spare_count.store(0, std::memory_order_relaxed);
  }
  LogChunk* fresh = log.own_spares;
  if (fresh != nullptr) {
    log.own_spares = fresh->next.load(std::memory_order_relaxed);
    if (fresh->capacity < size) {  // an unusually long record
      chunk_bytes_outstanding_.fetch_sub(fresh->capacity, std::memory_order_relaxed);
      destroy_chunk(fresh);
      fresh = nullptr;
    }
  }
  if (fresh == nullptr) fresh = new_chunk(size);
  if (fresh == nullptr) return nullptr;
  fresh->reset();
  // Everything in `tail` was committed before this store: a consumer that
  // sees `next` and re-reads `committed` has the chunk's final size.
  tail->next.store(fresh, std::memory_order_release);
  log.tail = fresh;
  log.tail_used = 0;
  wake_flusher();  // a full chunk is waiting
  return fresh->bytes();
}

TraceWriter::OpenRecord TraceWriter::open_record(std::size_t entries, std::size_t line_bytes, std::size_t lines,
                                                 bool exact_time) {
  if (state_.load(std::memory_order_acquire) != State::open) [[unlikely]] {
    count_dropped(lines);
    return {};
  }
  const std::uint32_t size = round_up(sizeof(flush::RecordHeader) + line_bytes);
  ThreadLog* log = thread_log();
  char* out = log != nullptr ? reserve(*log, size) : nullptr;
  if (out == nullptr) [[unlikely]] {
    count_dropped(lines);
    return {};
  }
  const bool ticks = !exact_time && clock_.counts_tsc();
  const std::uint64_t t = ticks ? clock_.ticks() : TickClock::monotonic_ns();  // made ns since the start by format_record
  // Taken after the clock and, for a free, before the real free runs: the
  // alloc that reuses the address takes a later seq (one modification order
  // on one atomic, consistent with happens-before). Relaxed is enough.
  const std::uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  if (auto hook = test_seq_taken_.load(std::memory_order_relaxed)) [[unlikely]] hook(seq);
  const flush::RecordHeader header{seq, t, size, static_cast<std::uint16_t>(entries), ticks};
  std::memcpy(out, &header, sizeof header);
  return {log, out + sizeof header, size};
}

void TraceWriter::commit_record(const OpenRecord& record) {
  ThreadLog* log = record.log;
  log->tail_used += record.size;
  log->tail->committed.store(log->tail_used, std::memory_order_release);
}

void TraceWriter::emit(std::initializer_list<Line> lines) {
  std::size_t bytes = 0;
  for (const Line& line : lines) bytes += sizeof(flush::LineHeader) + line.ev.size() + line.body.view().size();
  const OpenRecord record = open_record(lines.size(), bytes, lines.size(), /*exact_time=*/true);
  if (record.lines == nullptr) return;
  char* p = record.lines;
  for (const Line& line : lines) {
    const std::string_view body = line.body.view();
    const flush::LineHeader lh{static_cast<std::uint32_t>(line.ev.size()),
                               static_cast<std::uint32_t>(body.size())};
    std::memcpy(p, &lh, sizeof lh);
    p += sizeof lh;
    std::memcpy(p, line.ev.data(), line.ev.size());
    p += line.ev.size();
    std::memcpy(p, body.data(), body.size());
    p += body.size();
  }
  commit_record(record);
}

bool TraceWriter::emit_compact(std::initializer_list<CompactEvent> events) {
  static_assert(std::is_trivially_copyable_v<CompactEvent>);
  constexpr flush::LineHeader kHeader{flush::kCompactLine, sizeof(CompactEvent)};
  std::size_t output_lines = 0;
  for (const CompactEvent& event : events) {
    output_lines += (event.optional & CompactEvent::kWithSegmentTwin) != 0 ? 2 : 1;
  }
  const OpenRecord record =
      open_record(events.size(), events.size() * (sizeof kHeader + sizeof(CompactEvent)), output_lines,
                  /*exact_time=*/false);
  if (record.lines == nullptr) return false;
  char* p = record.lines;
  for (const CompactEvent& event : events) {
    arena_.note_api(event.api);
    std::memcpy(p, &kHeader, sizeof kHeader);
    std::memcpy(p + sizeof kHeader, &event, sizeof event);
    p += sizeof kHeader + sizeof event;
  }
  commit_record(record);
  return true;
}

// ---- lifecycle -------------------------------------------------------------

void TraceWriter::flush() {
  if (!is_open() || !owned_by_this_process() || !lock_output(10'000'000'000ull)) return;
  drain(Drain::final);
  write_output();
  count_dropped(sink_.flush());
  release_written();
  unlock_output();
}

void TraceWriter::finish(const LineBuffer& end_body) {
  if (!is_open() || !owned_by_this_process()) return;
  // Bounded: a background write stuck on a dead file system must not hang
  // the program's exit.
  const bool locked = lock_output(5'000'000'000ull);
  // From here new events are counted as dropped; those already being
  // recorded are still drained below.
  state_.store(State::finished, std::memory_order_release);
  flusher_stop_.store(true, std::memory_order_release);
  if (locked) {
    drain(Drain::final);
    count_unwritten_records();
    write_end_line(end_body);
    sink_.close();
    arena_.mark_ended();
    unlock_output();
  }
  wake_flusher();
}

void TraceWriter::flush_from_signal() {
  if (!is_open() || !owned_by_this_process() || !try_lock_output_from_signal()) return;
  drain(Drain::signal);
  write_output();
  if (compression_is_safe_here()) count_dropped(sink_.flush());
  unlock_output();
}

void TraceWriter::finish_from_signal(const LineBuffer& end_body) {
  if (!is_open() || !owned_by_this_process() || !try_lock_output_from_signal()) return;
  state_.store(State::finished, std::memory_order_release);
  flusher_stop_.store(true, std::memory_order_release);
  drain(Drain::signal);
  if (!sink_.compressed() || compression_is_safe_here()) {
    count_unwritten_records();
    write_end_line(end_body);
    arena_.mark_ended();
  }
  sink_.close();
  unlock_output();
}

bool TraceWriter::begin_exec(const LineBuffer& end_body) {
  if (!is_open() || !owned_by_this_process() || !try_lock_output_from_signal()) return false;
  drain(Drain::signal);
  write_output();
  if (sink_.compressed()) {
    if (!compression_is_safe_here()) {
      unlock_output();
      return false;
    }
    // The end line goes into a frame of its own, so that taking it back
    // leaves a whole stream.
    count_dropped(sink_.end_frame());
  }
  exec_rollback_ = sink_.durable_offset();
  write_end_line(end_body);
  // Removed, as at exit: after a successful exec nothing is left behind
  // (a failed one goes on without it, pending_arena.h).
  arena_.mark_ended();
  return true;  // the output lock stays held: nothing may follow `end`
}

void TraceWriter::exec_failed() {
  sink_.roll_back_to(exec_rollback_);
  arena_.exec_failed();
  if (pending_header_ != nullptr) {
    pending_header_->durable.store(static_cast<std::uint64_t>(sink_.durable_offset()), std::memory_order_release);
  }
  unlock_output();
}

void TraceWriter::abandon_after_fork() {
  // Only the forking thread exists here. The parent's background thread does
  // not; its lock and the logs may be in any state: none is touched.
  state_.store(State::finished, std::memory_order_relaxed);
  sink_.close();
  pending_header_ = nullptr;
  dropped_in_pending_.store(nullptr, std::memory_order_relaxed);
  arena_.close_after_fork();
  t_slot = {0, nullptr, 0};
  forget_thread_ids_after_fork();
}

}  // namespace cumemtrace::preload
