// Expandable segments on a fake device with virtual memory: growth in place
// by the shortfall, page recycling under the tight policy, the observer's
// segment events, the out-of-memory ladder, trimming, and the fallback when
// the upstream has no virtual memory.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "cumemtrace/pool/device_pool.h"
#include "pool_test_support.h"

using namespace pool_test;

namespace {

constexpr StreamHandle kExpandStream = 0x5;

// Checks that every segment_free names a range an earlier segment_alloc
// reported, as a trace reader matches them.
struct MatchingObserver : PoolObserver {
  std::map<DevicePtr, std::size_t> live;
  std::size_t reserved = 0;
  int mismatches = 0;
  void on_segment_alloc(int, DevicePtr p, std::size_t size) override {
    if (!live.emplace(p, size).second) ++mismatches;
    reserved += size;
  }
  void on_segment_free(int, DevicePtr p, std::size_t size) override {
    auto it = live.find(p);
    if (it == live.end() || it->second != size) ++mismatches;
    else live.erase(it);
    reserved -= size;
  }
};

struct ExpandableTest : ::testing::Test {
  FakeUpstream up{kUnlimited, 2 * MiB};
  MatchingObserver observer;
  std::unique_ptr<DevicePool> pool;
  void make(const char* conf) { pool = std::make_unique<DevicePool>(up, config_from(conf), 0, &observer); }
  void SetUp() override { make("expandable_segments:true"); }
  void TearDown() override {
    EXPECT_EQ(pool->check_invariants(), "");
    EXPECT_TRUE(up.violations.empty()) << up.violations.front();
    EXPECT_EQ(observer.mismatches, 0);
    EXPECT_EQ(observer.reserved, pool->stats().reserved);
    EXPECT_EQ(up.used, pool->stats().reserved);
  }
};

}  // namespace

TEST_F(ExpandableTest, LargeBlocksShareOneRangeThatGrowsInPlace) {
  const DevicePtr a = pool->allocate_async(30 * MiB, kExpandStream).ptr;
  const DevicePtr b = pool->allocate_async(50 * MiB + 4096, kExpandStream).ptr;
  EXPECT_EQ(up.ranges.size(), 1u);
  EXPECT_EQ(b, a + 30 * MiB) << "contiguous in the one range";
  EXPECT_EQ(pool->stats().reserved, 82 * MiB);  // 2 MiB pages
  EXPECT_EQ(pool->block_size_for(50 * MiB + 4096), 50 * MiB + 4096) << "no unsplit remainder";
  // Small blocks keep their ordinary 2 MiB segments.
  EXPECT_NE(pool->allocate_async(4096, kExpandStream).ptr, 0u);
  EXPECT_EQ(up.segments.size(), 1u);
}

TEST_F(ExpandableTest, FreeTailIsExtendedByTheShortfallOnly) {
  const DevicePtr a = pool->allocate_async(30 * MiB, kExpandStream).ptr;
  ASSERT_EQ(pool->free_async(a, kExpandStream).status, FreeStatus::ok);
  const DevicePtr b = pool->allocate_async(50 * MiB, kExpandStream).ptr;
  EXPECT_EQ(b, a) << "the free tail grew to fit";
  EXPECT_EQ(pool->stats().reserved, 50 * MiB);
  EXPECT_EQ(pool->stats().segments, 1u);
}

TEST_F(ExpandableTest, TightPolicyMovesPagesFromFreeHolesInsteadOfRaisingThePeak) {
  for (const char* conf : {"expandable_segments:true,segment_policy:pytorch", "expandable_segments:true"}) {
    make(conf);
    const bool tight = pool->config().segment_policy == SegmentPolicy::tight;
    const DevicePtr a = pool->allocate_async(30 * MiB, kExpandStream).ptr;
    const DevicePtr b = pool->allocate_async(50 * MiB, kExpandStream).ptr;
    ASSERT_EQ(pool->free_async(a, kExpandStream).status, FreeStatus::ok);
    // 40 MiB fits no hole: the range grows; tight unmaps the 30 MiB hole.
    const DevicePtr c = pool->allocate_async(40 * MiB, kExpandStream).ptr;
    EXPECT_EQ(c, b + 50 * MiB) << conf;
    EXPECT_EQ(pool->stats().reserved, tight ? 90 * MiB : 120 * MiB) << conf;
    EXPECT_EQ(pool->stats().peak_reserved, tight ? 90 * MiB : 120 * MiB) << conf;
    // The hole is reusable either way (mapped again when needed).
    const DevicePtr d = pool->allocate_async(30 * MiB, kExpandStream).ptr;
    EXPECT_EQ(d, a) << conf;
    EXPECT_EQ(pool->stats().reserved, 120 * MiB) << conf;
    for (DevicePtr p : {b, c, d}) ASSERT_EQ(pool->free_async(p, kExpandStream).status, FreeStatus::ok);
    ASSERT_TRUE(pool->release_cached().ok());
    EXPECT_EQ(pool->stats().reserved, 0u) << conf;
    EXPECT_TRUE(up.ranges.empty()) << "a wholly free range goes back on trim";
  }
}

