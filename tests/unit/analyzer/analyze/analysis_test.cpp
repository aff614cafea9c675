// Analysis on hand-built events: peaks and their times, devices, segments,
// the live set and leak groups, unknown and duplicate addresses.
#include <gtest/gtest.h>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/units.h"

namespace cumemtrace::analyzer {
namespace {

using format::Event;

class AnalysisTest : public ::testing::Test {
 protected:
  void alloc(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0, std::uint64_t stack = 0,
             std::string_view api = "cudaMalloc") {
    TraceEvent e;
    e.ev = Event::alloc;
    e.t = t;
    e.ptr = ptr;
    e.size = size;
    e.dev = dev;
    e.stack = stack;
    e.api = api;
    e.memory_kind = format::MemoryKind::device;
    analysis.consume(e);
  }
  void free(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    TraceEvent e;
    e.ev = Event::free;
    e.t = t;
    e.ptr = ptr;
    e.size = size;
    e.dev = dev;
    e.api = "cudaFree";
    analysis.consume(e);
  }
  void segment(Event ev, std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    TraceEvent e;
    e.ev = ev;
    e.t = t;
    e.ptr = ptr;
    e.size = size;
    e.dev = dev;
    analysis.consume(e);
  }

  Analysis analysis;
};

TEST_F(AnalysisTest, PeakAllocatedIsExactAndTimedByTheEventThatSetIt) {
  alloc(10, 0x1000, 100);
  alloc(20, 0x2000, 200);  // 300
  free(30, 0x1000, 100);   // 200
  alloc(40, 0x3000, 150);  // 350: the peak
  free(50, 0x3000, 150);   // 200
  alloc(60, 0x4000, 150);  // 350 again: not a new peak
  const MemoryTotals& t = analysis.total();
  EXPECT_EQ(t.allocated.peak, 350u);
  EXPECT_EQ(t.allocated.peak_t, 40u);
  EXPECT_EQ(t.allocated.current, 350u);
  EXPECT_EQ(t.allocs, 4u);
  EXPECT_EQ(t.frees, 2u);
  EXPECT_EQ(t.live_allocations, 2u);
  EXPECT_EQ(analysis.last_t(), 60u);
}

TEST_F(AnalysisTest, DevicesHaveTheirOwnPeaksAndTheTotalIsNotTheirSum) {
  alloc(1, 0x10, 1000, 0);
  free(2, 0x10, 1000, 0);
  alloc(3, 0x20, 700, 1);
  alloc(4, 0x30, 100, 0);
  ASSERT_EQ(analysis.devices().size(), 2u);
  const DeviceInfo& d0 = analysis.devices().at(0);
  const DeviceInfo& d1 = analysis.devices().at(1);
  EXPECT_EQ(d0.memory.allocated.peak, 1000u);
  EXPECT_EQ(d0.memory.allocated.peak_t, 1u);
  EXPECT_EQ(d1.memory.allocated.peak, 700u);
  EXPECT_EQ(d1.memory.allocated.peak_t, 3u);
  EXPECT_EQ(analysis.total().allocated.peak, 1000u);  // never 1700: they were not live together
  EXPECT_EQ(analysis.total().allocated.peak_t, 1u);
  EXPECT_EQ(d0.memory.allocs, 2u);
  EXPECT_EQ(d1.memory.allocs, 1u);
}

TEST_F(AnalysisTest, FreeIsAccountedWhereAndAsTheAllocationWas) {
  alloc(1, 0x10, 500, 1);
  free(2, 0x10, 123, 0);  // wrong device and size in the free: the alloc wins
  EXPECT_EQ(analysis.devices().at(1).memory.allocated.current, 0u);
  EXPECT_EQ(analysis.devices().at(1).memory.frees, 1u);
  EXPECT_EQ(analysis.total().allocated.current, 0u);
}

TEST_F(AnalysisTest, ReservedFollowsSegments) {
  segment(Event::segment_alloc, 5, 0x100000, 2 << 20);
  segment(Event::segment_alloc, 6, 0x400000, 20 << 20);
  segment(Event::segment_free, 7, 0x100000, 2 << 20);
  segment(Event::segment_free, 8, 0x999999, 4096);  // unknown: ignored
  const MemoryTotals& t = analysis.total();
  EXPECT_EQ(t.reserved.peak, 22u << 20);
  EXPECT_EQ(t.reserved.peak_t, 6u);
  EXPECT_EQ(t.reserved.current, 20u << 20);
  EXPECT_EQ(t.segment_allocs, 2u);
  EXPECT_EQ(t.segment_frees, 2u);
  EXPECT_EQ(t.unknown_segment_frees, 1u);
}

TEST_F(AnalysisTest, UnknownFreeIsCountedAndChangesNothing) {
  alloc(1, 0x10, 64);
  free(2, 0xdead, 64);
  free(3, 0x10, 64);
  free(4, 0x10, 64);  // double free
  EXPECT_EQ(analysis.total().unknown_frees, 2u);
  EXPECT_EQ(analysis.total().frees, 3u);
  EXPECT_EQ(analysis.total().allocated.current, 0u);
  EXPECT_EQ(analysis.total().allocated.peak, 64u);
}

TEST_F(AnalysisTest, ReusedLiveAddressCountsTheOldAllocationAsFreed) {
  alloc(1, 0x10, 64);
  alloc(2, 0x10, 32);  // the free between them was lost
  EXPECT_EQ(analysis.total().duplicate_allocs, 1u);
  EXPECT_EQ(analysis.total().allocated.current, 32u);
  EXPECT_EQ(analysis.total().live_allocations, 1u);
}

TEST_F(AnalysisTest, LiveSetIsGroupedByStackBiggestFirstWithOldestExamples) {
  for (std::uint64_t i = 0; i < 5; ++i) alloc(100 - i, 0x1000 + i * 0x100, 10, 0, 7);  // 50 bytes
  alloc(200, 0x9000, 400, 1, 9, "cudaMallocAsync");
  alloc(201, 0xa000, 1, 0, 0);
  alloc(202, 0xb000, 1, 0, 9);
  free(300, 0x1000, 10);

  std::vector<LeakGroup> leaks = analysis.leaks(2);
  ASSERT_EQ(leaks.size(), 3u);
  EXPECT_EQ(leaks[0].stack, 9u);
  EXPECT_EQ(leaks[0].bytes, 401u);
  EXPECT_EQ(leaks[0].count, 2u);
  EXPECT_EQ(leaks[0].apis, (std::vector<std::string>{"cudaMalloc", "cudaMallocAsync"}));
  EXPECT_EQ(leaks[0].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(leaks[1].stack, 7u);
  EXPECT_EQ(leaks[1].bytes, 40u);
  EXPECT_EQ(leaks[1].count, 4u);
  EXPECT_EQ(leaks[1].first_t, 96u);
  ASSERT_EQ(leaks[1].examples.size(), 2u);
  EXPECT_EQ(leaks[1].examples[0].t, 96u);  // the oldest two, oldest first
  EXPECT_EQ(leaks[1].examples[0].ptr, 0x1400u);
  EXPECT_EQ(leaks[1].examples[1].t, 97u);
  EXPECT_EQ(leaks[2].stack, 0u);
  EXPECT_EQ(analysis.live().size(), 7u);
}

TEST_F(AnalysisTest, ManyAllocationsAndFreesLeaveExactlyTheLiveOnes) {
  // Exercises the address map's growth and deletion over many probe chains.
  std::uint64_t expected = 0;
  for (std::uint64_t i = 0; i < 50000; ++i) alloc(i, 0x7f0000000000 + i * 512, i % 1000 + 1);
  for (std::uint64_t i = 0; i < 50000; ++i) {
    if (i % 3 != 0) free(50000 + i, 0x7f0000000000 + i * 512, i % 1000 + 1);
    else expected += i % 1000 + 1;
  }
  EXPECT_EQ(analysis.total().allocated.current, expected);
  EXPECT_EQ(analysis.live().size(), 16667u);
  EXPECT_EQ(analysis.total().unknown_frees, 0u);
}

TEST(Units, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536 * 1024), "1.50 MiB");
  EXPECT_EQ(format_bytes(1048575), "1.00 MiB");  // not "1024.00 KiB"
  EXPECT_EQ(format_bytes(85045870592ull), "79.21 GiB");
  EXPECT_EQ(format_bytes(~0ull), "16.00 EiB");
}

TEST(Units, FormatsNanosecondsAsSeconds) {
  EXPECT_EQ(format_seconds(0), "0.000000 s");
  EXPECT_EQ(format_seconds(53001), "0.000053 s");
  EXPECT_EQ(format_seconds(1234567890123ull), "1234.567890 s");
}

}  // namespace
}  // namespace cumemtrace::analyzer
