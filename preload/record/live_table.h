// What the application holds right now, so a free can be matched to its
// alloc (size, device, kind) without any state in the reader:
//  - LiveTable: device, managed and pinned host allocations, keyed by
//    pointer. Sharded by address: threads that free different pointers
//    rarely meet on a lock, and there is no global lock. Each shard also
//    remembers its most recently freed pointers (a bounded set), so a second
//    free of one of them is told apart from a pointer never seen.
//  - VmmHandles: physical allocations from cuMemCreate, keyed by handle,
//    with their reference count (cuMemRetainAllocationHandle adds one).
//  - MappedRanges: the virtual ranges cuMemMap made usable.
// VMM calls are rare (a few per segment), so the last two take one mutex.
// The first two also keep the totals of the query API (live_usage.h) once
// it is on, under their own locks.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cumemtrace/trace_format.h"
#include "cumemtrace/address_map.h"
#include "pool/futex_lock.h"
#include "record/live_usage.h"

namespace cumemtrace::preload {

struct LiveAllocation {
  std::size_t size = 0;
  int dev = 0;
  format::MemoryKind kind = format::MemoryKind::device;
  // False for stream-ordered memory (cudaMallocAsync, cuMemAllocFromPoolAsync,
  // ...): it belongs to a memory pool, not to a context, so a device or
  // primary-context reset does not free it (cudaDeviceReset / cuCtxDestroy
  // notes, CUDA 13 documentation).
  bool context_bound = true;
  // Served by our caching pool: its memory is a block of a pool segment, so
  // its free has no segment twin (the pool reports segments itself).
  bool pooled = false;
  // False when its alloc line was dropped (the writer's back-pressure): its
  // free is dropped too, so the trace never holds half of a pair.
  bool recorded = true;
  // For the query API: its call stack's id (0: none) and the epoch it was
  // made in (live_usage.h). Stored with the entry the allocation writes
  // anyway; an entry is 32 bytes with them, so none straddles a cache line.
  std::uint32_t stack = 0;
  std::uint32_t epoch = 0;
};

// One allocation as the query API reports it.
struct HeldAllocation {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  int dev = 0;
  std::uint32_t stack = 0;
  std::uint32_t epoch = 0;
};

// Which kinds of memory a free function gives back.
enum class FreeFamily : std::uint8_t {
  device,       // cudaFree, cuMemFree*, cudaFreeAsync, cuMemFreeAsync: device and managed
  host_pinned,  // cudaFreeHost, cuMemFreeHost
  any,          // whatever is live there (a free the real library accepted after all)
};

inline bool frees_kind(FreeFamily family, format::MemoryKind kind) {
  switch (family) {
    case FreeFamily::device:
      return kind == format::MemoryKind::device || kind == format::MemoryKind::managed;
    case FreeFamily::host_pinned:
      return kind == format::MemoryKind::host_pinned;
    case FreeFamily::any:
      return true;
  }
  return false;
}

enum class TakeResult : std::uint8_t {
  taken,         // it was live; it is not any more
  unknown,       // never seen (or forgotten long ago)
  freed_before,  // among the recently freed: a double free
  other_kind,    // live, but not memory this free function gives back; left in place
};

class LiveTable {
 public:
  // The query API's totals, kept from when they are turned on (Recorder).
  // A table without (the tests') counts into one never turned on: no null
  // test on each call.
  explicit LiveTable(LiveUsage& usage = LiveUsage::never_on()) : usage_(usage) {}

  // A pointer that is already live had its free go through a route we did
  // not see: the new allocation replaces it. A recently freed pointer that
  // is handed out again is no longer "recently freed". Returns the total
  // when the query API's watch line was crossed, else 0 (LiveUsage::add).
  std::uint64_t insert(std::uintptr_t ptr, const LiveAllocation& a) {
    Shard& s = shard(ptr);
    std::scoped_lock lock(s.mutex);
    bool inserted = false;
    Entry& entry = s.map.find_or_claim(ptr, inserted);
    const bool counting = usage_.on();
    if (inserted || !entry.live) {
      s.add_count(1);
    } else {
      s.add_bytes(0 - entry.allocation.size);
      if (counting) usage_.remove(entry.allocation.dev, entry.allocation.size);
    }
    entry = Entry{a, 0, true};
    s.add_bytes(a.size);
    return counting ? usage_.add(a.dev, a.size) : 0;
  }

