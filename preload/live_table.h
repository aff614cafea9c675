// The allocations the application holds right now, keyed by pointer, so a
// free can be matched to its alloc (its size, device and kind) without any
// state in the reader. Sharded by address: threads that free different
// pointers rarely meet on a lock, and there is no global lock.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cumemtrace/trace_format.h"

namespace cumemtrace::preload {

struct LiveAllocation {
  std::size_t size = 0;
  int dev = 0;
  format::MemoryKind kind = format::MemoryKind::device;
};

class LiveTable {
 public:
  // A pointer that is already live had its free go through a route we did
  // not see: the new allocation replaces it.
  void insert(std::uintptr_t ptr, const LiveAllocation& a) {
    Shard& s = shard(ptr);
    std::scoped_lock lock(s.mutex);
    auto [it, inserted] = s.map.try_emplace(ptr, a);
    if (inserted) {
      count_.fetch_add(1, std::memory_order_relaxed);
    } else {
      bytes_.fetch_sub(it->second.size, std::memory_order_relaxed);
      it->second = a;
    }
    bytes_.fetch_add(a.size, std::memory_order_relaxed);
  }

  // Removes and returns the allocation at `ptr`, if the table holds it.
  std::optional<LiveAllocation> take(std::uintptr_t ptr) {
    Shard& s = shard(ptr);
    std::scoped_lock lock(s.mutex);
    auto it = s.map.find(ptr);
    if (it == s.map.end()) return std::nullopt;
    LiveAllocation a = it->second;
    s.map.erase(it);
    count_.fetch_sub(1, std::memory_order_relaxed);
    bytes_.fetch_sub(a.size, std::memory_order_relaxed);
    return a;
  }

  std::uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  std::uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t kShards = 64;

  struct alignas(64) Shard {
    std::mutex mutex;
    std::unordered_map<std::uintptr_t, LiveAllocation> map;
  };

  Shard& shard(std::uintptr_t ptr) {
    // Device pointers are at least 256-byte aligned: drop the low bits, then
    // mix (Fibonacci hashing) so neighbouring blocks land on different shards.
    const std::uint64_t h = (static_cast<std::uint64_t>(ptr) >> 8) * 0x9e3779b97f4a7c15ull;
    return shards_[h >> (64 - 6)];
  }
  static_assert(kShards == 64, "the shift above assumes 64 shards");

  std::array<Shard, kShards> shards_;
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> bytes_{0};
};

}  // namespace cumemtrace::preload
