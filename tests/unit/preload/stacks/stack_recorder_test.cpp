// Stacks in the trace, through the recorder, with a fake capture: a `stack`
// event once per distinct stack, before the first event that uses its id;
// depth and CUMEMTRACE_STACKS=0 honoured.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
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

// What the fake capture returns next, and what it was asked for.
std::vector<std::uintptr_t> g_next_stack;
std::size_t g_last_max = 0;
int g_captures = 0;

std::size_t fake_capture(std::uintptr_t* out, std::size_t max) {
  ++g_captures;
  g_last_max = max;
  const std::size_t n = std::min(max, g_next_stack.size());
  std::copy_n(g_next_stack.begin(), n, out);
  return n;
}

bool stack_device(int, DeviceDescription& out) {
  out.name = "Fake GPU";
  out.total_bytes = 1ull << 30;
  return true;
}

std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

class StackRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_captures = 0;
    g_last_max = 0;
  }
  std::vector<json> record(unsigned depth, const std::vector<std::vector<std::uintptr_t>>& stacks,
                           bool free_stacks = true) {
    Config c;
    c.free_stacks = free_stacks;
    c.output_template = dir_ / "t.jsonl";
    c.buffer_kb = 64;
    c.stacks = depth;
    Recorder r(c, &stack_device, StackPlatform{&fake_capture, nullptr});
    std::uintptr_t ptr = 0x7f0000000000;
    for (const auto& s : stacks) {
      g_next_stack = s;
      r.on_alloc({.api = "cudaMalloc", .kind = cumemtrace::format::MemoryKind::device, .dev = 0,
                  .ptr = ptr, .size = 512, .stream = std::nullopt});
      r.on_free({.api = "cudaFree", .ptr = ptr});
      ptr += 0x200;
    }
    r.on_exit();
    return read_lines(dir_ / "t.jsonl");
  }
  TempDir dir_;
};

TEST_F(StackRecorderTest, EachDistinctStackIsWrittenOnceBeforeItsFirstUse) {
  const std::vector<std::uintptr_t> a = {0x1001, 0x2002, 0x3003}, b = {0x1001, 0x2002, 0x4004};
  const auto lines = record(32, {a, b, a, a, b});
  std::map<std::uint64_t, json> stacks;
  std::map<std::vector<std::uintptr_t>, std::uint64_t> id_of;
  std::vector<std::uint64_t> used;
  for (const auto& l : lines) {
    if (l["ev"] == "stack") {
      const auto id = l["id"].get<std::uint64_t>();
      EXPECT_FALSE(stacks.contains(id)) << "stack " << id << " written twice";
      stacks[id] = l;
      std::vector<std::uintptr_t> ips;
      for (const auto& f : l["frames"]) {
        ips.push_back(std::stoull(f["ip"].get<std::string>(), nullptr, 16));
        EXPECT_TRUE(f.contains("fn") && f.contains("module") && f.contains("off")) << f;
      }
      id_of[ips] = id;
    } else if (l["ev"] == "alloc" || l["ev"] == "free") {
      const auto id = l["stack"].get<std::uint64_t>();
      EXPECT_TRUE(stacks.contains(id)) << "stack " << id << " used before it was written";
      used.push_back(id);
    }
  }
  ASSERT_EQ(stacks.size(), 2u);
  ASSERT_TRUE(id_of.contains(a) && id_of.contains(b));
  EXPECT_NE(id_of[a], id_of[b]);
  const std::vector<std::uint64_t> expected = {id_of[a], id_of[a], id_of[b], id_of[b], id_of[a],
                                               id_of[a], id_of[a], id_of[a], id_of[b], id_of[b]};
  EXPECT_EQ(used, expected);
  EXPECT_EQ(lines.front()["config"]["stacks"], 32);
}

// CUMEMTRACE_FREE_STACKS unset: a free is not captured at all (one capture
// per allocation, not two), and its line says stack 0.
TEST_F(StackRecorderTest, FreesCarryNoStackByDefault) {
  const std::vector<std::uintptr_t> a = {0x1001, 0x2002, 0x3003};
  const auto lines = record(32, {a, a, a}, Config{}.free_stacks);
  int allocs = 0;
  int frees = 0;
  for (const auto& l : lines) {
    if (l["ev"] == "alloc") {
      EXPECT_NE(l["stack"], 0) << l;
      ++allocs;
    } else if (l["ev"] == "free") {
      EXPECT_EQ(l["stack"], 0) << l;
      ++frees;
    }
  }
  EXPECT_EQ(allocs, 3);
  EXPECT_EQ(frees, 3);
  EXPECT_EQ(g_captures, 3);
  EXPECT_EQ(lines.front()["config"]["free_stacks"], false);
}

TEST_F(StackRecorderTest, DepthLimitsTheFramesAskedForAndWritten) {
  std::vector<std::uintptr_t> deep;
  for (std::uintptr_t i = 1; i <= 40; ++i) deep.push_back(0x1000 * i + 1);
  const auto lines = record(4, {deep});
  EXPECT_EQ(g_last_max, 4u);
  int stack_events = 0;
  for (const auto& l : lines) {
    if (l["ev"] != "stack") continue;
    ++stack_events;
    ASSERT_EQ(l["frames"].size(), 4u);
    EXPECT_EQ(l["frames"][0]["ip"], "0x1001");  // innermost first, as captured
    EXPECT_EQ(l["frames"][3]["ip"], "0x4001");
  }
  EXPECT_EQ(stack_events, 1);
}

TEST_F(StackRecorderTest, DepthZeroCapturesNothing) {
  const auto lines = record(0, {{0x1001, 0x2002}});
  EXPECT_EQ(g_captures, 0);
  for (const auto& l : lines) {
    EXPECT_NE(l["ev"], "stack");
    if (l["ev"] == "alloc" || l["ev"] == "free") {
      EXPECT_EQ(l["stack"], 0);
    }
  }
  EXPECT_EQ(lines.front()["config"]["stacks"], 0);
}

TEST_F(StackRecorderTest, NothingCapturedMeansStackZero) {
  const auto lines = record(32, {{}});
  EXPECT_GT(g_captures, 0);
  for (const auto& l : lines) {
    EXPECT_NE(l["ev"], "stack");
    if (l["ev"] == "alloc") {
      EXPECT_EQ(l["stack"], 0);
    }
  }
}

}  // namespace
