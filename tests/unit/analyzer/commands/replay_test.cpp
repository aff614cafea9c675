// The replay engine on small hand-written traces, with PyTorch's policy
// (`--pool-conf pytorch`), whose numbers follow from its documented rules:
// sizes round to 512 B; requests up to 1 MiB come from 2 MiB segments, up
// to 10 MiB from 20 MiB segments, larger ones get a segment of their size
// rounded to 2 MiB; a cudaFree'd block waits for a synchronisation, a block
// freed in stream order is reusable at once on its stream.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "commands/replay.h"
#include "commands/trace_text.h"

namespace cumemtrace::analyzer {
namespace {

using namespace cumemtrace::analyzer::testing;
using testing::KiB;
using testing::MiB;

ReplayOptions pytorch(std::optional<std::size_t> capacity = {}) {
  ReplayOptions o;
  o.config = parse_replay_pool_conf("pytorch").config;
  o.capacity = capacity;
  return o;
}

TEST(Replay, SegmentSizesAndReuseFollowThePolicy) {
  TempDir dir;
  const ReplayTrace trace = TraceText()
                                .alloc(0x1000, 1000)      // small: a 2 MiB segment, block 1 KiB
                                .alloc(0x2000, 3 * MiB)   // mid: a 20 MiB segment
                                .alloc(0x3000, 17 * MiB)  // large, but the rest of that segment fits
                                .free(0x2000, 3 * MiB)    // pending until a synchronisation
                                .alloc(0x4000, 3 * MiB)   // reuses it after one synchronise
                                .load(dir);
  EXPECT_EQ(trace.allocs, 4u);
  EXPECT_EQ(trace.frees, 1u);
  const ReplayResult r = replay(trace, pytorch());
  EXPECT_EQ(r.peak_reserved, 22 * MiB);
  EXPECT_EQ(r.peak_allocated, 1000 + 20 * MiB);
  EXPECT_EQ(r.peak_allocated_blocks, 1 * KiB + 20 * MiB);
  EXPECT_EQ(r.ooms, 0u);
  EXPECT_EQ(r.upstream_allocs, 2u);
  EXPECT_EQ(r.synchronizes, 0u) << "the replayed device is ordered, never waited for";
  EXPECT_EQ(r.orderings, 1u);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].end.reserved, 22 * MiB);
  EXPECT_EQ(r.devices[0].end.requested, 1000 + 20 * MiB);
  // At the peak (the 20 MiB segment's arrival) 3 MiB of it was in use.
  EXPECT_NEAR(r.at_peak.unused_reserved, 1.0 - (1.0 * KiB + 3.0 * MiB) / (22.0 * MiB), 1e-9);
  EXPECT_NEAR(r.at_end.unused_reserved, 1.0 - (1.0 * KiB + 20.0 * MiB) / (22.0 * MiB), 1e-9);
  EXPECT_NEAR(r.at_end.rounding_waste, 1.0 - (1000.0 + 20.0 * MiB) / (1.0 * KiB + 20.0 * MiB), 1e-9);
}

// The program's steps are its most frequent mark (numbers folded), and what
// the pool asked of the device is counted over the steps after the first
// quarter: here the first of four steps makes the pool's only segment.
TEST(Replay, StepsAreTheMostFrequentMarkAndTheSteadyOnesAreCounted) {
  TempDir dir;
  TraceText text;
  text.mark("epoch 0");
  for (int step = 0; step < 4; ++step) {
    text.mark("step " + std::to_string(step), "push").alloc(0x1000, 3 * MiB, 0, 0x7).free(0x1000, 3 * MiB, 0, 0x7);
    text.launch(0x6600).launch(0x6700);  // graph launches, the most frequent marks, begin no step either
    text.mark("step " + std::to_string(step), "pop");  // a range's end begins no step
    if (step == 2) text.mark("epoch 1");
  }
  const ReplayTrace trace = text.load(dir);
  EXPECT_EQ(trace.step_mark, "step #");
  EXPECT_EQ(trace.step_starts, (std::vector<std::size_t>{0, 2, 4, 6}));
  const ReplayResult r = replay(trace, ReplayOptions{});
  EXPECT_EQ(r.steady.steps, 4u);
  EXPECT_EQ(r.steady.steady, 3u);
  EXPECT_EQ(r.upstream_allocs, 1u);
  EXPECT_EQ(r.steady.upstream_allocs, 0u) << "the segment came in the warm-up step";
  EXPECT_EQ(r.steady.upstream_frees, 0u);
  EXPECT_EQ(r.steady.synchronizes, 0u);

  // Fewer than three of any mark: no steps.
  const ReplayTrace few = TraceText().mark("step 0").alloc(0x1000, 1000).mark("step 1").load(dir, "few.jsonl");
  EXPECT_TRUE(few.step_starts.empty());
  EXPECT_EQ(replay(few, ReplayOptions{}).steady.steps, 0u);
}