TEST_F(ExpandableTest, PartlyFreePagesStayMapped) {
  // Blocks that share a page keep it mapped while either is live.
  const DevicePtr a = pool->allocate_async(3 * MiB, kExpandStream).ptr;  // pages 0-1
  const DevicePtr b = pool->allocate_async(3 * MiB, kExpandStream).ptr;  // pages 1-2
  ASSERT_EQ(pool->free_async(a, kExpandStream).status, FreeStatus::ok);
  ASSERT_TRUE(pool->release_cached().ok());
  EXPECT_EQ(pool->stats().reserved, 4 * MiB) << "page 0 went, page 1 is shared with b";
  ASSERT_EQ(pool->free_async(b, kExpandStream).status, FreeStatus::ok);
}

TEST_F(ExpandableTest, LadderUnmapsFreePagesToMakeRoom) {
  up.set_capacity(100 * MiB);
  make("expandable_segments:true,segment_policy:pytorch");
  const DevicePtr a = pool->allocate(60 * MiB).ptr;
  ASSERT_NE(pool->allocate(30 * MiB).ptr, 0u);
  ASSERT_EQ(pool->free(a).status, FreeStatus::ok);  // pending
  const Allocation c = pool->allocate(70 * MiB);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(pool->stats().reserved, 100 * MiB);
  const Allocation d = pool->allocate(10 * MiB);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.oom.value().cause, OomCause::capacity);
  EXPECT_EQ(d.oom.value().device_free, 0u);
}

TEST_F(ExpandableTest, WithoutVirtualMemoryOrdinarySegmentsServe) {
  FakeUpstream plain(kUnlimited, 0);
  DevicePool p(plain, config_from("expandable_segments:true"));
  const DevicePtr a = p.allocate(30 * MiB).ptr;
  ASSERT_NE(a, 0u);
  EXPECT_TRUE(plain.ranges.empty());
  EXPECT_EQ(plain.segments.size(), 1u);
  EXPECT_EQ(p.check_invariants(), "");
}

// A device that advertises virtual memory but refuses to back it
// (CUDA_ERROR_NOT_SUPPORTED = 801 from cuMemCreate, as under an interposer
// that does not model VMM): the request is served from ordinary segments,
// never failed, and later large requests do not try the range again.
TEST_F(ExpandableTest, RefusedVirtualMemoryFallsBackToOrdinarySegments) {
  up.refuse_maps = 801;
  const Allocation a = pool->allocate_async(30 * MiB, kExpandStream);
  ASSERT_TRUE(a.ok()) << "code " << a.result.code;
  EXPECT_EQ(up.segments.size(), 1u);
  EXPECT_TRUE(up.mapped.empty());
  const std::uint64_t calls = up.allocate_calls;
  const Allocation b = pool->allocate(50 * MiB);
  ASSERT_TRUE(b.ok()) << "code " << b.result.code;
  EXPECT_EQ(up.allocate_calls, calls + 1) << "one ordinary segment, no second map attempt";
  EXPECT_EQ(pool->stats().reserved, 30 * MiB + 50 * MiB);
  EXPECT_EQ(pool->free_async(a.ptr, kExpandStream).status, FreeStatus::ok);
  EXPECT_EQ(pool->free(b.ptr).status, FreeStatus::ok);
  // Out of memory from map is not a refusal: the ladder handles it.
  up.refuse_maps = 0;
}