  struct Taken {
    TakeResult result = TakeResult::unknown;
    LiveAllocation allocation;  // valid when taken or other_kind
  };

  // Removes the allocation at `ptr` if it is live and `family` frees its kind.
  Taken take(std::uintptr_t ptr, FreeFamily family) {
    Shard& s = shard(ptr);
    std::scoped_lock lock(s.mutex);
    Entry* e = s.map.find(ptr);
    if (e == nullptr) return {TakeResult::unknown, {}};
    if (!e->live) return {TakeResult::freed_before, {}};
    const LiveAllocation allocation = e->allocation;
    if (!frees_kind(family, allocation.kind)) return {TakeResult::other_kind, allocation};
    e->live = false;
    if (++s.serial == 0) s.serial = 1;  // 0 marks an unused ring slot
    e->serial = s.serial;
    remember_freed(s, ptr, e->serial);  // may move entries: e is not used after it
    s.add_count(std::uint64_t{0} - 1);
    s.add_bytes(0 - allocation.size);
    if (usage_.on()) usage_.remove(allocation.dev, allocation.size);
    return {TakeResult::taken, allocation};
  }

  // The live allocation at `ptr` had its alloc line dropped (see
  // LiveAllocation::recorded).
  void mark_unrecorded(std::uintptr_t ptr) {
    Shard& s = shard(ptr);
    std::scoped_lock lock(s.mutex);
    if (Entry* e = s.map.find(ptr); e != nullptr && e->live) e->allocation.recorded = false;
  }