// expandable_page_size_mb: the replayed device maps whole pages of that size
// (one handle each), as the preload's driver upstream does.
TEST(Replay, ExpandablePagesHaveTheConfiguredSize) {
  TempDir dir;
  const ReplayTrace trace = TraceText().alloc(0x1000, 3 * MiB).alloc(0x2000, 6 * MiB).load(dir);
  for (const auto& [conf, reserved] : {std::pair<const char*, std::size_t>{"", 10 * MiB},
                                       {"expandable_page_size_mb:8", 16 * MiB},
                                       {"expandable_page_size_mb:5", 12 * MiB}}) {
    ReplayOptions o;
    o.config = parse_replay_pool_conf(conf).config;
    const ReplayResult r = replay(trace, o);
    // 3 MiB + 6 MiB, contiguous in one range: 10 MiB of 2 MiB pages, 16 of
    // 8 MiB, and 5 MiB rounds up to the 2 MiB granularity: 12 of 6 MiB.
    EXPECT_EQ(r.peak_reserved, reserved) << conf;
  }
}

TEST(Replay, StreamOrderedFreesAreReusableAtOnceOnTheirStream) {
  TempDir dir;
  const std::uint64_t s = 0x51;
  const ReplayTrace trace = TraceText()
                                .alloc(0x1000, 4 * MiB, 0, s)
                                .free(0x1000, 4 * MiB, 0, s)
                                .alloc(0x1000, 4 * MiB, 0, s)
                                .free(0x1000, 4 * MiB, 0, s)
                                .alloc(0x2000, 8 * MiB, 0, s)
                                .load(dir);
  const ReplayResult r = replay(trace, pytorch());
  EXPECT_EQ(r.peak_reserved, 20 * MiB);
  EXPECT_EQ(r.upstream_allocs, 1u);
  EXPECT_EQ(r.synchronizes, 0u);
  EXPECT_EQ(r.peak_allocated, 8 * MiB);
}

TEST(Replay, CapacityMakesOutOfMemoryAndFreesOfFailuresAreSkipped) {
  TempDir dir;
  const ReplayTrace trace = TraceText()
                                .device(0, 16 * MiB)
                                .alloc(0x1000, 1000)
                                .alloc(0x2000, 3 * MiB)  // wants a 20 MiB segment: no room
                                .free(0x2000, 3 * MiB)
                                .alloc(0x3000, 12 * MiB)  // a 12 MiB segment fits
                                .load(dir);
  // The device event's total is the capacity unless one is given.
  const ReplayResult r = replay(trace, pytorch());
  EXPECT_EQ(r.devices[0].capacity, 16 * MiB);
  EXPECT_EQ(r.ooms, 1u);
  EXPECT_EQ(r.frees_of_failed, 1u);
  EXPECT_EQ(r.peak_reserved, 14 * MiB);
  EXPECT_EQ(r.peak_allocated, 1000 + 12 * MiB);

  const ReplayResult roomy = replay(trace, pytorch(64 * MiB));
  EXPECT_EQ(roomy.ooms, 0u);
  EXPECT_EQ(roomy.peak_reserved, 22 * MiB);  // the 12 MiB fits in the 20 MiB segment's 17 MiB
}

