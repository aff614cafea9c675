// The live view's text: fixed figures give exact frames, and the sampler
// takes the figures (and the report's site labels) from an analysis.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "event_feeder.h"
#include "render/live_view.h"

namespace cumemtrace::analyzer::detail {
namespace {

LiveFigures two_devices() {
  LiveFigures f;
  f.program = "train (pid 42)";
  f.trace = "/tmp/t.jsonl";
  f.state = "following";
  f.events = 1234;
  f.events_per_second = 99;
  f.t_ns = 12'340'000'000;
  f.devices = {LiveDevice{0, "H100", 3u << 20, 4u << 20, 1u << 30, 2u << 30, {0, 1, 2, 4, 8}},
               LiveDevice{1, "H100", 0, 0, 0, 0, {0, 0}}};
  f.total = LiveDevice{-1, "", 3u << 20, 4u << 20, 1u << 30, 2u << 30, {0, 1, 2, 4, 8}};
  f.live_sites = 3;
  f.top_sites = {LiveSite{"device_alloc \xE2\x86\x90 load_weights", 2u << 20, 2},
                 LiveSite{"device_alloc \xE2\x86\x90 forward", 1u << 20, 7}};
  f.iterations = "12 iterations, mark 'step #'";
  f.growth = {LiveGrowth{"keep_loss \xE2\x86\x90 main", "4.00 KiB", 11}};
  f.ooms = 1;
  f.last_oom = "1.00 GiB on device 0 (capacity) from f";
  f.errors = 2;
  f.errors_by_what = {{"double_free", 2}};
  return f;
}

TEST(LiveView, FrameText) {
  const std::vector<std::string> expected = {
      "cumemtrace  train (pid 42)  [following]  12.3 s, 1234 events, 99/s",
      "trace /tmp/t.jsonl",
      "dev     allocated         peak     reserved         peak  allocated over time",
      "0        3.00 MiB     1.00 GiB     4.00 MiB     1.00 GiB   \xE2\x96\x81\xE2\x96\x82\xE2\x96\x84\xE2\x96\x88",
      "1             0 B          0 B          0 B          0 B    ",
      "all      3.00 MiB     1.00 GiB     4.00 MiB     1.00 GiB   \xE2\x96\x81\xE2\x96\x82\xE2\x96\x84\xE2\x96\x88",
      "",
      "live now by call site (3 sites):",
      "      2.00 MiB        2  device_alloc \xE2\x86\x90 load_weights",
      "      1.00 MiB        7  device_alloc \xE2\x86\x90 forward",
      "",
      "growth: 1 site keeps more each iteration (12 iterations, mark 'step #'):",
      "  +4.00 KiB/iteration  keep_loss \xE2\x86\x90 main",
      "out of memory 1 (last: 1.00 GiB on device 0 (capacity) from f)   errors 2 (double_free 2)",
  };
  LiveFigures f = two_devices();
  f.devices[0].peak_reserved = 1u << 30;
  f.total.peak_reserved = 1u << 30;
  EXPECT_EQ(live_frame(f, 200, 40), expected);
}

TEST(LiveView, ShortTerminalDropsCallSitesFirstAndCutsWideLines) {
  const std::vector<std::string> frame = live_frame(two_devices(), 40, 9);
  ASSERT_EQ(frame.size(), 9u);
  EXPECT_EQ(frame[0], "cumemtrace  train (pid 42)  [following]\xE2\x80\xA6");  // 40 columns, the last an ellipsis
  EXPECT_EQ(frame[6], "");
  EXPECT_EQ(frame[7].substr(0, 8), "growth: ");
  EXPECT_EQ(frame[8].substr(0, 15), "out of memory 1");
  for (const std::string& line : frame) EXPECT_EQ(line.find("load_weights"), std::string::npos) << line;
}

TEST(LiveView, WaitingFrameSaysWhatItWaitsFor) {
  LiveFigures f;
  f.state = "waiting for t.jsonl to be created";
  EXPECT_EQ(live_frame(f, 80, 24), std::vector<std::string>{"cumemtrace  [waiting for t.jsonl to be created]"});
}

TEST(LiveView, SummaryLine) {
  EXPECT_EQ(live_line(two_devices()),
            "12.3 s, 1234 events: allocated 3.00 MiB (peak 1.00 GiB), reserved 4.00 MiB (peak 2.00 GiB), top site "
            "device_alloc \xE2\x86\x90 load_weights 2.00 MiB, 1 growth leak, 1 OOM, 2 errors [following]");
}

TEST(LiveView, SparklineScalesToItsMaximumAndKeepsTheLastValues) {
  EXPECT_EQ(sparkline({0, 1, 8, 4}, 10), " \xE2\x96\x81\xE2\x96\x88\xE2\x96\x84");
  EXPECT_EQ(sparkline({8, 8, 1, 2}, 2), "\xE2\x96\x84\xE2\x96\x88");  // 1 of 2: half
  EXPECT_EQ(sparkline({}, 5), "");
  EXPECT_EQ(sparkline({1, 2, 3}, 0), "");  // a terminal too narrow for one: ASan once caught a read past the end
}

TEST(LiveView, SamplerTakesLiveSitesGrowthAndHistory) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.alloc(10, 0x1000, 100, 0);
  feed.alloc(20, 0x2000, 300, 0);
  LiveSampler sampler(3);
  LiveFigures f;
  sampler.sample(analysis, 5, f);
  feed.free(30, 0x2000);
  sampler.sample(analysis, 5, f);
  ASSERT_EQ(f.devices.size(), 1u);
  EXPECT_EQ(f.devices[0].allocated, 100u);
  EXPECT_EQ(f.devices[0].peak_allocated, 400u);
  EXPECT_EQ(f.devices[0].history, (std::vector<std::uint64_t>{400, 100}));
  EXPECT_EQ(f.total.allocated, 100u);
  ASSERT_EQ(f.top_sites.size(), 1u);
  EXPECT_EQ(f.top_sites[0].label, std::string(kNoStackLabel));
  EXPECT_EQ(f.top_sites[0].bytes, 100u);
  EXPECT_EQ(f.top_sites[0].count, 1u);
  EXPECT_EQ(f.t_ns, 30u);
  for (int i = 0; i < 3; ++i) sampler.sample(analysis, 5, f);
  EXPECT_EQ(f.devices[0].history.size(), 3u);  // the history keeps its last values
}

// `top` and `run --live` are there to show which sites hold the memory: the
// largest first, and those cut by --top are the smallest.
TEST(LiveView, SamplerShowsTheSitesHoldingTheMostFirst) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.stack(1, {"small_buffer", "main"});
  feed.stack(2, {"weights", "main"});
  feed.stack(3, {"activations", "main"});
  feed.alloc(10, 0x1000, 100, 1);
  feed.alloc(20, 0x2000, 5000, 2);
  feed.alloc(30, 0x3000, 700, 3);
  LiveSampler sampler(3);
  LiveFigures f;
  sampler.sample(analysis, 2, f);
  EXPECT_EQ(f.live_sites, 3u);
  ASSERT_EQ(f.top_sites.size(), 2u);
  EXPECT_EQ(f.top_sites[0].bytes, 5000u);
  EXPECT_NE(f.top_sites[0].label.find("weights"), std::string::npos) << f.top_sites[0].label;
  EXPECT_EQ(f.top_sites[1].bytes, 700u);
  EXPECT_NE(f.top_sites[1].label.find("activations"), std::string::npos) << f.top_sites[1].label;
}

}  // namespace
}  // namespace cumemtrace::analyzer::detail
