// What each call site had live at the allocated peak, checked against a
// brute-force replay; and the error events counted by kind.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "event_feeder.h"
#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer {
namespace {

TEST(TopAtPeak, SitesAreThoseLiveWhenThePeakWasFirstReached) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.alloc(1, 0x10, 100, /*stack=*/1);
  feed.alloc(2, 0x20, 200, /*stack=*/2);  // 300: the peak, 1 -> 100, 2 -> 200
  feed.free(3, 0x20);
  feed.alloc(4, 0x30, 200, /*stack=*/3);  // 300 again: reached twice, not a new peak
  const std::vector<SiteAtPeak> top = analysis.top_at_peak(10);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].stack, 2u);
  EXPECT_EQ(top[0].bytes, 200u);
  EXPECT_EQ(top[0].count, 1u);
  EXPECT_EQ(top[1].stack, 1u);
  EXPECT_EQ(top[1].bytes, 100u);
  EXPECT_EQ(analysis.total().allocated.peak_t, 2u);

  feed.alloc(5, 0x40, 1, /*stack=*/3);  // 301: a new peak, 1 -> 100, 3 -> 201
  const std::vector<SiteAtPeak> after = analysis.top_at_peak(1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].stack, 3u);
  EXPECT_EQ(after[0].bytes, 201u);
  EXPECT_EQ(after[0].count, 2u);
  EXPECT_EQ(analysis.sites().sites_at_peak(), 2u);
}

TEST(TopAtPeak, MatchesABruteForceReplayOnRandomTraffic) {
  std::mt19937_64 rng(7);
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  struct Live {
    std::uint64_t size, stack;
  };
  std::map<std::uint64_t, Live> live;
  std::uint64_t total = 0, best = 0;
  std::map<std::uint64_t, std::uint64_t> best_sites;  // stack -> bytes at the first time `best` was reached
  std::uint64_t next_ptr = 0x1000;
  for (std::uint64_t t = 1; t <= 20000; ++t) {
    if (!live.empty() && rng() % 100 < 48) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      total -= it->second.size;
      feed.free(t, it->first);
      live.erase(it);
    } else {
      const std::uint64_t size = rng() % 4096 + 1, stack = rng() % 7;
      live[next_ptr] = Live{size, stack};
      feed.alloc(t, next_ptr, size, stack);
      next_ptr += 0x1000;
      total += size;
      if (total > best) {
        best = total;
        best_sites.clear();
        for (const auto& [ptr, a] : live) best_sites[a.stack] += a.size;
      }
    }
  }
  ASSERT_EQ(analysis.total().allocated.peak, best);
  const std::vector<SiteAtPeak> top = analysis.top_at_peak(100);
  std::map<std::uint64_t, std::uint64_t> got;
  for (const SiteAtPeak& s : top) got[s.stack] = s.bytes;
  EXPECT_EQ(got, best_sites);
  for (std::size_t i = 1; i < top.size(); ++i) EXPECT_GE(top[i - 1].bytes, top[i].bytes);
}

TEST(ErrorEvents, AreCountedByWhatInFirstSeenOrder) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.error(1, "double_free");
  feed.error(2, "unknown_pointer");
  feed.error(3, "double_free");
  feed.error(4, "");
  EXPECT_EQ(analysis.errors(), 4u);
  const auto& by_what = analysis.errors_by_what();
  ASSERT_EQ(by_what.size(), 3u);
  EXPECT_EQ(by_what[0], (std::pair<std::string, std::uint64_t>{"double_free", 2}));
  EXPECT_EQ(by_what[1], (std::pair<std::string, std::uint64_t>{"unknown_pointer", 1}));
  EXPECT_EQ(by_what[2], (std::pair<std::string, std::uint64_t>{"unspecified", 1}));
}

TEST(ErrorEvents, DistinctKindsAreBounded) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  for (int i = 0; i < 1000; ++i) feed.error(static_cast<std::uint64_t>(i), "kind" + std::to_string(i));
  EXPECT_EQ(analysis.errors_by_what().size(), Analysis::kMaxErrorKinds);
  EXPECT_EQ(analysis.errors_by_what().back().first, "(other)");
  std::uint64_t sum = 0;
  for (const auto& [what, n] : analysis.errors_by_what()) sum += n;
  EXPECT_EQ(sum, 1000u);
}

}  // namespace
}  // namespace cumemtrace::analyzer
