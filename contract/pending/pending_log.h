// The pending file (`<trace>.pending`): where the writer keeps the events it
// has recorded but not yet written, in memory the kernel keeps when the
// process dies. SIGKILL and the OOM killer run no handler, so whatever sat
// in a thread's log when they struck (up to a flush interval of events, the
// moments people most want to see) would be lost. The logs' chunks are pages
// of this file, mapped MAP_SHARED: the kernel's page cache holds what the
// threads stored after the process is gone, and `cumemtrace` completes the
// trace from it (analyzer: `cumemtrace recover`, automatic in report, check
// and diff), ending it with `"reason":"killed"`.
//
// What makes a finished recovery exact:
//  - A record is visible once its chunk's `committed` covers it (the
//    producer stores the record's bytes first, log_records.h); one that a
//    thread had begun but not committed was never recorded.
//  - Every chunk carries two marks: how far its records are in the trace.
//    The writer changes the marks that are not current, writes the lines,
//    and only once they are durable (in the kernel for a plain file, a zstd
//    block flushed for .zst) flips `commit`'s current-mark bit, in the same
//    store that says no write is in progress. A kill before that store
//    leaves "in progress" set: the recovery cuts the file back to
//    `batch_start` and takes the records from the old marks; after it, from
//    the new ones. So no line is lost or written twice, whatever instruction
//    the kill lands on.
//  - A process alive holds an exclusive flock on the file (the kernel drops
//    it when the last descriptor closes, on death or exec); the recovery
//    takes it first, so it never races a live writer, nor another recovery.
//
// CompactEvent's `api` is a pointer into the preload's own memory; a
// recovering process reads the name from `apis`, which each recording thread
// fills the first time it meets a pointer (preload/trace/trace_writer.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "pending/tick_reference.h"

namespace cumemtrace::contract::pending {

inline constexpr char kMagic[8] = {'C', 'M', 'T', 'P', 'E', 'N', 'D', '1'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr const char* kSuffix = ".pending";

inline constexpr std::uint32_t kMaxApiNames = 192;
inline constexpr std::size_t kApiNameBytes = 56;

// `commit` bits.
inline constexpr std::uint32_t kWriteInProgress = 1;
inline constexpr std::uint32_t kSecondMarkIsCurrent = 2;

struct ApiName {
  std::atomic<std::uint64_t> ptr;  // the CompactEvent::api value; 0: not yet published
  char name[kApiNameBytes];        // NUL-terminated
};

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_bytes;  // where slot 0 starts; a multiple of the page size
  std::uint64_t slot_bytes;    // one chunk: its LogChunk and its capacity; a page multiple
  std::uint64_t max_slots;
  std::uint64_t start_ns;      // CLOCK_MONOTONIC at t = 0
  std::int32_t pid;
  std::uint32_t uses_tsc;      // records stamped in TSC ticks (RecordHeader::ticks) may occur

  // Slots handed out so far (their pages exist); a recovery reads [0, slots).
  std::atomic<std::uint64_t> slots;
  // 1: the trace has its `end` line (exit, exec, a fatal signal): nothing to recover.
  std::atomic<std::uint32_t> ended;
  std::atomic<std::uint32_t> commit;      // kWriteInProgress | kSecondMarkIsCurrent
  std::atomic<std::uint64_t> batch_start; // file size before the write in progress
  std::atomic<std::uint64_t> durable;     // file size when nothing is in progress
  std::atomic<std::uint64_t> last_t;      // `t` of the last line written
  std::atomic<std::uint64_t> dropped;     // the writer's dropped count at the last commit
  std::atomic<std::uint32_t> frame_open;  // zstd: the file ends inside a frame (after a flushed block)
  // The clock of the records' `t` as the writer last calibrated it
  // (tick_reference.h): clocks[clock_index & 1] is whole.
  std::atomic<std::uint32_t> clock_index;
  TickReference clocks[2];
  std::atomic<std::uint32_t> api_count;   // entries of `apis` claimed
  ApiName apis[kMaxApiNames];
};

// Room for the header, rounded to pages (slots start after it).
inline constexpr std::size_t kHeaderBytes = 16 * 1024;
static_assert(sizeof(Header) <= kHeaderBytes);

}  // namespace cumemtrace::contract::pending