TEST(Replay, MinCapacityIsTheSmallestDeviceThatRuns) {
  TempDir dir;
  const ReplayTrace trace = TraceText()
                                .alloc(0x1000, 1000)
                                .alloc(0x2000, 3 * MiB)
                                .load(dir);
  // PyTorch's policy insists on a 20 MiB segment for 3 MiB: 2 + 20 MiB.
  const MinCapacity m = find_min_capacity(trace, pytorch().config);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.capacity, 22 * MiB);
  EXPECT_EQ(m.peak_live, 1000 + 3 * MiB);
  EXPECT_GE(m.replays, 3u);
  EXPECT_EQ(replay(trace, pytorch(22 * MiB)).ooms, 0u);
  EXPECT_EQ(replay(trace, pytorch(20 * MiB)).ooms, 1u);
}

TEST(Replay, MinCapacityWithReleaseOfCachedSegments) {
  TempDir dir;
  // 30 MiB live, freed, then 40 MiB: on a device of 40 MiB the pool must
  // give the cached 30 MiB segment back before it can grow.
  const ReplayTrace trace = TraceText()
                                .alloc(0x1000, 30 * MiB)
                                .free(0x1000, 30 * MiB)
                                .alloc(0x2000, 40 * MiB)
                                .load(dir);
  EXPECT_EQ(replay(trace, pytorch()).peak_reserved, 70 * MiB);
  const MinCapacity m = find_min_capacity(trace, pytorch().config);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.capacity, 40 * MiB);
  const ReplayResult tight = replay(trace, pytorch(40 * MiB));
  EXPECT_EQ(tight.ooms, 0u);
  EXPECT_EQ(tight.peak_reserved, 40 * MiB);
  EXPECT_EQ(tight.upstream_frees, 1u);
}

TEST(Replay, DevicesArePooledSeparatelyAndPeaksAddUp) {
  TempDir dir;
  const ReplayTrace trace = TraceText()
                                .alloc(0x1000, 30 * MiB, 0)
                                .alloc(0x9000, 40 * MiB, 1)
                                .free(0x1000, 30 * MiB, 0)
                                .alloc(0x2000, 30 * MiB, 1)
                                .load(dir);
  const ReplayResult r = replay(trace, pytorch());
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[0].peak_reserved, 30 * MiB);
  EXPECT_EQ(r.devices[1].peak_reserved, 70 * MiB);
  EXPECT_EQ(r.peak_reserved, 100 * MiB);  // device 0's segment stays cached
  EXPECT_EQ(r.peak_allocated, 70 * MiB);
  EXPECT_EQ(r.devices[1].peak_allocated, 70 * MiB);
}

TEST(Replay, LoadingSkipsWhatIsNotDevicePoolMemory) {
  TempDir dir;
  const ReplayTrace trace = TraceText()
                                .segment(0x7000000, 2 * MiB)  // the recording allocator's, not replayed
                                .alloc(0x1000, 4096)
                                .alloc(0x5000, 1 * MiB, 0, {}, "managed")
                                .free(0x5000, 1 * MiB, 0, {}, "managed")
                                .free(0xdead, 64)         // never allocated
                                .alloc(0x1000, 8192)      // its previous free was lost
                                .free(0x1000, 8192)
                                .load(dir);
  EXPECT_EQ(trace.allocs, 2u);
  EXPECT_EQ(trace.frees, 1u);
  EXPECT_EQ(trace.unknown_frees, 1u);
  EXPECT_EQ(trace.lost_frees, 1u);
  EXPECT_EQ(trace.skipped_kind, 2u);
  EXPECT_EQ(trace.trace_peak_reserved, 2 * MiB);
  EXPECT_EQ(trace.slots, 1u) << "slots are reused";
  const ReplayResult r = replay(trace, pytorch());
  EXPECT_EQ(r.peak_allocated, 8192u);
  EXPECT_EQ(r.invalid_frees, 0u);
  EXPECT_EQ(r.devices[0].end.live_blocks, 0u);
}

