// Growth leaks: iterations from marks or from a detected period, a loop that
// keeps one tensor per step (flagged) and steady-state loops (not flagged).
#include <gtest/gtest.h>

#include "event_feeder.h"
#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer {
namespace {

constexpr std::uint64_t kKeptStack = 3;
constexpr std::uint64_t kKeptBytes = 4096;

// A training loop: per step, activations and gradients go up and down; with
// `leak`, one small tensor per step is kept (appended to a list, say).
class TrainingLoop {
 public:
  explicit TrainingLoop(Analysis& analysis) : feed_(analysis) {}

  void warm_up() {  // model weights, allocated once and kept
    for (std::uint64_t i = 0; i < 10; ++i) feed_.alloc(++t_, next_ptr(), (i + 1) * 100000, /*stack=*/5);
  }

  void steps(int count, bool marks, bool leak) {
    for (int i = 0; i < count; ++i) {
      if (marks) feed_.push(++t_, "step " + std::to_string(step_));
      const std::uint64_t activations = next_ptr(), grads = next_ptr(), workspace = next_ptr();
      feed_.alloc(++t_, activations, 1 << 20, /*stack=*/1);
      feed_.alloc(++t_, grads, 256 << 10, /*stack=*/2);
      feed_.free(++t_, activations);
      feed_.alloc(++t_, workspace, 64 << 10, /*stack=*/4);
      feed_.free(++t_, grads);
      feed_.free(++t_, workspace);
      if (leak) feed_.alloc(++t_, next_ptr(), kKeptBytes, kKeptStack);
      if (marks) feed_.pop(++t_, "step " + std::to_string(step_));
      ++step_;
    }
  }

  testing::EventFeeder& feed() { return feed_; }
  std::uint64_t next_ptr() { return ptr_ += 0x100000; }
  std::uint64_t tick() { return ++t_; }

 private:
  testing::EventFeeder feed_;
  std::uint64_t t_ = 0;
  std::uint64_t ptr_ = 0x7f0000000000;
  int step_ = 1;
};

TEST(Growth, LoopKeepingOneTensorPerStepIsFlaggedWithMarks) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  loop.warm_up();
  loop.steps(8, /*marks=*/true, /*leak=*/true);
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks);
  EXPECT_EQ(r.iterations.mark, "step #");
  EXPECT_EQ(r.iterations.count, 8u);
  ASSERT_EQ(r.leaks.size(), 1u);
  const GrowthLeak& g = r.leaks[0];
  EXPECT_EQ(g.stack, kKeptStack);
  EXPECT_EQ(g.bytes_per_iteration, kKeptBytes);
  EXPECT_EQ(g.iterations, 7u);  // 8 step starts: 0, 4096, ..., 7 * 4096
  EXPECT_EQ(g.first_live_bytes, 0u);
  EXPECT_EQ(g.last_live_bytes, 7 * kKeptBytes);
  EXPECT_EQ(g.rising_iterations, 7u);
  EXPECT_EQ(g.first_iteration, 0u);
}

TEST(Growth, SteadyStateLoopWithMarksIsNotFlagged) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  loop.warm_up();
  loop.steps(20, /*marks=*/true, /*leak=*/false);
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks);
  EXPECT_EQ(r.iterations.count, 20u);
  EXPECT_TRUE(r.leaks.empty());
}

TEST(Growth, WarmUpThatPlateausAndSitesThatRiseAndFallAreNotFlagged) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  std::vector<std::uint64_t> accumulated;
  for (int step = 0; step < 24; ++step) {
    feed.push(loop.tick(), "step " + std::to_string(step));
    if (step < 3) feed.alloc(loop.tick(), loop.next_ptr(), 1 << 20, /*stack=*/7);  // a cache that fills, then stays
    // Gradient accumulation: one buffer more each step, all freed every 4th.
    accumulated.push_back(loop.next_ptr());
    feed.alloc(loop.tick(), accumulated.back(), 8192, /*stack=*/8);
    if (step % 4 == 3) {
      for (std::uint64_t p : accumulated) feed.free(loop.tick(), p);
      accumulated.clear();
    }
    feed.pop(loop.tick(), "step " + std::to_string(step));
  }
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.count, 24u);
  EXPECT_TRUE(r.leaks.empty()) << "flagged stack " << r.leaks.front().stack;
}

