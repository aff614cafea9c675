// The query API's figures (cumemtrace.h, record/queries.cpp): what is held
// per device and in all, peaks since a reset, allocations made since a
// checkpoint with their stacks, and the watch's snapshot of what held the
// memory when a line was crossed — exact whatever came before the first
// query, under device resets, VMM handles and threads.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "record/recorder.h"
#include "stacks/stack_table.h"
#include "test_support.h"

extern "C" int naming_fixture_exported(int x);  // stacks/naming_fixture.cpp

using namespace cumemtrace::preload;
using cumemtrace::contract::Config;
using cumemtrace::format::MemoryKind;

namespace {

bool queries_device(int, DeviceDescription& out) {
  out.name = "Fake GPU";
  out.total_bytes = 1ull << 34;
  return true;
}

// The stack the fake capture returns next: return addresses in exported
// functions, so the namer names them through dladdr.
std::vector<std::uintptr_t> g_queries_next_stack;
std::size_t queries_capture(std::uintptr_t* out, std::size_t max) {
  const std::size_t n = std::min(max, g_queries_next_stack.size());
  std::copy_n(g_queries_next_stack.begin(), n, out);
  return n;
}

const std::uintptr_t kInFixture = reinterpret_cast<std::uintptr_t>(&naming_fixture_exported) + 1;
const std::uintptr_t kInLibc = reinterpret_cast<std::uintptr_t>(&::strtol) + 1;

class Queries : public ::testing::Test {
 protected:
  Queries() {
    config_.output_template = dir_ / "t.jsonl";
    config_.buffer_kb = 64;
  }
  void alloc(std::uintptr_t ptr, std::size_t size, int dev = 0, MemoryKind kind = MemoryKind::device) {
    recorder_.on_alloc({.api = "cudaMalloc", .kind = kind, .dev = dev, .ptr = ptr, .size = size});
  }
  void free(std::uintptr_t ptr) { recorder_.on_free({.api = "cudaFree", .ptr = ptr}); }
  UsageFigures usage(int dev) {
    UsageFigures f;
    EXPECT_TRUE(recorder_.usage(dev, f));
    return f;
  }
  std::vector<std::uintptr_t> ptrs(const std::vector<HeldAllocation>& held) {
    std::vector<std::uintptr_t> out;
    for (const auto& a : held) out.push_back(a.ptr);
    return out;
  }

