// The recorder's facts-to-events rules that the hooks rely on: unknown and
// double frees, frees with the wrong function, device resets, virtual
// memory handles and mappings, and the live table under threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "record/live_table.h"
#include "record/recorder.h"
#include "test_support.h"

using namespace cumemtrace::preload;
using cumemtrace::contract::Config;
using cumemtrace::format::MemoryKind;
using nlohmann::json;

namespace {

bool fake_device(int ordinal, DeviceDescription& out) {
  out.name = "Fake GPU " + std::to_string(ordinal);
  out.total_bytes = 1ull << 34;
  return true;
}

class RecorderRules : public ::testing::Test {
 protected:
  RecorderRules() {
    config_.output_template = dir_ / "t.jsonl";
    config_.buffer_kb = 64;
  }

  // The event lines after the header and device lines.
  std::vector<json> events() {
    recorder_.on_exit();
    std::ifstream in(dir_ / "t.jsonl");
    std::vector<json> out;
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      if (j["ev"] != "header" && j["ev"] != "device") out.push_back(j);
    }
    return out;
  }

  static std::vector<std::string> names(const std::vector<json>& lines) {
    std::vector<std::string> out;
    for (const auto& l : lines) out.push_back(l["ev"]);
    return out;
  }

  void alloc(std::uintptr_t ptr, std::size_t size, int dev = 0, MemoryKind kind = MemoryKind::device,
             bool context_bound = true) {
    recorder_.on_alloc({.api = "cudaMalloc",
                        .kind = kind,
                        .dev = dev,
                        .ptr = ptr,
                        .size = size,
                        .context_bound = context_bound});
  }

  cumemtrace::testing::TempDir dir_;
  Config config_;
  Recorder recorder_{config_, &fake_device};
};

// Alloc and free lines are stored as facts and formatted by the writer
// thread (pending/compact_event.h); the text must be what TRACE_FORMAT.md
// lays out, field for field, in the order the analyzer's golden traces have.
TEST_F(RecorderRules, AllocAndFreeLinesAreWrittenFieldForField) {
  alloc(0x10000, 100);
  recorder_.on_alloc({.api = "cudaMallocAsync",
                      .dev = 1,
                      .ptr = 0x7f00aa000200,
                      .size = 1000,
                      .stream = 0x5,
                      .context_bound = false,
                      .block = 1024});
  alloc(0x30000, 64, 0, MemoryKind::managed);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFreeAsync", .ptr = 0x7f00aa000200, .stream = 0x7}), FreeOutcome::recorded);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0x10000}), FreeOutcome::recorded);
  // Physical memory (cuMemCreate): ptr is the handle, no segment twin.
  recorder_.on_alloc({.api = "cuMemCreate", .kind = MemoryKind::vmm, .dev = 1, .ptr = 0x77, .size = 2 << 20});
  EXPECT_EQ(recorder_.on_free({.api = "cuMemRelease", .releases = Releases::vmm_handle, .ptr = 0x77}),
            FreeOutcome::recorded);
  recorder_.on_exit();

  const std::string tid = std::to_string(::gettid());
  const std::vector<std::string> expected = {
      R"({"ev":"segment_alloc","dev":0,"ptr":"0x10000","size":100,"api":"cudaMalloc"})",
      R"({"ev":"alloc","tid":)" + tid + R"(,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x10000","size":100,"stack":0})",
      R"({"ev":"alloc","tid":)" + tid +
          R"(,"api":"cudaMallocAsync","kind":"device","dev":1,"ptr":"0x7f00aa000200","size":1000,"block":1024,"stream":"0x5","stack":0})",
      R"({"ev":"segment_alloc","dev":0,"ptr":"0x30000","size":64,"api":"cudaMalloc"})",
      R"({"ev":"alloc","tid":)" + tid + R"(,"api":"cudaMalloc","kind":"managed","dev":0,"ptr":"0x30000","size":64,"stack":0})",
      R"({"ev":"free","tid":)" + tid +
          R"(,"api":"cudaFreeAsync","kind":"device","dev":1,"ptr":"0x7f00aa000200","size":1000,"stream":"0x7","stack":0})",
      R"({"ev":"free","tid":)" + tid + R"(,"api":"cudaFree","kind":"device","dev":0,"ptr":"0x10000","size":100,"stack":0})",
      R"({"ev":"segment_free","dev":0,"ptr":"0x10000","size":100})",
      R"({"ev":"alloc","tid":)" + tid + R"(,"api":"cuMemCreate","kind":"vmm","dev":1,"ptr":"0x77","size":2097152,"stack":0})",
      R"({"ev":"free","tid":)" + tid + R"(,"api":"cuMemRelease","kind":"vmm","dev":1,"ptr":"0x77","size":2097152,"stack":0})",
  };
  std::ifstream in(dir_ / "t.jsonl");
  std::vector<std::string> got;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(R"({"ev":"header")") || line.starts_with(R"({"ev":"device")") ||
        line.starts_with(R"({"ev":"end")")) {
      continue;
    }
    // Without its "t":N, which no test can know.
    const std::size_t t = line.find(R"(,"t":)");
    ASSERT_NE(t, std::string::npos) << line;
    const std::size_t t_end = line.find(',', t + 1);
    got.push_back(line.erase(t, t_end - t));
  }
  EXPECT_EQ(got, expected);
}