TEST(Growth, LeakEveryOtherStepIsFlagged) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  for (int step = 0; step < 12; ++step) {
    feed.mark(loop.tick(), "iteration", "instant");
    if (step % 2 == 1) feed.alloc(loop.tick(), loop.next_ptr(), 1000, /*stack=*/9);
  }
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks);
  EXPECT_EQ(r.iterations.mark, "iteration");
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].stack, 9u);
  EXPECT_EQ(r.leaks[0].iterations, 10u);  // from the first rise (start of step 2) to the start of step 11
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, 500u);
  EXPECT_EQ(r.leaks[0].last_live_bytes, 5000u);
}

TEST(Growth, LeakEveryTenthStepIsFlaggedButAWarmUpThatStopsIsNot) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  for (int step = 0; step < 100; ++step) {
    feed.push(loop.tick(), "step " + std::to_string(step));
    if (step % 10 == 5) feed.alloc(loop.tick(), loop.next_ptr(), 1000, /*stack=*/9);  // slow leak
    if (step >= 10 && step < 20) feed.alloc(loop.tick(), loop.next_ptr(), 1000, /*stack=*/7);  // fills, stops
    feed.pop(loop.tick(), "step " + std::to_string(step));
  }
  const GrowthResult r = analysis.growth();
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].stack, 9u);
  EXPECT_EQ(r.leaks[0].rising_iterations, 10u);
  EXPECT_EQ(r.leaks[0].iterations, 94u);  // from the start of step 5 (before the first rise) to that of step 99
  EXPECT_EQ(r.leaks[0].last_live_bytes, 10000u);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, 106u);  // 10000 / 94, rounded
}

TEST(Growth, LoopKeepingOneTensorPerStepIsFlaggedWithoutMarks) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  loop.warm_up();
  loop.steps(12, /*marks=*/false, /*leak=*/true);
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::period);
  EXPECT_EQ(r.iterations.period_allocs, 4u);  // activations, grads, workspace, the kept tensor
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].stack, kKeptStack);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, kKeptBytes);
  EXPECT_GE(r.leaks[0].iterations, 10u);
}

TEST(Growth, SteadyStateLoopWithoutMarksIsNotFlagged) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  loop.warm_up();
  loop.steps(30, /*marks=*/false, /*leak=*/false);
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::period);
  EXPECT_EQ(r.iterations.period_allocs, 3u);
  EXPECT_GE(r.iterations.count, 29u);
  EXPECT_TRUE(r.leaks.empty());
}

TEST(Growth, PeriodFoundInTheFirstWindowKeepsCountingAfterIt) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  loop.warm_up();
  loop.steps(20000, /*marks=*/false, /*leak=*/true);  // 80,000 allocations: past the detection window
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::period);
  EXPECT_EQ(r.iterations.period_allocs, 4u);
  EXPECT_GE(r.iterations.count, 19999u);
  EXPECT_LE(r.iterations.count, 20001u);
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].stack, kKeptStack);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, kKeptBytes);
  EXPECT_GE(r.leaks[0].iterations, 19998u);
  EXPECT_EQ(r.leaks[0].last_live_bytes - r.leaks[0].first_live_bytes, r.leaks[0].iterations * kKeptBytes);
}

TEST(Growth, LoopThatStartsAfterALongWarmUpIsFoundInALaterWindow) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  // 70,000 allocations of distinct sizes: no period in the first window.
  for (std::uint64_t i = 0; i < 70000; ++i) {
    const std::uint64_t p = loop.next_ptr();
    feed.alloc(loop.tick(), p, 1000 + i, /*stack=*/6);
    feed.free(loop.tick(), p);
  }
  loop.steps(20, /*marks=*/false, /*leak=*/true);
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::period);
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].stack, kKeptStack);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, kKeptBytes);
}

TEST(Growth, TheMostFrequentMarkDelimitsIterations) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  for (int epoch = 0; epoch < 3; ++epoch) {
    feed.push(loop.tick(), "epoch " + std::to_string(epoch));
    for (int step = 0; step < 4; ++step) {
      feed.push(loop.tick(), "step " + std::to_string(epoch * 4 + step));
      feed.push(loop.tick(), "forward");
      feed.alloc(loop.tick(), loop.next_ptr(), 100, /*stack=*/1);
      feed.pop(loop.tick(), "forward");
      feed.pop(loop.tick(), "step " + std::to_string(epoch * 4 + step));
    }
    feed.pop(loop.tick(), "epoch " + std::to_string(epoch));
  }
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks);
  EXPECT_EQ(r.iterations.mark, "step #");  // as frequent as "forward", and seen first
  EXPECT_EQ(r.iterations.count, 12u);
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, 100u);
}

