// The records of the trace writer's per-thread logs, as they lie in memory
// and in the pending file (pending_log.h): a thread that records events
// appends records to its own chain of chunks (one producer, no lock), the
// writer merges the threads' logs in `seq` order (preload/trace/flush_log.h
// keeps the logs themselves), and a recovery reads the same chunks from a
// killed process's pending file (pending_recovery.cpp). Memory is handed
// from producer to consumer with release/acquire on `committed` and `next`
// only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace cumemtrace::contract::pending {

// One emit() call: a group of lines that share one timestamp. Followed by
// `lines` × (LineHeader, ev bytes, body bytes), then padding to 8 bytes.
struct RecordHeader {
  std::uint64_t seq;   // the order in which emit() calls took their place in the trace
  std::uint64_t t;     // CLOCK_MONOTONIC ns, or the writer's TickClock::ticks() when `ticks` is set
  std::uint32_t size;  // bytes of the whole record, this header included; a multiple of 8
  std::uint16_t lines;
  std::uint16_t ticks;  // 1: `t` is ticks, made ns by the writer (preload/trace/tick_clock.h) or a
                        // recovery (tick_reference.h)
};

struct LineHeader {
  std::uint32_t ev_size;
  std::uint32_t body_size;
};

// LineHeader::ev_size of a line stored as a CompactEvent (compact_event.h):
// body_size bytes of the struct, no event name; the consumer formats it.
inline constexpr std::uint32_t kCompactLine = 0xffffffffu;

inline constexpr std::size_t kRecordAlign = 8;

struct LogChunk {
  // Bytes of whole records the consumer may read.
  std::atomic<std::uint32_t> committed{0};
  std::uint32_t capacity = 0;
  // Set once, after the last record committed into this chunk.
  std::atomic<LogChunk*> next{nullptr};
  // In a pending file (pending_log.h): how many of `committed`'s bytes are
  // durable in the trace, by the current and the next commit; the writer
  // alone stores them. Unused for a chunk from the heap.
  std::atomic<std::uint32_t> marks[2] = {0, 0};
  // This chunk's slot in the pending file; kHeapChunk: malloc'd.
  static constexpr std::uint32_t kHeapChunk = 0xffffffffu;
  std::uint32_t slot = kHeapChunk;

  char* bytes() { return reinterpret_cast<char*>(this + 1); }

  // malloc, not new: the consumer may run where the C++ runtime must not
  // throw, and a failed allocation only drops an event. Pages stay untouched
  // until records are written into them.
  static LogChunk* create(std::uint32_t capacity) {
    void* raw = std::malloc(sizeof(LogChunk) + capacity);
    if (raw == nullptr) return nullptr;
    auto* c = new (raw) LogChunk;
    c->capacity = capacity;
    return c;
  }
  static void destroy(LogChunk* c) {
    if (c == nullptr) return;
    c->~LogChunk();
    std::free(c);
  }
  // Ready to be written from the start again (a recycled chunk). The marks
  // go to 0 only after `committed` does: a recovery never sees marks below
  // records that are still there.
  void reset() {
    committed.store(0, std::memory_order_release);
    marks[0].store(0, std::memory_order_release);
    marks[1].store(0, std::memory_order_release);
    next.store(nullptr, std::memory_order_relaxed);
  }
};
static_assert(sizeof(LogChunk) % kRecordAlign == 0);

}  // namespace cumemtrace::contract::pending