TEST_F(RecorderRules, UnknownAndDoubleFreesAreErrorsAndLeaveAccountingAlone) {
  alloc(0x10000, 100);
  alloc(0x20000, 200);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0xdead00}), FreeOutcome::unknown_pointer);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0x10000}), FreeOutcome::recorded);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0x10000}), FreeOutcome::double_free);
  EXPECT_EQ(recorder_.live_count(), 1u);
  EXPECT_EQ(recorder_.live_bytes(), 200u);
  const auto lines = events();
  EXPECT_EQ(names(lines), (std::vector<std::string>{"segment_alloc", "alloc", "segment_alloc", "alloc",
                                                    "error", "free", "segment_free", "error", "end"}));
  EXPECT_EQ(lines[4]["what"], "unknown_pointer");
  EXPECT_EQ(lines[4]["ptr"], "0xdead00");
  EXPECT_EQ(lines[4]["api"], "cudaFree");
  EXPECT_EQ(lines[4]["stack"], 0);
  EXPECT_GT(lines[4]["tid"], 0);
  EXPECT_EQ(lines[7]["what"], "double_free");
  EXPECT_EQ(lines[8]["live"], 1);
  EXPECT_EQ(lines[8]["live_bytes"], 200);
}

TEST_F(RecorderRules, AnAddressHandedOutAgainIsNotADoubleFree) {
  for (int round = 0; round < 3; ++round) {
    alloc(0x40000, 512);
    EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0x40000}), FreeOutcome::recorded);
  }
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0x40000}), FreeOutcome::double_free);
}

TEST_F(RecorderRules, RecentlyFreedPointersAreABoundedSet) {
  // Far more frees than the set remembers: the oldest is forgotten (a
  // second free of it reads as unknown), the newest still known.
  constexpr std::uintptr_t kBase = 0x7f0000000000, kCount = 20'000;
  for (std::uintptr_t i = 0; i < kCount; ++i) alloc(kBase + i * 512, 512);
  for (std::uintptr_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = kBase + i * 512}), FreeOutcome::recorded);
  }
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = kBase}), FreeOutcome::unknown_pointer);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = kBase + (kCount - 1) * 512}),
            FreeOutcome::double_free);
  EXPECT_EQ(recorder_.live_count(), 0u);
}

TEST_F(RecorderRules, TheWrongFreeFunctionLeavesTheAllocationLive) {
  alloc(0x50000, 4096, 0, MemoryKind::host_pinned);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .releases = Releases::device, .ptr = 0x50000}),
            FreeOutcome::other_kind);
  EXPECT_EQ(recorder_.live_count(), 1u);
  EXPECT_EQ(recorder_.on_free({.api = "cudaFreeHost", .releases = Releases::host_pinned, .ptr = 0x50000}),
            FreeOutcome::recorded);
  const auto lines = events();
  EXPECT_EQ(names(lines), (std::vector<std::string>{"segment_alloc", "alloc", "free", "segment_free", "end"}));
  EXPECT_EQ(lines[2]["kind"], "host_pinned");
}