// Marks inside a step that a library makes (CUB's NVTX ranges, seen in a
// real PyTorch run) or that repeat their numbers (one per layer) are more
// frequent than the step's, and still do not delimit iterations: the step's
// number counts up.
TEST(Growth, ACountingMarkBeatsMoreFrequentRangesInsideIt) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  for (int step = 0; step < 6; ++step) {
    feed.push(loop.tick(), "sample " + std::to_string(step));
    for (int layer = 0; layer < 4; ++layer) {
      feed.push(loop.tick(), "layer " + std::to_string(layer));
      for (int sort = 0; sort < 3; ++sort) {
        feed.push(loop.tick(), "cub::DeviceRadixSort::SortPairs");
        const std::uint64_t scratch = loop.next_ptr();
        feed.alloc(loop.tick(), scratch, 4096, /*stack=*/7);
        feed.free(loop.tick(), scratch);
        feed.pop(loop.tick(), "cub::DeviceRadixSort::SortPairs");
      }
      feed.pop(loop.tick(), "layer " + std::to_string(layer));
    }
    feed.alloc(loop.tick(), loop.next_ptr(), 100, /*stack=*/1);  // kept: one per step
    feed.pop(loop.tick(), "sample " + std::to_string(step));
  }
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks);
  EXPECT_EQ(r.iterations.mark, "sample #");
  EXPECT_EQ(r.iterations.count, 6u);
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, 100u);
}

// Ranges named after C++ functions delimit iterations only when there is
// nothing else (here PyTorch's emit_nvtx ranges, whose seq counts up).
TEST(Growth, OperationRangesDelimitIterationsOnlyWithoutOtherMarks) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  for (int op = 0; op < 5; ++op) {
    const std::string name = "aten::mm, seq = " + std::to_string(op);
    feed.push(loop.tick(), name);
    feed.alloc(loop.tick(), loop.next_ptr(), 100, /*stack=*/1);
    feed.pop(loop.tick(), name);
  }
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks);
  EXPECT_EQ(r.iterations.mark, "aten::mm, seq = #");
  EXPECT_EQ(r.iterations.count, 5u);
}

// A counted outer loop with an unnumbered step inside, far more frequent:
// the step delimits iterations (the epochs would be too few to see growth).
TEST(Growth, AFarMoreFrequentNameBeatsACountedOuterLoop) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  constexpr int kStepsPerEpoch = static_cast<int>(ThreadGrowth::kFarMoreFrequent);
  for (int epoch = 0; epoch < 3; ++epoch) {
    feed.push(loop.tick(), "epoch " + std::to_string(epoch));
    for (int step = 0; step < kStepsPerEpoch; ++step) {
      feed.push(loop.tick(), "train step");
      feed.alloc(loop.tick(), loop.next_ptr(), 100, /*stack=*/1);
      feed.pop(loop.tick(), "train step");
    }
    feed.pop(loop.tick(), "epoch " + std::to_string(epoch));
  }
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks);
  EXPECT_EQ(r.iterations.mark, "train step");
  EXPECT_EQ(r.iterations.count, 3u * kStepsPerEpoch);
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, 100u);
}

// --iteration-marker NAME: only that mark delimits iterations, whichever
// the rules would choose; numbers and what follows NAME after a separator
// match anything.
TEST(Growth, TheIterationMarkerAloneDelimitsIterations) {
  const auto nested_loop = [](Analysis& analysis) {
    TrainingLoop loop(analysis);
    testing::EventFeeder& feed = loop.feed();
    for (int step = 0; step < 6; ++step) {
      feed.push(loop.tick(), "step " + std::to_string(step));
      for (int micro = 0; micro < 2; ++micro) {
        feed.push(loop.tick(), "microbatch");
        feed.alloc(loop.tick(), loop.next_ptr(), 100, /*stack=*/1);  // kept: one per microbatch
        feed.pop(loop.tick(), "microbatch");
      }
      feed.push(loop.tick(), "stepper");  // not "step"'s: a letter follows
      feed.pop(loop.tick(), "stepper");
      feed.pop(loop.tick(), "step " + std::to_string(step));
    }
  };
  Analysis by_rules;
  nested_loop(by_rules);
  EXPECT_EQ(by_rules.growth().iterations.mark, "step #");  // counts up
  EXPECT_TRUE(by_rules.growth().iterations.marker.empty());

  for (const char* marker : {"step", "step 1", "step #"}) {
    Analysis analysis;
    analysis.set_iteration_marker(marker);
    nested_loop(analysis);
    const GrowthResult r = analysis.growth();
    EXPECT_EQ(r.iterations.source, IterationInfo::Source::marks) << marker;
    EXPECT_EQ(r.iterations.mark, "step #") << marker;
    EXPECT_EQ(r.iterations.count, 6u) << marker;
    EXPECT_EQ(r.iterations.marker, marker);
    EXPECT_EQ(r.iterations.marker_count, 6u) << marker;
    ASSERT_EQ(r.leaks.size(), 1u) << marker;
    EXPECT_EQ(r.leaks[0].bytes_per_iteration, 200u) << marker;
  }

  Analysis by_microbatch;
  by_microbatch.set_iteration_marker("microbatch");
  nested_loop(by_microbatch);
  const GrowthResult r = by_microbatch.growth();
  EXPECT_EQ(r.iterations.mark, "microbatch");
  EXPECT_EQ(r.iterations.count, 12u);
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, 100u);
}

