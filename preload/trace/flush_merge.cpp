// TraceWriter, consumer side: merges the per-thread logs in `seq` order,
// formats each line with its `t` (never decreasing) and hands whole lines to
// the sink. The caller holds the output lock. In Drain::signal nothing is
// allocated or freed and nobody is waited for.
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>

#include "pending/compact_event.h"
#include "trace/flush_futex.h"
#include "pending/record_lines.h"
#include "trace/trace_writer.h"

namespace cumemtrace::preload {

using contract::LineBuffer;
using contract::pending::CompactEvent;
using flush::LogChunk;
using flush::LogState;
using flush::ThreadLog;
namespace pending = contract::pending;

namespace {

// A record being written when the drain looked (its thread took its seq but
// has not committed it) is waited for this long, then left for the next
// drain; at exit it is waited for a little longer, then skipped (written
// late if it ever arrives).
constexpr std::uint64_t kBackgroundGapWaitNs = 2'000'000;
constexpr std::uint64_t kFinalGapWaitNs = 100'000'000;
// A gap that outlives this (a thread stopped in the middle of an emit) no
// longer holds back the lines after it.
constexpr std::uint64_t kGapGiveUpNs = 1'000'000'000;

// The heap is ordered so that the smallest seq is at the front.
constexpr auto later = [](const auto& a, const auto& b) { return a.seq > b.seq; };

}  // namespace

bool TraceWriter::peek(ThreadLog& log, flush::RecordHeader& out) {
  LogChunk* chunk = log.read_chunk;
  if (chunk == nullptr) return false;
  for (;;) {
    if (log.read_offset < log.read_limit) {
      std::memcpy(&out, chunk->bytes() + log.read_offset, sizeof out);
      return true;
    }
    log.read_limit = chunk->committed.load(std::memory_order_acquire);
    if (log.read_offset < log.read_limit) continue;
    LogChunk* next = chunk->next.load(std::memory_order_acquire);
    if (next == nullptr) return false;
    // `next` is stored after the chunk's last commit: re-read it.
    log.read_limit = chunk->committed.load(std::memory_order_acquire);
    if (log.read_offset < log.read_limit) continue;
    log.read_chunk = next;
    log.read_offset = 0;
    log.read_limit = 0;
    chunk = next;
  }
}

void TraceWriter::write_output() {
  if (out_size_ == 0) return;
  if (pending_header_ != nullptr) begin_batch();
  count_dropped(sink_.write_lines(out_.get(), out_size_, out_lines_));
  const std::uint64_t lines = out_lines_;
  out_size_ = 0;
  out_lines_ = 0;
  if (pending_header_ == nullptr) return;
  if (auto hook = test_batch_written_.load(std::memory_order_relaxed)) [[unlikely]] hook(lines);
  // zstd keeps what it was given until a flush: only flushed lines are
  // durable (where zstd may not run, the batch stays open until a later one).
  if (sink_.compressed() && compression_is_safe_here()) count_dropped(sink_.flush());
  end_batch();
}

// Sets the marks that are not current to how far each chunk's records are
// in the lines about to be written, and says a write is in progress. The
// lines of a batch are whole records (format_record makes room first).
void TraceWriter::begin_batch() {
  pending::Header& h = *pending_header_;
  const std::uint32_t commit = h.commit.load(std::memory_order_relaxed);
  const int next = (commit & pending::kSecondMarkIsCurrent) != 0 ? 0 : 1;
  for (ThreadLog* l = first_log(); l != nullptr; l = l->next_log) {
    if (l->writer_id.load(std::memory_order_acquire) != id_) continue;
    for (LogChunk* c = l->head; c != nullptr; c = c->next.load(std::memory_order_acquire)) {
      // A chunk before read_chunk has been read to its end, and its
      // `committed` no longer moves (its `next` is set).
      const std::uint32_t at = c == l->read_chunk ? l->read_offset : c->committed.load(std::memory_order_acquire);
      c->marks[next].store(at, std::memory_order_release);
      if (c == l->read_chunk) break;
    }
  }
  if ((commit & pending::kWriteInProgress) == 0) {
    h.batch_start.store(static_cast<std::uint64_t>(sink_.durable_offset()), std::memory_order_relaxed);
    h.commit.store(commit | pending::kWriteInProgress, std::memory_order_seq_cst);
  }
}

// Once the batch's lines are durable: one store makes the new marks current
// and ends the write. A failed write ends it too: its lines are counted as
// dropped and the file is back at its durable size.
void TraceWriter::end_batch() {
  if (!sink_.all_durable()) return;
  pending::Header& h = *pending_header_;
  h.durable.store(static_cast<std::uint64_t>(sink_.durable_offset()), std::memory_order_relaxed);
  h.last_t.store(last_t_written_, std::memory_order_relaxed);
  h.frame_open.store(sink_.frame_open() ? 1 : 0, std::memory_order_relaxed);
  const std::uint32_t commit = h.commit.load(std::memory_order_relaxed);
  if ((commit & pending::kWriteInProgress) == 0) return;
  h.commit.store((commit ^ pending::kSecondMarkIsCurrent) & ~pending::kWriteInProgress, std::memory_order_seq_cst);
}

void TraceWriter::publish_clock() {
  if (pending_header_ == nullptr || !clock_.counts_tsc()) return;
  pending::Header& h = *pending_header_;
  const std::uint32_t next = h.clock_index.load(std::memory_order_relaxed) + 1;
  h.clocks[next & 1] = clock_.reference();
  h.clock_index.store(next, std::memory_order_release);
}

void TraceWriter::format_record(ThreadLog& log, const flush::RecordHeader& r, bool may_allocate) {
  // A record's lines go out in one write (a pending file's marks count
  // whole records): room for the longest it can make. A compact line is a
  // few hundred bytes, with its twin two lines.
  const std::size_t bound = r.size + std::size_t{r.lines} * 1024;
  if (out_size_ + bound > out_capacity_) {
    write_output();
    if (bound > out_capacity_ && may_allocate) {
      if (auto bigger = std::unique_ptr<char[]>(new (std::nothrow) char[bound])) {
        out_ = std::move(bigger);
        out_capacity_ = bound;
      }
    }
  }
  const std::uint64_t t =
      std::max(r.ticks != 0 ? clock_.ticks_since_start_ns(r.t) : clock_.monotonic_since_start_ns(r.t), last_t_written_);
  last_t_written_ = t;
  char digits[24];
  const auto t_end = std::to_chars(digits, digits + sizeof digits, t).ptr;
  const std::string_view t_text(digits, static_cast<std::size_t>(t_end - digits));

  pending::for_each_record_line(
      log.read_chunk->bytes() + log.read_offset + sizeof r, r.lines, [](const char* api) { return api; },
      [&](std::string_view ev, std::string_view body) { append_line(ev, body, t_text, may_allocate); });
  log.read_offset += r.size;
}

void TraceWriter::append_line(std::string_view ev, std::string_view body, std::string_view t_text,
                              bool may_allocate) {
  static constexpr std::string_view kOpen = "{\"ev\":\"", kT = "\",\"t\":", kClose = "}\n";
  const std::size_t size = kOpen.size() + ev.size() + kT.size() + t_text.size() + body.size() + kClose.size();
  if (size > out_capacity_) {
    // Longer than the whole output buffer (a very deep stack of long
    // names): written on its own, or, where nothing may be allocated,
    // counted as lost.
    if (!may_allocate) {
      count_dropped(1);
      return;
    }
    write_output();
    std::string line;
    line.reserve(size);
    line.append(kOpen).append(ev).append(kT).append(t_text).append(body).append(kClose);
    count_dropped(sink_.write_lines(line.data(), line.size(), 1));
    return;
  }
  if (out_size_ + size > out_capacity_) write_output();
  char* o = out_.get() + out_size_;
  for (std::string_view part : {kOpen, ev, kT, t_text, body, kClose}) {
    std::memcpy(o, part.data(), part.size());
    o += part.size();
  }
  out_size_ += size;
  ++out_lines_;
}

bool TraceWriter::drain_round(Drain mode, bool skip_gaps) {
  const bool may_allocate = mode != Drain::signal;
  heap_.clear();
  for (ThreadLog* l = first_log(); l != nullptr; l = l->next_log) {
    if (l->writer_id.load(std::memory_order_acquire) != id_) continue;
    flush::RecordHeader r;
    if (!peek(*l, r)) continue;
    if (heap_.size() == heap_.capacity() && !may_allocate) continue;  // left for a later drain
    heap_.push_back({r.seq, l});
  }
  std::make_heap(heap_.begin(), heap_.end(), later);
  while (!heap_.empty()) {
    const HeapEntry top = heap_.front();
    if (top.seq > next_seq_to_write_ && !skip_gaps) {
      gap_seq_ = next_seq_to_write_;
      return false;
    }
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
    // The log's records follow one another while no other thread's record
    // comes between them (one busy thread, a burst): no heap work for those.
    flush::RecordHeader r;
    bool more = peek(*top.log, r);
    do {
      format_record(*top.log, r, may_allocate);
      ++records_written_;
      next_seq_to_write_ = std::max(next_seq_to_write_, r.seq + 1);
      more = peek(*top.log, r);
    } while (more && r.seq == next_seq_to_write_);
    if (more) {
      heap_.push_back({r.seq, top.log});
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  }
  return true;
}

void TraceWriter::drain(Drain mode) {
  clock_.calibrate();  // the reference for this drain's timestamps
  publish_clock();
  if (mode == Drain::signal) {
    drain_round(mode, /*skip_gaps=*/true);
    return;
  }
  const std::uint64_t start = TickClock::monotonic_ns();
  const std::uint64_t budget = mode == Drain::final ? kFinalGapWaitNs : kBackgroundGapWaitNs;
  for (;;) {
    // A gap that has held back the lines after it for too long is skipped.
    const bool skip = mode == Drain::background && gap_since_ns_ != 0 &&
                      gap_seq_ == next_seq_to_write_ && TickClock::monotonic_ns() - gap_since_ns_ > kGapGiveUpNs;
    const std::uint64_t waiting_on = gap_seq_;
    if (drain_round(mode, skip)) {
      gap_since_ns_ = 0;
      break;
    }
    const std::uint64_t now = TickClock::monotonic_ns();
    if (gap_since_ns_ == 0 || gap_seq_ != waiting_on) gap_since_ns_ = now;
    if (now - start > budget) {
      if (mode == Drain::final) drain_round(mode, /*skip_gaps=*/true);
      break;
    }
    sched_yield();
  }
}

void TraceWriter::release_written() {
  // A batch whose lines are not yet durable still needs its chunks' records.
  if (pending_header_ != nullptr &&
      (pending_header_->commit.load(std::memory_order_relaxed) & pending::kWriteInProgress) != 0) {
    return;
  }
  for (ThreadLog* l = first_log(); l != nullptr; l = l->next_log) {
    if (l->writer_id.load(std::memory_order_acquire) == id_) release_drained(*l);
  }
  if (backlog_waiters_.load(std::memory_order_acquire) != 0) {
    space_word_.fetch_add(1, std::memory_order_release);
    futex_wake_all(space_word_);
  }
}

void TraceWriter::recycle(ThreadLog& log, LogChunk* chunk) {
  if (log.spare_count.load(std::memory_order_relaxed) >= ThreadLog::kMaxSpares) {
    chunk_bytes_outstanding_.fetch_sub(chunk->capacity, std::memory_order_relaxed);
    destroy_chunk(chunk);
    return;
  }
  chunk->committed.store(0, std::memory_order_relaxed);
  LogChunk* head = log.spares.load(std::memory_order_relaxed);
  do {
    chunk->next.store(head, std::memory_order_relaxed);
  } while (!log.spares.compare_exchange_weak(head, chunk, std::memory_order_release,
                                             std::memory_order_relaxed));
  log.spare_count.fetch_add(1, std::memory_order_relaxed);
}

// Frees the chunks the drain has moved past; a log whose thread has exited
// and whose lines are all written goes back to the pool.
void TraceWriter::release_drained(ThreadLog& log) {
  while (log.head != log.read_chunk) {
    LogChunk* done = log.head;
    log.head = done->next.load(std::memory_order_acquire);
    recycle(log, done);
  }
  const std::uint64_t o = log.ownership.load(std::memory_order_acquire);
  flush::RecordHeader r;
  if (flush::state_of(o) != LogState::retired || peek(log, r) || log.read_chunk->next.load() != nullptr) {
    return;
  }
  free_chunks(log);
  log.writer_id.store(0, std::memory_order_relaxed);
  log.ownership.store(flush::ownership(flush::generation_of(o), LogState::free), std::memory_order_release);
}

void TraceWriter::free_chunks(ThreadLog& log) {
  auto destroy_list = [this](LogChunk* c) {
    while (c != nullptr) {
      LogChunk* next = c->next.load(std::memory_order_acquire);
      chunk_bytes_outstanding_.fetch_sub(c->capacity, std::memory_order_relaxed);
      destroy_chunk(c);
      c = next;
    }
  };
  destroy_list(log.head);
  destroy_list(log.spares.exchange(nullptr, std::memory_order_acquire));
  destroy_list(log.own_spares);  // the producer is gone
  log.spare_count.store(0, std::memory_order_relaxed);
  log.head = log.read_chunk = log.tail = log.own_spares = nullptr;
  log.read_offset = log.tail_used = log.read_limit = 0;
}

void TraceWriter::release_all_logs() {
  for (ThreadLog* l = first_log(); l != nullptr; l = l->next_log) {
    if (l->writer_id.load(std::memory_order_acquire) != id_) continue;
    free_chunks(*l);
    l->writer_id.store(0, std::memory_order_relaxed);
    const std::uint64_t o = l->ownership.load(std::memory_order_relaxed);
    l->ownership.store(flush::ownership(flush::generation_of(o), LogState::free), std::memory_order_release);
  }
}

void TraceWriter::count_unwritten_records() {
  const std::uint64_t taken = next_seq_.load(std::memory_order_acquire);
  if (taken > records_written_) count_dropped(taken - records_written_);
}

void TraceWriter::write_end_line(const LineBuffer& end_body) {
  const std::uint64_t now = TickClock::monotonic_ns();
  const std::uint64_t t = std::max(clock_.monotonic_since_start_ns(now), last_t_written_);
  last_t_written_ = t;
  write_output();
  LineBuffer end;
  end.raw("{\"ev\":\"end\",\"t\":").u64(t).raw(end_body.view()).key("dropped").u64(dropped()).raw("}\n");
  count_dropped(sink_.write_lines(end.view().data(), end.view().size(), 1));
  count_dropped(sink_.end_frame());
}

}  // namespace cumemtrace::preload