  cumemtrace::testing::TempDir dir_;
  Config config_;
  Recorder recorder_{config_, &queries_device, StackPlatform{&queries_capture, nullptr}};
};

TEST_F(Queries, WhatWasHeldBeforeTheFirstQueryIsCountedPerDeviceAndInAll) {
  alloc(0x10000, 100, 0);
  alloc(0x20000, 200, 1);
  alloc(0x30000, 300, 1, MemoryKind::managed);
  recorder_.on_alloc({.api = "cuMemCreate", .kind = MemoryKind::vmm, .dev = 2, .ptr = 0x77, .size = 4000});
  free(0x10000);
  EXPECT_EQ(usage(0).live_bytes, 0u);
  EXPECT_EQ(usage(1).live_bytes, 500u);
  EXPECT_EQ(usage(1).live_count, 2u);
  EXPECT_EQ(usage(2).live_bytes, 4000u);
  EXPECT_EQ(usage(-1).live_bytes, 4500u);
  EXPECT_EQ(usage(-1).live_count, 3u);
  // The peak starts at what was held when the totals went on.
  EXPECT_EQ(usage(-1).peak_bytes, 4500u);
  UsageFigures f;
  EXPECT_FALSE(recorder_.usage(64, f));
  EXPECT_FALSE(recorder_.usage(-2, f));
}

TEST_F(Queries, TotalsFollowAllocationsFreesResetsAndHandlesOnceOn) {
  recorder_.reset_peaks();  // turns them on
  alloc(0x10000, 100, 0);
  alloc(0x20000, 200, 1);
  recorder_.on_alloc({.api = "cuMemCreate", .kind = MemoryKind::vmm, .dev = 1, .ptr = 0x77, .size = 1000});
  EXPECT_EQ(usage(1).live_bytes, 1200u);
  free(0x20000);
  EXPECT_EQ(recorder_.on_free({.api = "cuMemRelease", .releases = Releases::vmm_handle, .ptr = 0x77}),
            FreeOutcome::recorded);
  EXPECT_EQ(usage(1).live_bytes, 0u);
  EXPECT_EQ(usage(1).live_count, 0u);
  EXPECT_EQ(usage(1).peak_bytes, 1200u);
  // A bad free changes nothing; an alloc at a live address replaces it.
  free(0xdead00);
  alloc(0x10000, 50, 0);
  EXPECT_EQ(usage(0).live_bytes, 50u);
  EXPECT_EQ(usage(0).live_count, 1u);
  // A device reset frees the context's memory.
  alloc(0x40000, 400, 0);
  recorder_.on_device_reset("cudaDeviceReset", 0);
  EXPECT_EQ(usage(0).live_bytes, 0u);
  EXPECT_EQ(usage(-1).live_bytes, 0u);
  EXPECT_EQ(usage(-1).live_count, 0u);
  EXPECT_EQ(recorder_.live_bytes(), 0u);
}

TEST_F(Queries, PeakIsTheHighestTotalSinceTheLastReset) {
  alloc(0x10000, 1000);
  recorder_.reset_peaks();
  EXPECT_EQ(usage(-1).peak_bytes, 1000u);
  alloc(0x20000, 3000);
  alloc(0x30000, 500, 1);
  free(0x20000);
  alloc(0x40000, 2000);
  EXPECT_EQ(usage(-1).peak_bytes, 4500u);  // 1000 + 3000 + 500 at once
  EXPECT_EQ(usage(0).peak_bytes, 4000u);
  EXPECT_EQ(usage(1).peak_bytes, 500u);
  recorder_.reset_peaks();  // down to what is held now
  EXPECT_EQ(usage(-1).peak_bytes, 3500u);
  EXPECT_EQ(usage(0).peak_bytes, 3000u);
}

TEST_F(Queries, HeldSinceACheckpointIsWhatWasMadeAfterItLargestFirstWithStacks) {
  g_queries_next_stack = {kInLibc};
  alloc(0x10000, 100);
  const std::uint32_t first = recorder_.checkpoint();
  EXPECT_NE(first, 0u);
  alloc(0x20000, 200);
  g_queries_next_stack = {kInFixture, kInLibc};
  alloc(0x30000, 900, 1);
  alloc(0x40000, 200);
  free(0x20000);
  const std::uint32_t second = recorder_.checkpoint();
  EXPECT_GT(second, first);
  alloc(0x50000, 5);
  std::uint64_t total = 0;
  auto held = recorder_.held_since(first, 10, total);
  EXPECT_EQ(total, 3u);
  EXPECT_EQ(ptrs(held), (std::vector<std::uintptr_t>{0x30000, 0x40000, 0x50000}));
  EXPECT_EQ(held[0].dev, 1);
  EXPECT_EQ(held[0].size, 900u);
  // The largest `keep` only; total still counts them all.
  held = recorder_.held_since(first, 1, total);
  EXPECT_EQ(total, 3u);
  EXPECT_EQ(ptrs(held), (std::vector<std::uintptr_t>{0x30000}));
  held = recorder_.held_since(second, 10, total);
  EXPECT_EQ(ptrs(held), (std::vector<std::uintptr_t>{0x50000}));
  // Each keeps the id of its stack, which describe_stack renders.
  held = recorder_.held_since(first, 10, total);
  ASSERT_NE(held[0].stack, 0u);
  EXPECT_EQ(held[0].stack, held[1].stack);
  const std::string text = recorder_.describe_stack(held[0].stack);
  const auto lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_EQ(lines, 2) << text;
  EXPECT_TRUE(text.starts_with("native\t")) << text;
  // Innermost first: module, offset and name, tab-separated.
  const std::string innermost = text.substr(0, text.find('\n'));
  EXPECT_NE(innermost.find("naming_fixture"), std::string::npos) << text;
  EXPECT_TRUE(innermost.ends_with("\tnaming_fixture_exported")) << text;
  EXPECT_NE(innermost.find("\t0x"), std::string::npos) << text;
  // The outer frame's object, as the dynamic linker names it: libc.so.6,
  // or under AddressSanitizer the runtime that intercepts strtol.
  Dl_info outer{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(kInLibc), &outer), 0);
  const std::string outer_object = std::filesystem::path(outer.dli_fname).filename();
  EXPECT_NE(text.substr(innermost.size() + 1).find(outer_object), std::string::npos) << text;
  EXPECT_EQ(recorder_.describe_stack(0), "");
  EXPECT_EQ(recorder_.describe_stack(99999), "");
}