TEST_F(RecorderRules, DeviceResetFreesContextBoundMemoryOfThatDeviceInAddressOrder) {
  alloc(0x3000, 30, 1);
  alloc(0x1000, 10, 1, MemoryKind::managed);
  alloc(0x2000, 20, 0);                                   // another device
  alloc(0x4000, 40, 1, MemoryKind::device, false);        // stream-ordered: survives
  alloc(0x5000, 50, 1, MemoryKind::host_pinned);
  recorder_.on_device_reset("cudaDeviceReset", 1);
  EXPECT_EQ(recorder_.live_count(), 2u);
  EXPECT_EQ(recorder_.live_bytes(), 60u);
  // Freed by the reset: a later free of one of them is a use after reset.
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0x3000}), FreeOutcome::unknown_pointer);
  const auto lines = events();
  std::vector<std::string> freed;
  for (const auto& l : lines) {
    if (l["ev"] != "free") continue;
    EXPECT_EQ(l["api"], "cudaDeviceReset");
    EXPECT_EQ(l["dev"], 1);
    freed.push_back(l["ptr"]);
  }
  EXPECT_EQ(freed, (std::vector<std::string>{"0x1000", "0x3000", "0x5000"}));
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [](const json& l) { return l["ev"] == "segment_free"; }),
            3);
}

TEST_F(RecorderRules, VmmHandlesAreFreedAtTheLastReleaseAndMappingsAreSegments) {
  recorder_.on_alloc({.api = "cuMemCreate", .kind = MemoryKind::vmm, .dev = 1, .ptr = 0x77, .size = 2 << 20});
  recorder_.on_map("cuMemMap", 0x7000000, 2 << 20, 0x77, 0);
  recorder_.on_vmm_retain(0x77);
  const FreeFacts release{.api = "cuMemRelease", .releases = Releases::vmm_handle, .ptr = 0x77};
  EXPECT_EQ(recorder_.on_free(release), FreeOutcome::recorded);  // one reference left
  EXPECT_EQ(recorder_.live_count(), 1u);
  EXPECT_EQ(recorder_.on_free(release), FreeOutcome::recorded);
  EXPECT_EQ(recorder_.live_count(), 0u);
  EXPECT_EQ(recorder_.on_free(release), FreeOutcome::double_free);
  recorder_.on_unmap(0x7000000, 1 << 20);  // part of the mapping: nothing unmapped
  recorder_.on_unmap(0x6000000, 64 << 20);
  const auto lines = events();
  EXPECT_EQ(names(lines), (std::vector<std::string>{"alloc", "segment_alloc", "free", "error", "segment_free",
                                                    "end"}));
  EXPECT_EQ(lines[0]["kind"], "vmm");
  EXPECT_EQ(lines[0]["ptr"], "0x77");
  EXPECT_EQ(lines[1]["dev"], 1);  // the handle's device
  EXPECT_EQ(lines[1]["api"], "cuMemMap");
  EXPECT_EQ(lines[2]["size"], 2 << 20);
  EXPECT_EQ(lines[4]["ptr"], "0x7000000");
}

