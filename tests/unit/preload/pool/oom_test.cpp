// The out-of-memory ladder and its explanation.
#include <gtest/gtest.h>

#include "cumemtrace/pool/device_pool.h"
#include "pool_test_support.h"

using namespace pool_test;

namespace {

struct OomTest : ::testing::Test {
  FakeUpstream up{256 * MiB};
  RecordingObserver observer;
  DevicePool pool{up, config_from("device_shards:1"), 3, &observer};
  void TearDown() override {
    EXPECT_EQ(pool.check_invariants(), "");
    EXPECT_TRUE(up.violations.empty()) << up.violations.front();
  }
};

}  // namespace

TEST_F(OomTest, FragmentedDeviceFailsWithCauseFragmentationAndExactFigures) {
  // Fill the device with 1 MiB blocks (two per 2 MiB segment), then free
  // every other one: half the device is cached free, in 1 MiB holes.
  std::vector<DevicePtr> blocks;
  for (;;) {
    const Allocation a = pool.allocate(MiB);
    if (!a.ok()) break;
    blocks.push_back(a.ptr);
  }
  ASSERT_EQ(blocks.size(), 256u);
  observer.ooms.clear();
  for (std::size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(pool.free(blocks[i]).status, FreeStatus::ok);

  const auto releases = up.release_calls;
  const Allocation big = pool.allocate(100 * MiB);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.ptr, 0u);
  EXPECT_EQ(big.result.status, UpstreamStatus::out_of_memory);
  EXPECT_EQ(big.result.code, kOomCode) << "the upstream's own code, untouched";
  const OomReport& r = big.oom.value();
  EXPECT_EQ(r.device, 3);
  EXPECT_EQ(r.size, 100 * MiB);
  EXPECT_EQ(r.block, 100 * MiB);
  EXPECT_EQ(r.allocated, 128 * MiB);
  EXPECT_EQ(r.reserved, 256 * MiB);
  EXPECT_EQ(r.cached_free, 128 * MiB);
  EXPECT_EQ(r.largest_free, MiB);
  EXPECT_EQ(r.device_free, 0u);
  EXPECT_EQ(r.device_total, 256 * MiB);
  EXPECT_EQ(r.cause, OomCause::fragmentation);
  EXPECT_STREQ(to_string(r.cause), "fragmentation");
  EXPECT_FALSE(r.stream_ordered);
  EXPECT_DOUBLE_EQ(r.fragmentation.unused_reserved, 0.5);
  EXPECT_DOUBLE_EQ(r.fragmentation.free_scatter, 1.0 - 1.0 / 128.0);
  EXPECT_EQ(r.fragmentation.inactive_split, 128 * MiB);
  ASSERT_EQ(observer.ooms.size(), 1u);
  EXPECT_EQ(observer.ooms[0].cached_free, r.cached_free);
  EXPECT_EQ(up.release_calls, releases) << "no segment was wholly free";
  EXPECT_GE(up.synchronize_calls, 1u) << "the ladder synchronised before giving up";
  EXPECT_EQ(pool.stats().ooms, 2u);  // the fill's last request, and this one

  // The pool keeps working: a fitting request is served from a hole.
  const Allocation small = pool.allocate(MiB);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small.ptr, blocks[0]);
}

TEST_F(OomTest, FullDeviceFailsWithCauseCapacity) {
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 25; ++i) blocks.push_back(pool.allocate(10 * MiB).ptr);  // 25 × 10 MiB segments
  const Allocation a = pool.allocate(10 * MiB);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.oom.value().cause, OomCause::capacity);
  EXPECT_EQ(a.oom.value().device_free, 6 * MiB);
  EXPECT_EQ(a.oom.value().cached_free, 0u);
  EXPECT_EQ(a.oom.value().reserved, 250 * MiB);
  EXPECT_EQ(a.oom.value().allocated, 250 * MiB);
  EXPECT_STREQ(to_string(a.oom.value().cause), "capacity");
  // Freeing one makes room again.
  ASSERT_EQ(pool.free(blocks[3]).status, FreeStatus::ok);
  EXPECT_EQ(pool.allocate(10 * MiB).ptr, blocks[3]);
}

