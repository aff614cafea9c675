// Per-thread event logs of the trace writer. A thread that records events
// appends them to its own chain of chunks (one producer, no lock); whoever
// holds the writer's output lock reads them (one consumer at a time) and
// merges the threads' logs in `seq` order. Memory is handed from producer to
// consumer with release/acquire on `committed` and `next` only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace cumemtrace::preload::flush {

// One emit() call: a group of lines that share one timestamp. Followed by
// `lines` × (LineHeader, ev bytes, body bytes), then padding to 8 bytes.
struct RecordHeader {
  std::uint64_t seq;   // the order in which emit() calls took their place in the trace
  std::uint64_t t;     // CLOCK_MONOTONIC ns, or TickClock::ticks() when `ticks` is set
  std::uint32_t size;  // bytes of the whole record, this header included; a multiple of 8
  std::uint16_t lines;
  std::uint16_t ticks;  // 1: `t` is ticks, made ns by the writer (tick_clock.h)
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

// Who holds a ThreadLog: (generation << 2) | state. The generation grows at
// every claim, so a thread that exits long after its log was reclaimed cannot
// retire the log's new owner.
enum class LogState : std::uint64_t { free = 0, owned = 1, retired = 2 };

inline std::uint64_t ownership(std::uint64_t generation, LogState s) {
  return (generation << 2) | static_cast<std::uint64_t>(s);
}
inline LogState state_of(std::uint64_t ownership) { return static_cast<LogState>(ownership & 3); }
inline std::uint64_t generation_of(std::uint64_t ownership) { return ownership >> 2; }

// ThreadLogs are never freed: they sit in one process-wide list and are
// reused, so a stale pointer (a thread-exit destructor, a forked child's copy)
// always points at a ThreadLog, never at freed memory.
struct ThreadLog {
  std::atomic<std::uint64_t> ownership{0};
  // The TraceWriter this log belongs to (0: none). Published last, with
  // release, after the chunk pointers below are set.
  std::atomic<std::uint64_t> writer_id{0};
  ThreadLog* next_log = nullptr;  // the process-wide list; fixed once published

  // Producer side: only the owning thread.
  alignas(64) LogChunk* tail = nullptr;
  std::uint32_t tail_used = 0;
  LogChunk* own_spares = nullptr;  // taken from `spares`, linked through `next`

  // Consumer side: only the holder of the writer's output lock.
  alignas(64) LogChunk* head = nullptr;  // oldest chunk still held
  LogChunk* read_chunk = nullptr;
  std::uint32_t read_offset = 0;
  // read_chunk's `committed` as last loaded: records below it are read
  // without touching the cache line the producer stores to at every record.
  std::uint32_t read_limit = 0;

  // Drained chunks the consumer hands back (a list linked through `next`,
  // which the producer takes whole), so that a busy thread's chunks go round
  // without malloc and free (across threads, those meet on arena locks).
  // 16 (4 MiB of 256 KiB chunks, held only by a thread that once had that
  // many in flight): with 4, a thread whose writer fell a few chunks behind
  // got fresh chunks, each 64 page faults on first touch (perf stat,
  // bench_malloc_free 1 M pairs in passthrough: 7,700 faults; 2,100-2,800
  // with 16).
  static constexpr std::uint32_t kMaxSpares = 16;
  alignas(64) std::atomic<LogChunk*> spares{nullptr};
  std::atomic<std::uint32_t> spare_count{0};
};

}  // namespace cumemtrace::preload::flush
