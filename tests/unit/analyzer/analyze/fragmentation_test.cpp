// Fragmentation metrics with exact numbers: unused reserved memory, the
// peak's occupancy, scattered cached memory, inactive splits, rounding
// waste, and the bounded time series.
#include <gtest/gtest.h>

#include "analyze/report_figures.h"
#include "event_feeder.h"
#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer {
namespace {

TEST(Fragmentation, MetricsAndWorstMomentsAreExact) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.segment_alloc(1, 0x100000, 1048576);
  feed.alloc(2, 0x100000, 1000, 0, 0, 1024);       // unused 1047576: the most ever
  feed.alloc(3, 0x100400, 300000, 0, 0, 300032);
  feed.free(4, 0x100400);
  feed.alloc(5, 0x100400, 500000, 0, 0, 500224);   // rounding: 501248 - 501000 = 248, the most
  feed.pool(6, 0, 501000, 1048576, 547576, 300000, 4096);
  feed.segment_alloc(7, 0x400000, 2097152);        // reserved peak: 3 MiB
  feed.alloc(8, 0x400000, 2097152, 0, 0, 2097152);  // 2598152 allocated while at the peak
  feed.pool(10, 0, 2598152, 3145728, 1000, 100, 0);

  const MemoryTotals& total = analysis.total();
  EXPECT_EQ(total.reserved.peak, 3145728u);
  EXPECT_EQ(total.allocated_at_reserved_peak, 2598152u);
  EXPECT_DOUBLE_EQ(ratio_unused(total.allocated_at_reserved_peak, total.reserved.peak), 1.0 - 2598152.0 / 3145728.0);
  EXPECT_EQ(total.live_requested, 2598152u);
  EXPECT_EQ(total.live_blocks, 2598400u);

  const FragmentationTracker& f = analysis.fragmentation();
  EXPECT_EQ(f.samples(), 2u);
  const FragmentationWorst& w = f.worst();
  ASSERT_TRUE(w.reserved_unused.seen);
  EXPECT_EQ(w.reserved_unused.bytes, 1047576u);
  EXPECT_EQ(w.reserved_unused.t, 2u);
  EXPECT_DOUBLE_EQ(w.reserved_unused.value, 1.0 - 1000.0 / 1048576.0);
  ASSERT_TRUE(w.cached_free_scattered.seen);
  EXPECT_EQ(w.cached_free_scattered.bytes, 247576u);
  EXPECT_EQ(w.cached_free_scattered.t, 6u);
  EXPECT_DOUBLE_EQ(w.cached_free_scattered.value, 1.0 - 300000.0 / 547576.0);
  ASSERT_TRUE(w.inactive_split_bytes.seen);
  EXPECT_EQ(w.inactive_split_bytes.bytes, 4096u);
  ASSERT_TRUE(w.rounding_waste.seen);
  EXPECT_EQ(w.rounding_waste.bytes, 248u);
  EXPECT_EQ(w.rounding_waste.t, 5u);
  EXPECT_DOUBLE_EQ(w.rounding_waste.value, 1.0 - 501000.0 / 501248.0);

  ASSERT_EQ(f.last_pool().size(), 1u);
  EXPECT_EQ(f.last_pool().at(0).cached_free, 1000u);
  const std::vector<FragmentationPoint> series = f.series();
  ASSERT_EQ(series.size(), 1u);  // both samples fall in the first 1 ms bucket
  EXPECT_EQ(series[0].t, 6u);
  EXPECT_DOUBLE_EQ(series[0].cached_free_scattered, 0.9);  // the bucket's maximum: 1 - 100/1000
  EXPECT_EQ(series[0].inactive_split_bytes, 4096u);
}

