// Event timestamps (tick_clock.h): TSC ticks made CLOCK_MONOTONIC
// nanoseconds by the writer agree with the clock read at the same moment,
// across drains and pauses; without the TSC, ticks are that clock itself.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "trace/tick_clock.h"

using cumemtrace::preload::TickClock;

namespace {

constexpr std::uint64_t kConversionErrorNs = 20'000;

TEST(TickClock, TscTicksBecomeTheMonotonicClocksNanoseconds) {
  if (!TickClock::tsc_is_the_system_clock()) GTEST_SKIP() << "the kernel does not keep time with the TSC here";
  const std::uint64_t start = TickClock::monotonic_ns();
  TickClock clock(start, /*use_tsc=*/true);
  ASSERT_TRUE(clock.counts_tsc());
  std::uint64_t last = 0;
  for (int drain = 0; drain < 6; ++drain) {
    // A few events, a pause, then the drain that formats them (as the
    // writer does: calibrate first, then convert). Each tick is read between
    // two clock reads: a thread preempted there (a loaded machine, the
    // sanitizer runs) widens the bracket, and the test stays a test of the
    // conversion, not of the scheduler.
    struct Event {
      std::uint64_t before, ticks, after;
    };
    std::vector<Event> events;
    events.reserve(50);
    for (int i = 0; i < 50; ++i) {
      Event e{};
      e.before = TickClock::monotonic_ns();
      e.ticks = clock.ticks();
      e.after = TickClock::monotonic_ns();
      events.push_back(e);
      if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(drain));
    }
    clock.calibrate();
    for (const Event& e : events) {
      const std::uint64_t t = clock.ticks_since_start_ns(e.ticks);
      // The conversion's own error: the calibration pairs' jitter (tens of
      // ns) and the rate's error over a drain's few ms, well within 20 us.
      EXPECT_GE(t + kConversionErrorNs, e.before - start) << "drain " << drain;
      EXPECT_LE(t, e.after - start + kConversionErrorNs) << "drain " << drain;
      EXPECT_GE(t, last);  // later ticks never map earlier
      last = t;
    }
  }
}

TEST(TickClock, EarlierTicksThanTheStartAreZero) {
  const std::uint64_t start = TickClock::monotonic_ns() + 1'000'000'000;
  for (bool tsc : {false, TickClock::tsc_is_the_system_clock()}) {
    TickClock clock(start, tsc);
    clock.calibrate();
    EXPECT_EQ(clock.ticks_since_start_ns(clock.ticks()), 0u);
  }
}

TEST(TickClock, WithoutTheTscTicksAreNanoseconds) {
  const std::uint64_t start = TickClock::monotonic_ns();
  TickClock clock(start, /*use_tsc=*/false);
  EXPECT_FALSE(clock.counts_tsc());
  const std::uint64_t before = TickClock::monotonic_ns();
  const std::uint64_t ticks = clock.ticks();
  const std::uint64_t after = TickClock::monotonic_ns();
  EXPECT_GE(ticks, before);
  EXPECT_LE(ticks, after);
  clock.calibrate();
  EXPECT_EQ(clock.ticks_since_start_ns(ticks), ticks - start);
}

}  // namespace