TEST_F(RecorderRules, PooledBlocksHaveNoSegmentTwinAndThePoolWritesItsOwn) {
  recorder_.on_segment_alloc(0, 0x7000000, 2 << 20, "cuMemAlloc_v2");
  recorder_.on_alloc({.api = "cudaMalloc", .dev = 0, .ptr = 0x7000000, .size = 1000, .block = 1024});
  recorder_.on_alloc({.api = "cudaMallocAsync", .dev = 0, .ptr = 0x7000400, .size = 512, .stream = 0x2,
                      .block = 512});
  EXPECT_EQ(recorder_.on_free({.api = "cudaFree", .ptr = 0x7000000}), FreeOutcome::recorded);
  recorder_.on_segment_free(0, 0x7000000, 2 << 20);
  const auto lines = events();
  EXPECT_EQ(names(lines), (std::vector<std::string>{"segment_alloc", "alloc", "alloc", "free", "segment_free", "end"}));
  EXPECT_EQ(lines[0]["api"], "cuMemAlloc_v2");
  EXPECT_EQ(lines[0]["size"], 2 << 20);
  EXPECT_EQ(lines[1]["block"], 1024);
  EXPECT_EQ(lines[1]["size"], 1000);
  EXPECT_EQ(lines[2]["stream"], "0x2");
  EXPECT_EQ(lines[3]["size"], 1000);
  EXPECT_FALSE(lines[3].contains("block"));
  EXPECT_EQ(lines[5]["live"], 1);
  EXPECT_EQ(lines[5]["live_bytes"], 512);
}

TEST_F(RecorderRules, DeviceResetFreesPooledBlocksWithoutTwins) {
  recorder_.on_alloc({.api = "cudaMalloc", .dev = 0, .ptr = 0x9000, .size = 10, .block = 512});
  alloc(0x5000, 7);  // passthrough
  recorder_.on_device_reset("cudaDeviceReset", 0);
  EXPECT_EQ(names(events()), (std::vector<std::string>{"alloc", "segment_alloc", "alloc", "free", "segment_free",
                                                       "free", "end"}));
}

TEST_F(RecorderRules, OomAndPoolSamplesCarryEveryField) {
  cumemtrace::pool::OomReport r;
  r.device = 0;
  r.size = 100;
  r.block = 512;
  r.allocated = 1;
  r.reserved = 2;
  r.cached_free = 3;
  r.largest_free = 4;
  r.device_free = 5;
  r.device_total = 6;
  r.cause = cumemtrace::pool::OomCause::fragmentation;
  recorder_.on_oom("cuMemAlloc_v2", r);
  cumemtrace::pool::PoolStats s;
  s.allocated = 10;
  s.reserved = 20;
  s.cached_free = 10;
  s.largest_free = 8;
  s.free_blocks = 2;
  s.inactive_split = 2;
  recorder_.on_pool_sample(0, s);
  // The pool's last word comes before `end`.
  static Recorder* self = nullptr;
  self = &recorder_;
  recorder_.set_before_end([] { self->on_pool_sample(0, cumemtrace::pool::PoolStats{}); });
  const auto lines = events();
  ASSERT_EQ(names(lines), (std::vector<std::string>{"oom", "pool", "pool", "end"}));
  const json expected_oom = {{"api", "cuMemAlloc_v2"}, {"dev", 0},         {"size", 100},
                             {"block", 512},           {"allocated", 1},   {"reserved", 2},
                             {"cached_free", 3},       {"largest_free", 4}, {"device_free", 5},
                             {"device_total", 6},      {"cause", "fragmentation"}, {"stack", 0}};
  for (const auto& [key, value] : expected_oom.items()) EXPECT_EQ(lines[0][key], value) << key;
  EXPECT_GT(lines[0]["tid"].get<long>(), 0);
  const json expected_sample = {{"dev", 0},          {"allocated", 10}, {"reserved", 20},
                                {"cached_free", 10}, {"largest_free", 8}, {"free_blocks", 2},
                                {"inactive_split", 2}};
  for (const auto& [key, value] : expected_sample.items()) EXPECT_EQ(lines[1][key], value) << key;
  EXPECT_EQ(lines[2]["reserved"], 0);
}

TEST(LiveTableThreads, ConcurrentInsertsAndTakesBalance) {
  LiveTable table;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&table, t] {
      for (std::uintptr_t i = 0; i < 20'000; ++i) {
        const std::uintptr_t ptr = (static_cast<std::uintptr_t>(t) << 40) + i * 256;
        table.insert(ptr, LiveAllocation{i + 1, 0, MemoryKind::device, true});
        if (table.take(ptr, FreeFamily::device).result != TakeResult::taken) std::abort();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(table.count(), 0u);
  EXPECT_EQ(table.bytes(), 0u);
}

}  // namespace
