// Per-thread event logs of the trace writer. A thread that records events
// appends them to its own chain of chunks (one producer, no lock); whoever
// holds the writer's output lock reads them (one consumer at a time) and
// merges the threads' logs in `seq` order. The chunks and their records are
// laid out as the pending file holds them (contract/pending/log_records.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "pending/log_records.h"

namespace cumemtrace::preload::flush {

// A log's chunks and records are the pending log's, whether a chunk is a
// slot of the pending file or heap memory.
using contract::pending::kCompactLine;
using contract::pending::kRecordAlign;
using contract::pending::LineHeader;
using contract::pending::LogChunk;
using contract::pending::RecordHeader;

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
