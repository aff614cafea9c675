// A small lock for short critical sections that are rarely contended: each
// sub-pool's (pool_internal.h) and each live-table shard's (live_table.h).
#pragma once

#include <atomic>
#include <cstdint>

namespace cumemtrace::pool {

// Uncontended as a rule (the pool gives each thread its own sub-pool; the
// live table spreads pointers over 64 shards), so its cost is what matters:
// std::mutex goes through pthread_mutex_lock/unlock, about 60 instructions
// per pair besides the two atomic operations, a seventh of a cache hit.
// This is the classic
// three-state futex lock (0 free, 1 held, 2 held and perhaps waited for)
// on std::atomic's wait/notify, which block in the kernel like a mutex:
// the fast paths are one compare-exchange and one exchange, inline.
class FutexLock {
 public:
  void lock() {
    std::uint32_t seen = 0;
    if (state_.compare_exchange_strong(seen, 1, std::memory_order_acquire, std::memory_order_relaxed))
        [[likely]]
      return;
    lock_contended(seen);
  }
  bool try_lock() {
    std::uint32_t seen = 0;
    return state_.compare_exchange_strong(seen, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (state_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
      state_.notify_one();
  }

 private:
  void lock_contended(std::uint32_t seen) {
    // Mark it waited for; whoever unlocks then wakes one waiter, which marks
    // it again when it takes the lock (others may still sleep).
    if (seen != 2) seen = state_.exchange(2, std::memory_order_acquire);
    while (seen != 0) {
      state_.wait(2, std::memory_order_relaxed);
      seen = state_.exchange(2, std::memory_order_acquire);
    }
  }

  std::atomic<std::uint32_t> state_{0};
};

}  // namespace cumemtrace::pool
