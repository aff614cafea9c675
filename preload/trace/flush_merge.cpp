// TraceWriter, consumer side: merges the per-thread logs in `seq` order,
// formats each line with its `t` (never decreasing) and hands whole lines to
// the sink. The caller holds the output lock. In Drain::signal nothing is
// allocated or freed and nobody is waited for.
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>

#include "trace/compact_event.h"
#include "trace/flush_futex.h"
#include "trace/trace_writer.h"

namespace cumemtrace::preload {

using flush::LogChunk;
using flush::LogState;
using flush::ThreadLog;

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
  count_dropped(sink_.write_lines(out_.get(), out_size_, out_lines_));
  out_size_ = 0;
  out_lines_ = 0;
}

void TraceWriter::format_record(ThreadLog& log, const flush::RecordHeader& r, bool may_allocate) {
  const std::uint64_t t =
      std::max(r.ticks != 0 ? clock_.ticks_since_start_ns(r.t) : clock_.monotonic_since_start_ns(r.t), last_t_written_);
  last_t_written_ = t;
  char digits[24];
  const auto t_end = std::to_chars(digits, digits + sizeof digits, t).ptr;
  const std::string_view t_text(digits, static_cast<std::size_t>(t_end - digits));

  const char* p = log.read_chunk->bytes() + log.read_offset + sizeof r;
  for (std::uint32_t i = 0; i < r.lines; ++i) {
    flush::LineHeader lh;
    std::memcpy(&lh, p, sizeof lh);
    p += sizeof lh;
    if (lh.ev_size != flush::kCompactLine) {
      append_line(std::string_view(p, lh.ev_size), std::string_view(p + lh.ev_size, lh.body_size), t_text,
                  may_allocate);
      p += lh.ev_size + lh.body_size;
      continue;
    }
    CompactEvent event;
    std::memcpy(&event, p, sizeof event);
    p += lh.body_size;
    // A passthrough allocation's segment twin comes just before its alloc
    // line, and just after its free line (TRACE_FORMAT.md: reserved memory
    // grows before the application has it, and shrinks after).
    const bool twin = (event.optional & CompactEvent::kWithSegmentTwin) != 0;
    if (twin && event.ev == format::Event::alloc) {
      append_compact_line(event.twin(format::Event::segment_alloc, CompactEvent::Shape::segment_alloc_twin),
                          t_text, may_allocate);
    }
    append_compact_line(event, t_text, may_allocate);
    if (twin && event.ev == format::Event::free) {
      append_compact_line(event.twin(format::Event::segment_free, CompactEvent::Shape::segment_free_twin), t_text,
                          may_allocate);
    }
  }
  log.read_offset += r.size;
}

void TraceWriter::append_compact_line(const CompactEvent& event, std::string_view t_text, bool may_allocate) {
  LineBuffer body;  // a CompactEvent's text: well inside the inline buffer
  event.append_body(body);
  append_line(format::name(event.ev), body.view(), t_text, may_allocate);
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
    LogChunk::destroy(chunk);
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
      LogChunk::destroy(c);
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