TEST_F(OomTest, LadderReleasesWholeFreeSegmentsOfOtherSubPoolsBeforeFailing) {
  constexpr StreamHandle s = 0x77;
  // 200 MiB cached free on a stream, wholly free segments.
  const DevicePtr a = pool.allocate_async(200 * MiB, s).ptr;
  ASSERT_EQ(pool.free_async(a, s).status, FreeStatus::ok);
  EXPECT_EQ(pool.stats().reserved, 200 * MiB);
  // A device-wide request of 100 MiB cannot use the stream's block; the
  // device has only 56 MiB left: the ladder gives the stream's segment back.
  const Allocation b = pool.allocate(100 * MiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.stats().reserved, 100 * MiB);
  EXPECT_TRUE(observer.ooms.empty());
  EXPECT_EQ(up.synchronize_calls, 0u) << "step 1 of the ladder needs no synchronisation";
}

TEST_F(OomTest, LadderSynchronisesToReclaimPendingFreesBeforeFailing) {
  // 150 MiB freed with cudaFree (pending); a 160 MiB request: the pending
  // block is too small to serve it, but giving it back makes room.
  const DevicePtr a = pool.allocate(150 * MiB).ptr;
  ASSERT_EQ(pool.free(a).status, FreeStatus::ok);
  const Allocation b = pool.allocate(160 * MiB);
  ASSERT_TRUE(b.ok());
  EXPECT_GE(up.synchronize_calls, 1u);
  EXPECT_EQ(up.segments.size(), 1u);
  EXPECT_EQ(pool.stats().reserved, 160 * MiB);
}

// The ladder's last step: memory cached free in another sub-pool, in a
// segment that still holds a live block, serves a request the device itself
// has no room for (the driver would have met it from the whole device).
namespace {

struct StreamOrderedUpstream : FakeUpstream {
  StreamOrderedUpstream() : FakeUpstream(256 * MiB) { stream_ordered = true; }
};

struct LendTest : ::testing::Test {
  static constexpr StreamHandle kA = 0x10, kB = 0x20;
  StreamOrderedUpstream up;
  RecordingObserver observer;
  DevicePool pool{up, config_from("device_shards:1"), 0, &observer};
  DevicePtr kept = 0;  // stream A's live 6 MiB block; its 20 MiB segment has 14 MiB free

  void fill_device_leaving_a_hole() {
    const Allocation a = pool.allocate_async(6 * MiB, kA);
    ASSERT_TRUE(a.ok());
    kept = a.ptr;
    ASSERT_TRUE(pool.allocate_async(236 * MiB, kB).ok());  // the device is full
    ASSERT_EQ(pool.stats().reserved, 256 * MiB);
  }
  bool inside_the_hole(DevicePtr p) const { return p > kept && p < kept + 20 * MiB; }
  void TearDown() override {
    EXPECT_EQ(pool.check_invariants(), "");
    EXPECT_TRUE(up.violations.empty()) << up.violations.front();
  }
};

}  // namespace

TEST_F(LendTest, StreamRequestIsLentFreeMemoryOfAnotherStreamsSubPool) {
  fill_device_leaving_a_hole();
  const auto syncs = up.synchronize_calls;
  const Allocation lent = pool.allocate_async(10 * MiB, kB);
  ASSERT_TRUE(lent.ok()) << "14 MiB cached free in stream A's segment";
  EXPECT_TRUE(observer.ooms.empty());
  EXPECT_TRUE(inside_the_hole(lent.ptr));
  EXPECT_TRUE(lent.survives_reset) << "stream-ordered memory, as stream B's own";
  EXPECT_GT(up.synchronize_calls, syncs) << "taken only after the device finished A's work";
  // Freed in B's order, it waits for B to reach the free before A reuses it.
  ASSERT_EQ(pool.free_async(lent.ptr, kB).status, FreeStatus::ok);
  EXPECT_EQ(pool.stats().pending_free, 10 * MiB);
}