// The figure behind `check --max-fragmentation`: the most allocated while
// reserved stood at its peak, against that peak. What was allocated at an
// earlier, lower peak does not count, nor do allocations that rise only after
// reserved has fallen below its peak (here an empty segment given back);
// those that rise while it still stands there do.
TEST(Fragmentation, AtPeakReservedCountsOnlyWhatWasAllocatedWhileReservedStoodAtItsPeak) {
  constexpr std::uint64_t MiB = 1 << 20;
  {
    Analysis analysis;
    testing::EventFeeder feed(analysis);
    feed.segment_alloc(1, 0x10000000, 9 * MiB);
    feed.alloc(2, 0x10000000, 8 * MiB);  // 8 MiB of the 9 MiB peak so far
    feed.free(3, 0x10000000);
    feed.alloc(4, 0x10000000, 1 * MiB);
    feed.segment_alloc(5, 0x20000000, 1 * MiB);  // the peak: 10 MiB reserved, 1 MiB allocated
    feed.segment_free(6, 0x20000000, 1 * MiB);   // never used, given back: 9 MiB
    feed.alloc(7, 0x10100000, 8 * MiB);          // 9 MiB allocated, below the peak
    const MemoryTotals& total = analysis.total();
    EXPECT_EQ(total.reserved.peak, 10 * MiB);
    EXPECT_EQ(total.allocated.peak, 9 * MiB);
    EXPECT_EQ(total.allocated_at_reserved_peak, 1 * MiB);
    EXPECT_DOUBLE_EQ(detail::fragmentation_at_peak_reserved(total), 0.9);
    EXPECT_DOUBLE_EQ(detail::fragmentation_at_peak_reserved(analysis.devices().at(0).memory), 0.9);
  }
  {
    // Reserved never falls: what is allocated later, at the same peak, counts.
    Analysis analysis;
    testing::EventFeeder feed(analysis);
    feed.segment_alloc(1, 0x10000000, 10 * MiB);  // the peak, 0 allocated
    feed.alloc(2, 0x10000000, 1 * MiB);
    feed.alloc(3, 0x10100000, 8 * MiB);
    EXPECT_EQ(analysis.total().allocated_at_reserved_peak, 9 * MiB);
    EXPECT_DOUBLE_EQ(detail::fragmentation_at_peak_reserved(analysis.total()), 0.1);
  }
}

TEST(Fragmentation, FreshSegmentBeforeItsAllocationIsNotTheWorstMoment) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.segment_alloc(1, 0x100000, 20 << 20);
  feed.alloc(2, 0x100000, 19 << 20);
  feed.free(3, 0x100000);
  feed.segment_free(4, 0x100000, 20 << 20);
  const FragmentationMoment& w = analysis.fragmentation().worst().reserved_unused;
  ASSERT_TRUE(w.seen);
  EXPECT_EQ(w.bytes, 1u << 20);
  EXPECT_EQ(w.t, 2u);
}

TEST(Fragmentation, SeriesStaysBoundedAndKeepsEachBucketsMaximum) {
  FragmentationTracker f;
  for (std::uint64_t i = 0; i < 100000; ++i) {
    const std::uint64_t largest = i == 54321 ? 1 : 90;  // one very scattered moment
    f.on_pool(0, PoolSample{i * 1000000, 50, 100, 100, largest, 0}, 0, 0);
  }
  const std::vector<FragmentationPoint> series = f.series();
  EXPECT_LE(series.size(), FragmentationTracker::kMaxSeriesPoints);
  EXPECT_GE(series.size(), FragmentationTracker::kMaxSeriesPoints / 2);
  double highest = 0;
  for (const FragmentationPoint& p : series) {
    highest = std::max(highest, p.cached_free_scattered);
    EXPECT_DOUBLE_EQ(p.reserved_unused, 0.5);
  }
  EXPECT_DOUBLE_EQ(highest, 0.99);
  for (std::size_t i = 1; i < series.size(); ++i) EXPECT_LT(series[i - 1].t, series[i].t);
}

TEST(Fragmentation, RatiosOfNothingAreZero) {
  EXPECT_EQ(ratio_unused(0, 0), 0.0);
  EXPECT_EQ(ratio_unused(10, 5), 0.0);
  EXPECT_DOUBLE_EQ(ratio_unused(1, 4), 0.75);
}

}  // namespace
}  // namespace cumemtrace::analyzer