TEST(Replay, ParsesSizesAndPoolSettings) {
  EXPECT_EQ(parse_capacity("4096"), 4096u);
  EXPECT_EQ(parse_capacity("80GiB"), std::size_t{80} << 30);
  EXPECT_EQ(parse_capacity(" 512 MiB "), std::size_t{512} << 20);
  EXPECT_EQ(parse_capacity("1.5g"), std::size_t{3} << 29);
  EXPECT_EQ(parse_capacity("2GB"), 2'000'000'000u);
  EXPECT_EQ(parse_capacity("unlimited"), pool::kUnlimited);
  EXPECT_EQ(parse_capacity("lots"), std::nullopt);
  EXPECT_EQ(parse_capacity("12 parsecs"), std::nullopt);
  EXPECT_EQ(parse_capacity("1e30"), std::nullopt);
  EXPECT_EQ(parse_capacity("99999999999TiB"), std::nullopt);

  EXPECT_TRUE(parse_replay_pool_conf("pytorch").ok());
  EXPECT_TRUE(parse_replay_pool_conf("").ok());
  EXPECT_EQ(parse_replay_pool_conf("max_split_size_mb:128").config.max_split_size, std::size_t{128} << 20);
  EXPECT_FALSE(parse_replay_pool_conf("no_such_key:1").ok());
}

// `report` builds its replay in its own pass, up to a limit: past it only
// the count of allocations goes on, and nothing is left to replay.
TEST(Replay, TheBuilderKeepsOnlyTheCountPastItsLimit) {
  TempDir dir;
  TraceText t;
  for (std::uint64_t i = 0; i < 5; ++i) t.alloc(0x10000 * (i + 1), 4096).free(0x10000 * (i + 1), 4096);
  write_file(dir / "t.jsonl", t.text());
  auto build = [&](std::uint64_t limit) {
    TraceReader reader(dir / "t.jsonl");
    ReplayTraceBuilder builder(dir / "t.jsonl");
    builder.set_allocation_limit(limit);
    while (const TraceEvent* e = reader.next()) builder.consume(*e);
    EXPECT_EQ(builder.over_limit(), limit < 5);
    return builder.finish(reader, 0, 0);
  };
  const ReplayTrace whole = build(5);
  EXPECT_EQ(whole.allocs, 5u);
  EXPECT_EQ(whole.ops.size(), 10u);
  const ReplayTrace cut = build(3);
  EXPECT_EQ(cut.allocs, 5u);
  EXPECT_TRUE(cut.ops.empty());
}

TEST(ReplayCli, BadArgumentsAreUsageErrors) {
  TempDir dir;
  TraceText().alloc(0x1000, 4096).load(dir);
  CommandResult ok = run_command({cli_path(), "replay", dir / "t.jsonl", "--pool-conf", "pytorch"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("peak reserved:   2.00 MiB"), std::string::npos) << ok.out;
  CommandResult conf = run_command({cli_path(), "replay", dir / "t.jsonl", "--pool-conf", "no_such_key:1"});
  EXPECT_EQ(conf.exit_code, 2);
  EXPECT_EQ(conf.err.rfind("cumemtrace: --pool-conf: ", 0), 0u) << conf.err;
  CommandResult cap = run_command({cli_path(), "replay", dir / "t.jsonl", "--capacity", "lots"});
  EXPECT_EQ(cap.exit_code, 2);
  EXPECT_NE(cap.err.find("'lots' is not a size"), std::string::npos) << cap.err;
  // Given empty (an unset shell variable): an error, not the trace's own capacity.
  CommandResult empty_cap = run_command({cli_path(), "replay", dir / "t.jsonl", "--capacity", ""});
  EXPECT_EQ(empty_cap.exit_code, 2);
  EXPECT_EQ(empty_cap.err, "cumemtrace: --capacity: '' is not a size (e.g. 80GiB, 512MiB, 4096, unlimited)\n");
  CommandResult missing = run_command({cli_path(), "replay", dir / "absent.jsonl"});
  EXPECT_EQ(missing.exit_code, 2);
}

}  // namespace
}  // namespace cumemtrace::analyzer
