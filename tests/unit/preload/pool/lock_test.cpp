// The lock of the sub-pools and live-table shards (preload/pool/futex_lock.h): mutual exclusion under
// real contention (more threads than this machine's CPUs, so holders are
// preempted and waiters sleep in the kernel), and try_lock's answers.
#include <gtest/gtest.h>

#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "futex_lock.h"

using cumemtrace::pool::FutexLock;

TEST(FutexLock, ExcludesUnderContentionAndWakesEveryWaiter) {
  FutexLock lock;
  // Plain, non-atomic: a lost update means two threads were inside at once.
  std::uint64_t counter = 0;
  std::uint64_t inside = 0, overlaps = 0;
  constexpr int kThreads = 6;
  constexpr int kRounds = 200'000;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();  // all at once, so that they meet
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard guard(lock);
        if (inside++ != 0) ++overlaps;
        ++counter;
        // Now and then hold it long enough for others to go to sleep.
        if (i % 1024 == 0) std::this_thread::yield();
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();  // a lost wake-up hangs here (ctest's timeout)
  EXPECT_EQ(counter, std::uint64_t{kThreads} * kRounds);
  EXPECT_EQ(overlaps, 0u);
}

TEST(FutexLock, TryLockFailsWhileHeld) {
  FutexLock lock;
  ASSERT_TRUE(lock.try_lock());
  bool other = true;
  std::thread([&] { other = lock.try_lock(); }).join();
  EXPECT_FALSE(other);
  lock.unlock();
  std::thread([&] {
    other = lock.try_lock();
    if (other) lock.unlock();
  }).join();
  EXPECT_TRUE(other);
}