TEST_F(Queries, TheWatchKeepsWhatHeldTheMemoryWhenTheLineWasCrossed) {
  alloc(0x10000, 1000);  // before the checkpoint: never in the snapshot
  const std::uint32_t since = recorder_.checkpoint();
  recorder_.watch(since, 1000 + 2500);
  alloc(0x20000, 1500);
  alloc(0x30000, 800);
  std::uint64_t total = 0;
  EXPECT_TRUE(recorder_.watched(10, total).empty());  // not crossed yet
  EXPECT_EQ(total, 0u);
  alloc(0x40000, 300);  // 3600 > 3500
  free(0x20000);
  free(0x30000);
  free(0x40000);
  alloc(0x50000, 5000);  // crossed again: the snapshot is the first crossing's
  auto kept = recorder_.watched(10, total);
  EXPECT_EQ(total, 3u);
  EXPECT_EQ(ptrs(kept), (std::vector<std::uintptr_t>{0x20000, 0x30000, 0x40000}));
  EXPECT_EQ(ptrs(recorder_.watched(2, total)), (std::vector<std::uintptr_t>{0x20000, 0x30000}));
  // Arming again forgets it; a line already crossed takes the snapshot at once.
  recorder_.watch(recorder_.checkpoint(), 100000);
  EXPECT_TRUE(recorder_.watched(10, total).empty());
  alloc(0x60000, 10);
  recorder_.watch(since, 2000);
  EXPECT_EQ(ptrs(recorder_.watched(10, total)), (std::vector<std::uintptr_t>{0x50000, 0x60000}));
  // Disarmed: nothing kept, nothing taken.
  recorder_.watch(since, LiveUsage::kNoWatch);
  alloc(0x70000, 1 << 20);
  EXPECT_TRUE(recorder_.watched(10, total).empty());
}

TEST_F(Queries, TheWatchKeepsTheLargestWhenMoreThanItHasRoomFor) {
  const std::uint32_t since = recorder_.checkpoint();
  recorder_.watch(since, 1'000'000);
  std::uint64_t sum = 0;
  for (std::uintptr_t i = 1; i <= 200; ++i) {
    alloc(i << 12, i * 100);
    sum += i * 100;
    if (sum > 1'000'000) break;
  }
  std::uint64_t total = 0;
  const auto kept = recorder_.watched(1000, total);
  EXPECT_EQ(total, 141u);  // 100 * (1 + ... + 141) is the first sum over 1e6
  ASSERT_EQ(kept.size(), 64u);
  EXPECT_EQ(kept.front().size, 14100u);
  EXPECT_EQ(kept.back().size, (141u - 63u) * 100u);
}

TEST_F(Queries, ThreadsAllocatingAtOnceLeaveExactTotals) {
  recorder_.reset_peaks();
  constexpr int kThreads = 4;
  constexpr std::uintptr_t kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (std::uintptr_t i = 0; i < kEach; ++i) {
        const std::uintptr_t ptr = (static_cast<std::uintptr_t>(t + 1) << 32) | (i << 9);
        alloc(ptr, 512, t % 2);
        if (i % 2 == 0) free(ptr);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(usage(-1).live_count, kThreads * kEach / 2);
  EXPECT_EQ(usage(-1).live_bytes, kThreads * kEach / 2 * 512);
  EXPECT_EQ(usage(0).live_bytes + usage(1).live_bytes, usage(-1).live_bytes);
  EXPECT_GE(usage(-1).peak_bytes, usage(-1).live_bytes);
  EXPECT_EQ(recorder_.live_bytes(), usage(-1).live_bytes);
}

TEST(StackTableById, FramesOfAnIdAreTheInternedOnes) {
  StackTable table(64, 1024);
  const std::vector<std::uintptr_t> a = {0x1000, 0x2000}, b = {0x3000};
  const std::uint32_t ia = table.intern(a, [](std::uint32_t, std::span<const std::uintptr_t>) {});
  const std::uint32_t ib = table.intern(b, [](std::uint32_t, std::span<const std::uintptr_t>) {});
  const auto fa = table.frames_of(ia), fb = table.frames_of(ib);
  EXPECT_EQ(std::vector<std::uintptr_t>(fa.begin(), fa.end()), a);
  EXPECT_EQ(std::vector<std::uintptr_t>(fb.begin(), fb.end()), b);
  EXPECT_TRUE(table.frames_of(0).empty());
  EXPECT_TRUE(table.frames_of(ib + 1).empty());
  EXPECT_TRUE(table.frames_of(1u << 30).empty());
}

}  // namespace
