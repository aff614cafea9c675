// Mark ranges: nesting, peaks per range and the range each peak fell in,
// several threads, unbalanced and never-popped ranges.
#include <gtest/gtest.h>

#include "event_feeder.h"
#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer {
namespace {

class PhasesTest : public ::testing::Test {
 protected:
  const PhaseRecord& range(const std::vector<PhaseRecord>& ranges, const std::string& path) {
    for (const PhaseRecord& r : ranges) {
      if (r.path == path) return r;
    }
    ADD_FAILURE() << "no range " << path;
    static PhaseRecord none;
    return none;
  }

  Analysis analysis;
  testing::EventFeeder feed{analysis};
};

TEST_F(PhasesTest, NestedRangesGetPathsPeaksAndCounts) {
  feed.alloc(5, 0x10, 1000);  // before any range: 1000 live
  feed.push(10, "epoch 1");
  feed.alloc(11, 0x20, 100);   // 1100
  feed.push(12, "forward");
  feed.alloc(13, 0x30, 200);   // 1300: the peak
  feed.free(14, 0x30);         // 1100
  feed.pop(15, "forward");
  feed.push(16, "backward");
  feed.alloc(17, 0x40, 50);    // 1150
  feed.free(18, 0x40);
  feed.pop(19, "backward");
  feed.pop(20, "epoch 1");
  feed.alloc(21, 0x50, 250);   // 1350 outside any range: a new peak

  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].path, "epoch 1");  // push order
  EXPECT_EQ(ranges[1].path, "epoch 1/forward");
  EXPECT_EQ(ranges[2].path, "epoch 1/backward");
  const PhaseRecord& epoch = ranges[0];
  EXPECT_EQ(epoch.start_t, 10u);
  EXPECT_EQ(epoch.end_t, 20u);
  EXPECT_EQ(epoch.peak_allocated, 1300u);
  EXPECT_EQ(epoch.allocs, 3u);
  EXPECT_EQ(epoch.frees, 2u);
  EXPECT_EQ(ranges[1].peak_allocated, 1300u);
  EXPECT_EQ(ranges[1].allocs, 1u);
  EXPECT_EQ(ranges[1].frees, 1u);
  EXPECT_EQ(ranges[2].peak_allocated, 1150u);  // starts at 1100, never below what was live at push
  EXPECT_EQ(ranges[2].name, "backward");

  // The peak was set at t=21, outside every range.
  EXPECT_EQ(analysis.total().allocated.peak, 1350u);
  EXPECT_EQ(analysis.total().allocated_peak_phase.range, kNoRange);
  EXPECT_TRUE(analysis.total().allocated_peak_phase.path.empty());
}

TEST_F(PhasesTest, PeakRemembersTheInnermostRangeOpenWhenItWasSet) {
  feed.push(1, "step 41");
  feed.push(2, "backward");
  feed.alloc(3, 0x10, 500);
  feed.pop(4, "backward");
  feed.free(5, 0x10);
  feed.alloc(6, 0x20, 400);  // not a new peak: the phase stays
  feed.pop(7, "step 41");
  EXPECT_EQ(analysis.total().allocated_peak_phase.path, "step 41/backward");
  EXPECT_EQ(analysis.devices().at(0).memory.allocated_peak_phase.path, "step 41/backward");
}

TEST_F(PhasesTest, AnotherThreadsAllocationsFallInTheMostRecentOpenRange) {
  // PyTorch's backward allocates on autograd threads while the main thread
  // holds the mark.
  feed.push(1, "step 3", /*tid=*/100);
  feed.push(2, "backward", /*tid=*/100);
  feed.alloc(3, 0x10, 700, 0, 0, std::nullopt, /*tid=*/200);
  EXPECT_EQ(analysis.total().allocated_peak_phase.path, "step 3/backward");
  // A thread with its own range is placed in it.
  feed.push(4, "loader", /*tid=*/300);
  feed.alloc(5, 0x20, 100, 0, 0, std::nullopt, /*tid=*/100);
  EXPECT_EQ(analysis.total().allocated_peak_phase.path, "step 3/backward");
  feed.alloc(6, 0x30, 100, 0, 0, std::nullopt, /*tid=*/300);
  EXPECT_EQ(analysis.total().allocated_peak_phase.path, "loader");
  // Threads nest separately: "loader" is not inside "backward".
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[2].path, "loader");
  EXPECT_EQ(ranges[2].tid, 300u);
}

