// The raw-backtrace route of stack capture (what the preload uses): the
// recorder calls the backtrace itself and leaves out return addresses in
// cumemtrace's own code, wherever they appear, before the depth is applied;
// the route is resolved once, at the first capture.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "record/recorder.h"
#include "test_support.h"

using namespace cumemtrace::preload;
using cumemtrace::contract::Config;
using cumemtrace::testing::TempDir;
using nlohmann::json;

namespace {

constexpr std::uintptr_t kOwnBegin = 0x5000, kOwnEnd = 0x6000;

std::vector<std::uintptr_t> g_raw;  // what the fake backtrace returns, own frames included
int g_asked = 0;                    // the `max` it was last given
int g_resolved = 0;

int fake_backtrace(void** out, int max) {
  g_asked = max;
  int n = 0;
  for (; n < max && n < static_cast<int>(g_raw.size()); ++n) out[n] = reinterpret_cast<void*>(g_raw[n]);
  return n;
}

RawBacktraceRoute fake_route() {
  ++g_resolved;
  return {&fake_backtrace, kOwnBegin, kOwnEnd};
}

bool backtrace_device(int, DeviceDescription& out) {
  out.name = "Fake GPU";
  return true;
}

// The frames of every stack event, and the stack id of every alloc.
struct Recorded {
  std::vector<std::vector<std::string>> stacks;
  std::vector<std::uint64_t> alloc_stacks;
};

Recorded record(unsigned depth, const std::vector<std::vector<std::uintptr_t>>& raws) {
  TempDir dir;
  Config c;
  c.output_template = dir / "t.jsonl";
  c.stacks = depth;
  {
    Recorder r(c, &backtrace_device, StackPlatform{.raw_backtrace = &fake_route});
    std::uintptr_t ptr = 0x7f0000000000;
    for (const auto& raw : raws) {
      g_raw = raw;
      r.on_alloc({.api = "cudaMalloc", .dev = 0, .ptr = ptr, .size = 512});
      ptr += 0x200;
    }
    r.on_exit();
  }
  Recorded out;
  std::ifstream in(dir / "t.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json l = json::parse(line);
    if (l["ev"] == "stack") {
      std::vector<std::string> ips;
      for (const auto& f : l["frames"]) ips.push_back(f["ip"].get<std::string>());
      out.stacks.push_back(ips);
    } else if (l["ev"] == "alloc") {
      out.alloc_stacks.push_back(l["stack"].get<std::uint64_t>());
    }
  }
  return out;
}

TEST(StackRawBacktrace, OwnFramesAreLeftOutWhereverTheyAre) {
  g_resolved = 0;
  // Ours on top (the hook), and one in the middle: both go.
  const auto r = record(32, {{0x5010, 0x5ff8, 0x1001, 0x5000, 0x2002, 0x6000, 0x4fff}});
  ASSERT_EQ(r.stacks.size(), 1u);
  const std::vector<std::string> expected = {"0x1001", "0x2002", "0x6000", "0x4fff"};
  EXPECT_EQ(r.stacks[0], expected);
  EXPECT_EQ(r.alloc_stacks, std::vector<std::uint64_t>{1});
  EXPECT_EQ(g_resolved, 1);
}

TEST(StackRawBacktrace, DepthCountsOnlyTheApplicationsFrames) {
  std::vector<std::uintptr_t> raw = {0x5001, 0x5002, 0x5003};  // three of ours
  for (std::uintptr_t i = 1; i <= 10; ++i) raw.push_back(0x10000 * i);
  const auto r = record(4, {raw});
  ASSERT_EQ(r.stacks.size(), 1u);
  const std::vector<std::string> expected = {"0x10000", "0x20000", "0x30000", "0x40000"};
  EXPECT_EQ(r.stacks[0], expected);
  // Room asked for our frames on top of the depth: three fit in the first room.
  EXPECT_EQ(g_asked, static_cast<int>(4 + StackRecorder::kInitialOwnRoom));
}

// Walking frames only to drop them costs (about 50 ns each in a big process):
// the room asked for ours grows to what ours took, not to the whole allowance,
// and a capture whose application frames ours crowded out is walked again.
TEST(StackRawBacktrace, RoomForOwnFramesGrowsToWhatTheyTook) {
  constexpr std::size_t kOurs = StackRecorder::kInitialOwnRoom + 3;
  std::vector<std::uintptr_t> raw(kOurs, 0x5001);
  for (std::uintptr_t i = 1; i <= 10; ++i) raw.push_back(0x10000 * i);
  std::vector<int> asked;
  TempDir dir;
  Config c;
  c.output_template = dir / "t.jsonl";
  c.stacks = 4;
  std::vector<std::uint64_t> ids;
  {
    Recorder r(c, &backtrace_device, StackPlatform{.raw_backtrace = &fake_route});
    g_raw = raw;
    for (int i = 0; i < 3; ++i) {
      r.on_alloc({.api = "cudaMalloc", .dev = 0, .ptr = 0x7f0000000000u + 0x200u * i, .size = 512});
      asked.push_back(g_asked);
    }
    r.on_exit();
  }
  // The first capture asked twice (the second time with the whole
  // allowance); the next ones ask for the depth and our frames only.
  EXPECT_EQ(asked[0], static_cast<int>(4 + StackRecorder::kOwnFramesAllowance));
  EXPECT_EQ(asked[1], static_cast<int>(4 + kOurs));
  EXPECT_EQ(asked[2], static_cast<int>(4 + kOurs));
  std::ifstream in(dir / "t.jsonl");
  std::vector<std::vector<std::string>> stacks;
  for (std::string line; std::getline(in, line);) {
    const json l = json::parse(line);
    if (l["ev"] == "stack") {
      stacks.emplace_back();
      for (const auto& f : l["frames"]) stacks.back().push_back(f["ip"].get<std::string>());
    }
  }
  // All three are the one full-depth stack.
  const std::vector<std::vector<std::string>> expected = {{"0x10000", "0x20000", "0x30000", "0x40000"}};
  EXPECT_EQ(stacks, expected);
}

TEST(StackRawBacktrace, RepeatedStacksShareTheirIdAndOnlyOursMeansNone) {
  g_resolved = 0;
  const std::vector<std::uintptr_t> a = {0x5001, 0x1001, 0x2002}, b = {0x5002, 0x1001, 0x3003};
  const auto r = record(32, {a, b, a, {0x5001, 0x5002}, b});
  ASSERT_EQ(r.stacks.size(), 2u);
  EXPECT_EQ(r.alloc_stacks, (std::vector<std::uint64_t>{1, 2, 1, 0, 2}));
  EXPECT_EQ(g_resolved, 1);  // resolved once, at the first capture
}

TEST(StackRawBacktrace, NotResolvedWithoutACapture) {
  g_resolved = 0;
  const auto r = record(0, {{0x1001}});
  EXPECT_TRUE(r.stacks.empty());
  EXPECT_EQ(g_resolved, 0);
}


// The noting route (frame_walker::capture): the recorder keeps each stack's
// id in the note the walker hands it, takes the id back when the walker
// answers "noted" (without frames), and never takes a note another
// recorder made (a forked child's, whose ids are its own).
std::uint64_t g_note = 0;
std::vector<std::uint32_t> g_owners_asked;

cumemtrace::preload::frame_walker::Capture fake_noting(void** out, int max, std::uint32_t owner) {
  g_owners_asked.push_back(owner);
  if (g_note >> 32 == owner) return {cumemtrace::preload::frame_walker::kNoted, &g_note};
  return {fake_backtrace(out, max), &g_note};
}

RawBacktraceRoute fake_noting_route() { return {&fake_backtrace, kOwnBegin, kOwnEnd, &fake_noting}; }

TEST(StackRawBacktrace, ANotedStackIsTakenBackOnlyByTheRecorderThatNotedIt) {
  g_note = 0;
  g_owners_asked.clear();
  g_raw = {0x5001, 0x1001, 0x2002};
  TempDir dir;
  Config c;
  c.stacks = 8;
  std::vector<std::uint64_t> ids[2];
  for (int run = 0; run < 2; ++run) {
    c.output_template = dir / ("t" + std::to_string(run) + ".jsonl");
    Recorder r(c, &backtrace_device, StackPlatform{.raw_backtrace = &fake_noting_route});
    for (int i = 0; i < 3; ++i) {
      r.on_alloc({.api = "cudaMalloc", .dev = 0, .ptr = 0x7f0000000000u + 0x200u * i, .size = 512});
    }
    r.on_exit();
    std::ifstream in(dir / ("t" + std::to_string(run) + ".jsonl"));
    int stack_events = 0;
    for (std::string line; std::getline(in, line);) {
      const json l = json::parse(line);
      if (l["ev"] == "stack") ++stack_events;
      if (l["ev"] == "alloc") ids[run].push_back(l["stack"].get<std::uint64_t>());
    }
    EXPECT_EQ(stack_events, 1) << "run " << run;  // each recorder writes its own stack event
  }
  EXPECT_EQ(ids[0], (std::vector<std::uint64_t>{1, 1, 1}));
  EXPECT_EQ(ids[1], (std::vector<std::uint64_t>{1, 1, 1}));
  ASSERT_EQ(g_owners_asked.size(), 6u);
  EXPECT_NE(g_owners_asked[0], 0u);
  EXPECT_NE(g_owners_asked[0], g_owners_asked[3]) << "two recorders, two owners";
  EXPECT_EQ(g_note, std::uint64_t{g_owners_asked[3]} << 32 | 1) << "the second recorder noted its own id";
}

}  // namespace