TEST_F(ExpandableTest, OutOfMemoryFromMapIsNotARefusal) {
  up.set_capacity(64 * MiB);
  const Allocation big = pool->allocate_async(100 * MiB, kExpandStream);
  EXPECT_EQ(big.result.status, UpstreamStatus::out_of_memory);
  up.set_capacity(kUnlimited);
  const Allocation a = pool->allocate_async(30 * MiB, kExpandStream);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(up.mapped.empty()) << "still expandable after an out-of-memory";
  EXPECT_EQ(pool->free_async(a.ptr, kExpandStream).status, FreeStatus::ok);
}

TEST_F(ExpandableTest, RecyclingKeepsObserverEventsMatched) {
  // Many sizes, frees in between, trims: every segment_free the observer
  // sees must match an earlier segment_alloc exactly (TearDown checks).
  std::vector<DevicePtr> live;
  std::size_t bound = 0;
  for (int i = 0; i < 400; ++i) {
    const std::size_t size = (3 + (i * 37) % 61) * MiB + (i % 5) * 4096;
    live.push_back(pool->allocate_async(size, kExpandStream).ptr);
    ASSERT_NE(live.back(), 0u);
    // When the peak rises, every whole free page was given back first: what
    // is left is live memory plus pages shared between a free block and its
    // live neighbours (at most two per free block).
    const PoolStats s = pool->stats();
    bound = std::max(bound, s.allocated + 4 * MiB * (s.free_blocks + 1));
    ASSERT_LE(s.peak_reserved, bound) << i;
    if (i % 3 == 0) {
      const std::size_t victim = (i * 7) % live.size();
      ASSERT_EQ(pool->free_async(live[victim], kExpandStream).status, FreeStatus::ok);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    if (i % 97 == 0) {
      ASSERT_TRUE(pool->release_cached().ok());
    }
    ASSERT_EQ(pool->check_invariants(), "") << i;
  }
}

TEST_F(ExpandableTest, DestroyedStreamGivesItsRangeBack) {
  const DevicePtr a = pool->allocate_async(30 * MiB, kExpandStream).ptr;
  const DevicePtr b = pool->allocate_async(30 * MiB, kExpandStream).ptr;
  ASSERT_EQ(pool->free_async(a, kExpandStream).status, FreeStatus::ok);
  pool->stream_destroyed(kExpandStream);
  EXPECT_EQ(up.ranges.size(), 1u) << "b is still live in it";
  EXPECT_EQ(pool->stats().reserved, 30 * MiB) << "a's pages went back at once";
  ASSERT_EQ(pool->free_async(b, kExpandStream).status, FreeStatus::ok);
  EXPECT_TRUE(up.ranges.empty());
  EXPECT_EQ(pool->stats().reserved, 0u);
  // A new stream with the same handle starts a range of its own.
  EXPECT_NE(pool->allocate_async(30 * MiB, kExpandStream).ptr, 0u);
  EXPECT_EQ(up.ranges.size(), 1u);
}

// The block an address lies in, for the driver's questions about an
// allocation (cuMemGetAddressRange, pointer attributes, IPC handles).
TEST_F(ExpandableTest, FindContainingNamesTheLiveBlockAndWhetherItCanBeShared) {
  const Allocation first = pool->allocate(4096);      // starts a 2 MiB segment
  const Allocation second = pool->allocate(10000);    // inside the same segment
  const Allocation large = pool->allocate(30 * MiB);  // in the expandable range
  ASSERT_TRUE(first.ok() && second.ok() && large.ok());
  ContainingBlock c;
  ASSERT_EQ(pool->find_containing(second.ptr + 9999, &c), Containing::live);
  EXPECT_EQ(c.base, second.ptr);
  EXPECT_EQ(c.size, 10000u) << "what was asked for, not the rounded block";
  EXPECT_FALSE(c.shareable) << "an IPC handle would open the segment's base";
  ASSERT_EQ(pool->find_containing(first.ptr, &c), Containing::live);
  EXPECT_TRUE(c.shareable) << "the block starts an ordinary segment";
  EXPECT_EQ(c.segment_base, first.ptr);
  ASSERT_EQ(pool->find_containing(large.ptr + 12345, &c), Containing::live);
  EXPECT_EQ(c.base, large.ptr);
  EXPECT_FALSE(c.shareable) << "cuMemCreate memory has no legacy IPC handle";
  ASSERT_EQ(pool->free(second.ptr).status, FreeStatus::ok);
  EXPECT_EQ(pool->find_containing(second.ptr, &c), Containing::not_live) << "pending after cudaFree";
  EXPECT_EQ(pool->find_containing(0x1000, &c), Containing::not_owned);
  EXPECT_EQ(pool->free(first.ptr).status, FreeStatus::ok);
  EXPECT_EQ(pool->free(large.ptr).status, FreeStatus::ok);
}

// Memory cached for one stream, or for small blocks, goes back before
// another sub-pool's growth would raise the peak of reserved memory (the
// tight policy, across sub-pools): otherwise reserved memory grows to the
// sum of every sub-pool's own peak.
TEST_F(ExpandableTest, GrowthElsewhereTakesTheCacheOfOtherSubPoolsFirst) {
  constexpr StreamHandle kOther = 0x7;
  const DevicePtr a = pool->allocate_async(30 * MiB, kExpandStream).ptr;
  ASSERT_EQ(pool->free_async(a, kExpandStream).status, FreeStatus::ok);
  EXPECT_EQ(pool->stats().reserved, 30 * MiB) << "cached for kExpandStream";
  const DevicePtr b = pool->allocate_async(30 * MiB, kOther).ptr;
  ASSERT_NE(b, 0u);
  EXPECT_EQ(pool->stats().reserved, 30 * MiB) << "kExpandStream's pages went back before kOther's were mapped";
  EXPECT_EQ(pool->stats().peak_reserved, 30 * MiB);
  // Small blocks' segments likewise.
  std::vector<DevicePtr> small;
  for (int i = 0; i < 8; ++i) small.push_back(pool->allocate(512 * KiB).ptr);
  for (DevicePtr p : small) ASSERT_EQ(pool->free(p).status, FreeStatus::ok);
  const std::uint64_t ticket = pool->sync_ticket();
  pool->device_synchronized(ticket);
  const std::size_t before = pool->stats().reserved;  // 30 MiB + 2 small segments
  ASSERT_EQ(pool->free_async(b, kOther).status, FreeStatus::ok);
  const DevicePtr c = pool->allocate_async(34 * MiB, kExpandStream).ptr;
  ASSERT_NE(c, 0u);
  EXPECT_LE(pool->stats().reserved, before) << "free pages and segments elsewhere made room";
  EXPECT_EQ(pool->free_async(c, kExpandStream).status, FreeStatus::ok);
}

// Pages go back without a synchronisation only when no device work can use
// them: a block freed with cudaFree became free through one, a block freed
// in its own stream's order did not (the device may still run that
// stream's work on it).
TEST_F(ExpandableTest, UnmappingWaitsForTheDeviceOnlyAfterStreamOrderedFrees) {
  constexpr StreamHandle kOther = 0x7;
  // cudaFree'd, then the application synchronised: safe as it is.
  const DevicePtr a = pool->allocate(30 * MiB).ptr;
  ASSERT_EQ(pool->free(a).status, FreeStatus::ok);
  const std::uint64_t ticket = pool->sync_ticket();
  up.synchronize();
  pool->device_synchronized(ticket);
  std::uint64_t syncs = up.synchronize_calls;
  const DevicePtr b = pool->allocate_async(30 * MiB, kOther).ptr;  // takes a's pages back first
  ASSERT_NE(b, 0u);
  EXPECT_EQ(pool->stats().reserved, 30 * MiB);
  EXPECT_EQ(up.synchronize_calls, syncs) << "the pages of a synchronised free go back without waiting";
  // Freed in kOther's own order: free at once, but maybe still in use.
  ASSERT_EQ(pool->free_async(b, kOther).status, FreeStatus::ok);
  syncs = up.synchronize_calls;
  const DevicePtr c = pool->allocate_async(30 * MiB, kExpandStream).ptr;
  ASSERT_NE(c, 0u);
  EXPECT_EQ(pool->stats().reserved, 30 * MiB);
  EXPECT_EQ(up.synchronize_calls, syncs + 1) << "one wait before kOther's pages went back";
  EXPECT_EQ(pool->free_async(c, kExpandStream).status, FreeStatus::ok);
}