  // Removes every context-bound allocation on `dev` (a device reset freed
  // them) and returns them, ordered by address.
  std::vector<std::pair<std::uintptr_t, LiveAllocation>> take_device(int dev) {
    std::vector<std::pair<std::uintptr_t, LiveAllocation>> dropped;
    for (Shard& s : shards_) {
      std::scoped_lock lock(s.mutex);
      const std::size_t first = dropped.size();
      s.map.for_each([&](std::uint64_t ptr, const Entry& e) {
        if (e.live && e.allocation.dev == dev && e.allocation.context_bound) dropped.emplace_back(ptr, e.allocation);
      });
      // Erased, not remembered: freeing them later is a use after reset,
      // reported as an unknown pointer.
      for (std::size_t i = first; i < dropped.size(); ++i) {
        s.map.erase(dropped[i].first);
        s.add_count(std::uint64_t{0} - 1);
        s.add_bytes(0 - dropped[i].second.size);
        if (usage_.on()) usage_.remove(dev, dropped[i].second.size);
      }
    }
    std::sort(dropped.begin(), dropped.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return dropped;
  }

  std::uint64_t count() const {
    std::uint64_t total = 0;
    for (const Shard& s : shards_) total += s.count.load(std::memory_order_relaxed);
    return total;
  }
  std::uint64_t bytes() const {
    std::uint64_t total = 0;
    for (const Shard& s : shards_) total += s.bytes.load(std::memory_order_relaxed);
    return total;
  }

  // The query API (cold): each live allocation, one shard locked at a time.
  template <typename F>
  void for_each_held(F&& f) {
    for (Shard& s : shards_) {
      std::scoped_lock lock(s.mutex);
      visit(s, f);
    }
  }
  // `f(visit_all)` with every shard locked, where visit_all(g) calls g on
  // each live allocation: nothing changes meanwhile (LiveUsage::start).
  template <typename F>
  void with_all_locked(F&& f) {
    for (Shard& s : shards_) s.mutex.lock();
    try {
      f([this](auto&& g) {
        for (Shard& s : shards_) visit(s, g);
      });
    } catch (...) {
      for (Shard& s : shards_) s.mutex.unlock();
      throw;
    }
    for (Shard& s : shards_) s.mutex.unlock();
  }

 private:
  static constexpr std::size_t kShards = 64;
  // Recently freed pointers remembered per shard (2,048 in all): enough to
  // catch the double frees that happen close together, bounded in memory.
  static constexpr std::size_t kRecentPerShard = 32;

  struct Entry {
    LiveAllocation allocation;
    // Which free made it a tombstone. Compared only with the serials of the
    // shard's last kRecentPerShard frees, so wrapping after 2^32 frees is
    // harmless; 32 bits keep an entry at 24 bytes.
    std::uint32_t serial = 0;
    bool live = true;
  };
  static_assert(sizeof(Entry) == 32, "an entry per cache-line half (LiveAllocation's note)");

  struct alignas(64) Shard {
    pool::FutexLock mutex;
    AddressMap<Entry> map;  // no node allocated per allocation, unlike std::unordered_map
    // Written only under `mutex`, so a load and a store, not a locked
    // read-modify-write (two of those per call were ~40 cycles); read
    // without it, summed over the shards, for the `end` line. Unsigned:
    // adding 0 - n subtracts n.
    std::atomic<std::uint64_t> count{0};
    std::atomic<std::uint64_t> bytes{0};
    void add_count(std::uint64_t n) { add(count, n); }
    void add_bytes(std::uint64_t n) { add(bytes, n); }
    static void add(std::atomic<std::uint64_t>& total, std::uint64_t n) {
      total.store(total.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    // A ring of (pointer, serial) of the latest frees; the oldest tombstone is
    // erased when it falls out, unless the pointer was allocated again since
    // (its serial then no longer matches).
    std::array<std::pair<std::uintptr_t, std::uint32_t>, kRecentPerShard> recent{};
    std::size_t next = 0;
    std::uint32_t serial = 0;
  };

  template <typename F>
  static void visit(Shard& s, F& f) {
    s.map.for_each([&](std::uint64_t ptr, const Entry& e) {
      if (e.live) f(HeldAllocation{ptr, e.allocation.size, e.allocation.dev, e.allocation.stack, e.allocation.epoch});
    });
  }

  static void remember_freed(Shard& s, std::uintptr_t ptr, std::uint32_t serial) {
    auto& slot = s.recent[s.next];
    if (slot.second != 0) {
      const Entry* old = s.map.find(slot.first);
      if (old != nullptr && !old->live && old->serial == slot.second) s.map.erase(slot.first);
    }
    slot = {ptr, serial};
    s.next = (s.next + 1) % kRecentPerShard;
  }

  Shard& shard(std::uintptr_t ptr) {
    // Device pointers are at least 256-byte aligned: drop the low bits, then
    // mix (Fibonacci hashing) so neighbouring blocks land on different shards.
    const std::uint64_t h = (static_cast<std::uint64_t>(ptr) >> 8) * 0x9e3779b97f4a7c15ull;
    return shards_[h >> (64 - 6)];
  }
  static_assert(kShards == 64, "the shift above assumes 64 shards");

  LiveUsage& usage_;
  std::array<Shard, kShards> shards_;
};

// Physical memory from cuMemCreate, by handle. A handle is released when
// every reference (cuMemCreate, each cuMemRetainAllocationHandle) has been
// given back with cuMemRelease.
class VmmHandles {
 public:
  struct Handle {
    std::size_t size = 0;
    int dev = 0;
    int refs = 1;
    std::uint32_t stack = 0;  // as LiveAllocation's
    std::uint32_t epoch = 0;
  };

  explicit VmmHandles(LiveUsage& usage = LiveUsage::never_on()) : usage_(usage) {}

  // Returns the total when the query API's watch line was crossed, else 0.
  std::uint64_t create(std::uint64_t handle, std::size_t size, int dev, std::uint32_t stack = 0, std::uint32_t epoch = 0) {
    std::scoped_lock lock(mutex_);
    forget_recent(handle);
    const bool counting = usage_.on();
    auto [it, inserted] = handles_.try_emplace(handle);
    if (!inserted && counting) usage_.remove(it->second.dev, it->second.size);
    it->second = Handle{size, dev, 1, stack, epoch};
    return counting ? usage_.add(dev, size) : 0;
  }

  // cuMemRetainAllocationHandle returned `handle` once more.
  void retain(std::uint64_t handle) {
    std::scoped_lock lock(mutex_);
    if (auto it = handles_.find(handle); it != handles_.end()) ++it->second.refs;
  }

  struct Released {
    TakeResult result = TakeResult::unknown;
    bool last = false;  // the final reference: the application gave the memory back
    Handle handle;
  };

  Released release(std::uint64_t handle) {
    std::scoped_lock lock(mutex_);
    auto it = handles_.find(handle);
    if (it == handles_.end()) {
      const bool seen = std::find(recent_.begin(), recent_.end(), handle) != recent_.end();
      return {seen ? TakeResult::freed_before : TakeResult::unknown, false, {}};
    }
    Released r{TakeResult::taken, --it->second.refs == 0, it->second};
    if (r.last) {
      if (usage_.on()) usage_.remove(it->second.dev, it->second.size);
      handles_.erase(it);
      recent_.push_back(handle);
      if (recent_.size() > kRecent) recent_.pop_front();
    }
    return r;
  }

  std::optional<Handle> find(std::uint64_t handle) const {
    std::scoped_lock lock(mutex_);
    auto it = handles_.find(handle);
    if (it == handles_.end()) return std::nullopt;
    return it->second;
  }

  std::uint64_t count() const {
    std::scoped_lock lock(mutex_);
    return handles_.size();
  }
  std::uint64_t bytes() const {
    std::scoped_lock lock(mutex_);
    std::uint64_t total = 0;
    for (const auto& [h, v] : handles_) total += v.size;
    return total;
  }

  // The query API (cold), as LiveTable's.
  template <typename F>
  void for_each_held(F&& f) {
    std::scoped_lock lock(mutex_);
    visit(f);
  }
  template <typename F>
  void with_all_locked(F&& f) {
    std::scoped_lock lock(mutex_);
    f([this](auto&& g) { visit(g); });
  }

 private:
  template <typename F>
  void visit(F& f) const {
    for (const auto& [h, v] : handles_) f(HeldAllocation{h, v.size, v.dev, v.stack, v.epoch});
  }

  static constexpr std::size_t kRecent = 256;

  void forget_recent(std::uint64_t handle) {
    // The driver may hand a released handle value out again.
    recent_.erase(std::remove(recent_.begin(), recent_.end(), handle), recent_.end());
  }

  LiveUsage& usage_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, Handle> handles_;
  std::deque<std::uint64_t> recent_;
};

// Virtual ranges backed by physical memory (cuMemMap), by base address.
class MappedRanges {
 public:
  struct Range {
    std::size_t size = 0;
    int dev = 0;
  };

  void map(std::uintptr_t ptr, std::size_t size, int dev) {
    std::scoped_lock lock(mutex_);
    ranges_[ptr] = Range{size, dev};
  }

  // Removes and returns every mapped range lying wholly in [ptr, ptr + size)
  // (cuMemUnmap of whole mappings). One only partly covered stays: the
  // driver refuses to unmap part of a mapping.
  std::vector<std::pair<std::uintptr_t, Range>> unmap(std::uintptr_t ptr, std::size_t size) {
    std::vector<std::pair<std::uintptr_t, Range>> removed;
    std::scoped_lock lock(mutex_);
    const std::uintptr_t end = size > UINTPTR_MAX - ptr ? UINTPTR_MAX : ptr + size;
    for (auto it = ranges_.lower_bound(ptr); it != ranges_.end() && it->first < end;) {
      if (it->second.size <= end - it->first) {
        removed.emplace_back(*it);
        it = ranges_.erase(it);
      } else {
        ++it;
      }
    }
    return removed;
  }

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, Range> ranges_;
};

}  // namespace cumemtrace::preload