// A named marker that is missing, or too rare, leaves growth unassessed:
// no other mark and no period stands in for it.
TEST(Growth, AMissingIterationMarkerLeavesGrowthUnassessed) {
  Analysis periodic;
  periodic.set_iteration_marker("train_step");
  TrainingLoop loop(periodic);
  loop.steps(10, /*marks=*/true, /*leak=*/true);  // "step N" marks and a period: neither is "train_step"
  GrowthResult r = periodic.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::none);
  EXPECT_TRUE(r.leaks.empty());
  EXPECT_EQ(r.iterations.marker_count, 0u);
  EXPECT_EQ(unassessed_marker_reason(r.iterations.marker, r.iterations.marker_count),
            "no mark or NVTX range named 'train_step' (--iteration-marker)");

  Analysis twice;
  twice.set_iteration_marker("step");
  TrainingLoop two(twice);
  two.steps(2, /*marks=*/true, /*leak=*/true);
  r = twice.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::none);
  EXPECT_EQ(r.iterations.marker_count, 2u);
  EXPECT_EQ(unassessed_marker_reason(r.iterations.marker, r.iterations.marker_count),
            "the mark 'step' (--iteration-marker) was pushed 2 times, and iterations need 3");
}

TEST(Growth, MarksSeenTwiceFallBackToThePeriod) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  loop.feed().push(loop.tick(), "phase");
  loop.feed().pop(loop.tick(), "phase");
  loop.feed().push(loop.tick(), "phase");
  loop.steps(10, /*marks=*/false, /*leak=*/true);
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::period);
  EXPECT_EQ(r.leaks.size(), 1u);
}

TEST(Growth, LoopThatOnlyFillsMemoryIsNotAnIteration) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  testing::EventFeeder& feed = loop.feed();
  std::vector<std::uint64_t> buffers;
  for (int i = 0; i < 40; ++i) {  // a cache filled in a loop, freed at teardown
    buffers.push_back(loop.next_ptr());
    feed.alloc(loop.tick(), buffers.back(), 1 << 20, /*stack=*/1 + i % 2);
  }
  for (std::uint64_t p : buffers) feed.free(loop.tick(), p);
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::none);
  EXPECT_TRUE(r.leaks.empty());
}

TEST(Growth, NoMarksAndNoPeriodMeansNoIterations) {
  Analysis analysis;
  TrainingLoop loop(analysis);
  loop.warm_up();
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::none);
  EXPECT_EQ(r.iterations.count, 0u);
  EXPECT_TRUE(r.leaks.empty());
}

TEST(GrowthSeries, NoisySiteIsNotAGrowthLeak) {
  GrowthSeries s;
  const std::uint64_t values[] = {100, 300, 100, 300, 200, 400, 200, 300, 100, 300};
  for (std::uint64_t v : values) s.sample(v, 1);
  EXPECT_EQ(s.ups, 5u);
  EXPECT_EQ(s.downs, 4u);
  EXPECT_FALSE(s.is_growth_leak());
}

TEST(GrowthSeries, FlatBoundariesCountAsSteps) {
  GrowthSeries s;
  s.sample(0, 3);    // three boundaries at 0: not started
  s.sample(10, 1);   // first change
  s.sample(10, 4);   // four flat steps
  EXPECT_TRUE(s.started);
  EXPECT_EQ(s.start_boundary, 2u);
  EXPECT_EQ(s.steps, 5u);
  EXPECT_EQ(s.ups, 1u);
  EXPECT_EQ(s.seen, 8u);
  EXPECT_FALSE(s.is_growth_leak());  // a one-off
}

}  // namespace
}  // namespace cumemtrace::analyzer