TEST_F(LendTest, DeviceWideRequestIsLentAStreamsFreeMemoryThatAResetDestroys) {
  fill_device_leaving_a_hole();
  const Allocation lent = pool.allocate(10 * MiB);
  ASSERT_TRUE(lent.ok());
  EXPECT_TRUE(inside_the_hole(lent.ptr));
  EXPECT_FALSE(lent.survives_reset) << "cudaMalloc's memory, wherever it lies";
  up.reset_device();
  pool.device_reset();
  EXPECT_EQ(pool.free(lent.ptr).status, FreeStatus::invalid_pointer) << "as CUDA refuses a pointer from before";
  EXPECT_EQ(pool.free_async(kept, kA).status, FreeStatus::ok) << "stream-ordered memory survived";
}

TEST_F(LendTest, StreamRequestIsNotLentDeviceWideMemory) {
  // A reset would destroy a stream's block in a cudaMalloc segment, which
  // CUDA's does not: the request fails as the driver would.
  ASSERT_TRUE(pool.allocate(6 * MiB).ok());
  ASSERT_TRUE(pool.allocate_async(236 * MiB, kB).ok());
  const Allocation refused = pool.allocate_async(10 * MiB, kB);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.oom.value().cause, OomCause::fragmentation);
}

TEST_F(OomTest, HugeRequestFailsCleanly) {
  const Allocation a = pool.allocate(~std::size_t{0} - 100);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.result.status, UpstreamStatus::out_of_memory);
  EXPECT_EQ(a.result.code, kOomCode);
  EXPECT_EQ(a.oom.value().cause, OomCause::capacity);
  const Allocation b = pool.allocate(300 * MiB);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.oom.value().cause, OomCause::capacity);
  EXPECT_EQ(b.oom.value().device_free, 256 * MiB);
  EXPECT_NE(pool.allocate(MiB).ptr, 0u);
  EXPECT_EQ(observer.ooms.size(), 2u);
}

TEST_F(OomTest, GarbageCollectionThresholdReleasesCachedSegmentsBeforeGrowing) {
  DevicePool gc_pool(up, config_from("device_shards:1,segment_policy:pytorch,garbage_collection_threshold:0.5"));
  constexpr StreamHandle s = 0x9;
  const DevicePtr a = gc_pool.allocate_async(100 * MiB, s).ptr;
  ASSERT_EQ(gc_pool.free_async(a, s).status, FreeStatus::ok);
  // 100 + 60 MiB would exceed half of 256 MiB: the free segment goes first.
  ASSERT_TRUE(gc_pool.allocate_async(110 * MiB, s).ok());
  EXPECT_EQ(gc_pool.stats().reserved, 110 * MiB);
  EXPECT_EQ(gc_pool.check_invariants(), "");
  // Without the threshold the cached segment stays.
  DevicePool plain(up, config_from("device_shards:1,segment_policy:pytorch"));
  const DevicePtr b = plain.allocate_async(20 * MiB, s).ptr;
  ASSERT_EQ(plain.free_async(b, s).status, FreeStatus::ok);
  ASSERT_TRUE(plain.allocate_async(30 * MiB, s).ok());
  EXPECT_EQ(plain.stats().reserved, 50 * MiB);
}

TEST_F(OomTest, ReleaseThresholdTrimsCachedSegmentsWhenThePoolSynchronises) {
  DevicePool trim_pool(up, config_from("device_shards:1,release_threshold_mb:32"));
  std::vector<DevicePtr> p;
  for (int i = 0; i < 4; ++i) p.push_back(trim_pool.allocate(20 * MiB).ptr);
  for (DevicePtr x : p) ASSERT_EQ(trim_pool.free(x).status, FreeStatus::ok);
  // The next miss that synchronises keeps at most 32 MiB of free segments.
  ASSERT_TRUE(trim_pool.allocate(20 * MiB).ok());
  const PoolStats st = trim_pool.stats();
  EXPECT_LE(st.reserved - st.allocated, 32 * MiB);
  EXPECT_EQ(trim_pool.check_invariants(), "");
}
