// The writer's side of the pending file (pending/pending_log.h): creates it
// beside the trace, hands out its slots as log chunks, keeps the commit state
// and the api names, and removes the file once the trace has its `end`.
//
// Chunks come from here only when the file could be set up; otherwise (and
// for a record larger than a chunk) they come from the heap and an event
// still in one when the process is killed is lost, as before.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "trace/flush_log.h"
#include "pending/pending_log.h"

namespace cumemtrace::preload::flush {

class PendingArena {
 public:
  PendingArena() = default;
  PendingArena(const PendingArena&) = delete;
  PendingArena& operator=(const PendingArena&) = delete;
  ~PendingArena();

  // Creates `<trace_path>.pending` with room for `max_chunks` chunks of
  // `chunk_capacity` bytes. False (with a warning) if the file system
  // cannot hold it: the writer then keeps its logs on the heap.
  bool open(const std::string& trace_path, std::uint32_t chunk_capacity, std::uint64_t max_chunks,
            std::uint64_t start_ns, bool uses_tsc);
  bool is_open() const { return header_ != nullptr; }
  contract::pending::Header& header() { return *header_; }

  // A chunk of `chunk_capacity` bytes in the file, reset; nullptr when the
  // file has no slot left or its disk space cannot be had.
  LogChunk* allocate();
  // Gives a chunk from allocate() back.
  void release(LogChunk* chunk);

  // The name behind CompactEvent::api, for a recovery: published the first
  // time a thread meets the pointer (a few per process; then one compare).
  void note_api(const char* api) {
    if (header_ == nullptr || api == nullptr) return;
    const auto key = reinterpret_cast<std::uintptr_t>(api);
    Seen& seen = t_api_seen[(key >> 3) % kSeenSlots];
    if (seen.key == key && seen.arena == id_) [[likely]] return;
    publish_api(api);
    seen = {key, id_};
  }

  // The trace has its `end`: nothing to recover, and the file is removed
  // (its mapping stays for a thread still recording).
  void mark_ended();
  // The exec after mark_ended() failed: the trace goes on, into the same
  // mapping, but without a name a kill can no longer be recovered from (an
  // unlinked file cannot be linked back; a rare path, where the trace is
  // as it was before pending files).
  void exec_failed();
  // Disk space reserved so far (the bench and the tests read it).
  std::uint64_t reserved_slots() const { return allocated_slots_; }
  const std::string& path() const { return path_; }
  // In a forked child: the file and its lock are the parent's.
  void close_after_fork();

 private:
  void publish_api(const char* api);
  bool grow_to(std::uint64_t slots);  // the slot lock is held

  // What this thread has published, per arena (a test makes many writers).
  struct Seen {
    std::uintptr_t key;
    std::uint64_t arena;
  };
  static constexpr std::size_t kSeenSlots = 8;
  static thread_local Seen t_api_seen[kSeenSlots];

  std::uint64_t id_ = 0;  // 0 until open()
  int fd_ = -1;
  std::string path_;
  contract::pending::Header* header_ = nullptr;
  char* base_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  std::uint64_t slot_bytes_ = 0;
  std::uint32_t chunk_capacity_ = 0;
  std::uint64_t max_slots_ = 0;

  // Free slots, linked through their chunks' `next` (guarded by lock_).
  std::atomic<bool> lock_{false};
  LogChunk* free_ = nullptr;
  std::uint64_t allocated_slots_ = 0;  // disk space reserved for slots [0, n)
  bool warned_ = false;
};

}  // namespace cumemtrace::preload::flush