TEST_F(PhasesTest, ReservedPeakPhaseComesFromSegmentsWithoutThread) {
  feed.push(1, "init");
  feed.segment_alloc(2, 0x1000, 2 << 20);
  feed.pop(3, "init");
  feed.segment_alloc(4, 0x9000, 1 << 20);  // 3 MiB: the peak, outside any range
  feed.segment_free(5, 0x9000, 1 << 20);
  EXPECT_EQ(analysis.total().reserved.peak, 3u << 20);
  EXPECT_EQ(analysis.total().reserved_peak_phase.range, kNoRange);
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].peak_reserved, 2u << 20);
}

TEST_F(PhasesTest, UnbalancedPopsAreCountedAndIgnored) {
  feed.pop(1, "never pushed");
  feed.push(2, "a");
  feed.pop(3, "b");  // no open range named b on this thread
  feed.pop(4, "a", /*tid=*/2);  // a is open on thread 1, not 2
  EXPECT_EQ(analysis.phases().unbalanced_pops(), 3u);
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_FALSE(ranges[0].end_t.has_value());
}

TEST_F(PhasesTest, NamedPopClosesTheRangesOpenedInsideIt) {
  feed.push(1, "outer");
  feed.push(2, "inner");
  feed.alloc(3, 0x10, 64);
  feed.pop(4, "outer");  // inner was never popped: it ends with outer
  feed.alloc(5, 0x20, 64);
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].end_t, 4u);
  EXPECT_EQ(ranges[1].end_t, 4u);
  EXPECT_EQ(ranges[1].path, "outer/inner");
  EXPECT_EQ(ranges[1].peak_allocated, 64u);
  EXPECT_EQ(analysis.phases().unbalanced_pops(), 0u);
}

TEST_F(PhasesTest, UnnamedPopClosesTheInnermostRange) {
  feed.push(1, "outer");
  feed.push(2, "inner");
  feed.pop(3, "");  // nvtxRangePop carries no name
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_FALSE(ranges[0].end_t.has_value());
  EXPECT_EQ(ranges[1].end_t, 3u);
}

TEST_F(PhasesTest, NeverPoppedRangesReportFiguresUpToTheEnd) {
  feed.push(1, "train");
  feed.alloc(2, 0x10, 10);
  feed.alloc(3, 0x20, 20);
  feed.free(4, 0x10);
  feed.mark(5, "checkpoint", "instant");  // instants open no range
  feed.alloc(6, 0x30, 100);
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_FALSE(ranges[0].end_t.has_value());
  EXPECT_EQ(ranges[0].peak_allocated, 120u);
  EXPECT_EQ(ranges[0].allocs, 3u);
  EXPECT_EQ(ranges[0].frees, 1u);
  EXPECT_EQ(analysis.total().allocated_peak_phase.path, "train");
}

TEST_F(PhasesTest, GroupsFoldNumbersAndCoverRangesBeyondTheKeptRecords) {
  const std::uint64_t steps = PhaseTracker::kMaxPhaseRecords + 5;
  std::uint64_t t = 0;
  for (std::uint64_t i = 0; i < steps; ++i) {
    feed.push(++t, "step " + std::to_string(i));
    feed.push(++t, "forward");
    feed.alloc(++t, 0x10, i == steps - 2 ? 5000 : 100);  // the highest peak: a range not kept
    feed.free(++t, 0x10);
    feed.pop(++t, "forward");
    feed.pop(++t, "step " + std::to_string(i));
  }
  feed.push(++t, "step " + std::to_string(steps));  // open at the end
  EXPECT_EQ(analysis.phases().omitted_records(), 2 * steps - PhaseTracker::kMaxPhaseRecords);
  const std::vector<PhaseGroup> groups = analysis.phase_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].path, "step #");  // ties: the group whose range was pushed first
  EXPECT_EQ(groups[0].count, steps + 1);
  EXPECT_EQ(groups[0].highest.path, "step " + std::to_string(steps - 2));
  EXPECT_EQ(groups[0].highest.peak_allocated, 5000u);
  EXPECT_EQ(groups[1].path, "step #/forward");
  EXPECT_EQ(groups[1].count, steps);
  EXPECT_EQ(groups[1].highest.path, "step " + std::to_string(steps - 2) + "/forward");
  EXPECT_EQ(analysis.total().allocated_peak_phase.path, groups[1].highest.path);
}

TEST_F(PhasesTest, OpenRangesAreCappedAndClosedRecordsBounded) {
  for (std::size_t i = 0; i < PhaseTracker::kMaxOpenRanges + 5; ++i) feed.push(i + 1, "deep");
  EXPECT_EQ(analysis.phases().dropped_pushes(), 5u);
  EXPECT_EQ(analysis.phase_ranges().size(), PhaseTracker::kMaxOpenRanges);
}

}  // namespace
}  // namespace cumemtrace::analyzer
