// DevicePool::device_reset keeps exactly what a real device reset keeps
// (CUDA 13, cuda_runtime_api.h: "cudaDeviceReset() will not destroy memory
// allocations by cudaMallocAsync() and cudaMallocFromPoolAsync()"): the
// context's memory (cudaMalloc's segments) is dropped without calling the
// upstream and reported to the observer; stream-ordered segments survive with
// their live blocks, which can be freed afterwards; nothing waits on the
// events the reset destroyed.
#include <gtest/gtest.h>

#include "cumemtrace/pool/device_pool.h"
#include "pool_test_support.h"

using namespace pool_test;

namespace {

constexpr StreamHandle kStream = 0x5000;
constexpr StreamHandle kOther = 0x6000;

struct ResetFixture : ::testing::Test {
  FakeUpstream up;
  RecordingObserver observer;
  std::unique_ptr<DevicePool> pool;

  void make(const char* conf = "device_shards:1") {
    pool = std::make_unique<DevicePool>(up, config_from(conf), 0, &observer);
  }
  void TearDown() override {
    EXPECT_EQ(pool->check_invariants(), "");
    EXPECT_TRUE(up.violations.empty()) << up.violations.front();
  }
  // The order of the hooks: the real reset, then the pool.
  void reset() {
    up.reset_device();
    pool->device_reset();
  }
  // Segments the observer was told about and the upstream still holds agree.
  void expect_observer_matches_upstream() { EXPECT_EQ(observer.reserved, up.used); }
};

}  // namespace

TEST_F(ResetFixture, ContextMemoryIsDroppedWithoutCallingTheUpstream) {
  make();
  const Allocation live = pool->allocate(MiB);
  const Allocation cached = pool->allocate(30 * MiB);
  const Allocation pending = pool->allocate(4000);
  ASSERT_TRUE(live.ok() && cached.ok() && pending.ok());
  EXPECT_FALSE(live.survives_reset);
  ASSERT_EQ(pool->free(cached.ptr).status, FreeStatus::ok);
  pool->device_synchronized(pool->sync_ticket());
  ASSERT_EQ(pool->free(pending.ptr).status, FreeStatus::ok);  // still pending
  const auto releases = up.release_calls;
  reset();
  EXPECT_EQ(up.release_calls, releases);
  const PoolStats s = pool->stats();
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.pending_free, 0u);
  EXPECT_EQ(s.segments, 0u);
  EXPECT_EQ(observer.reserved, 0u);  // a segment_free for each dropped segment
  expect_observer_matches_upstream();
  EXPECT_EQ(pool->free(live.ptr).status, FreeStatus::not_owned);
  EXPECT_FALSE(pool->owns(cached.ptr));
  // The pool works afterwards.
  const Allocation fresh = pool->allocate(MiB);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(pool->free(fresh.ptr).status, FreeStatus::ok);
}

TEST_F(ResetFixture, StreamOrderedMemorySurvivesAndIsFreedAfterwards) {
  up.stream_ordered = true;
  make();
  const Allocation device_wide = pool->allocate(1000);
  const Allocation kept = pool->allocate_async(6000, kStream);
  const Allocation fenced = pool->allocate_async(8000, kStream);
  const Allocation cached = pool->allocate_async(50 * MiB, kOther);
  ASSERT_TRUE(device_wide.ok() && kept.ok() && fenced.ok() && cached.ok());
  EXPECT_FALSE(device_wide.survives_reset);
  EXPECT_TRUE(kept.survives_reset);
  EXPECT_EQ(up.segments.size(), 1u);
  EXPECT_EQ(up.stream_segments.size(), 2u);
  EXPECT_EQ(up.stream_segments.begin()->second.second, kStream);
  ASSERT_EQ(pool->free_async(cached.ptr, kOther).status, FreeStatus::ok);  // cached on kOther
  ASSERT_EQ(pool->free_async(fenced.ptr, kOther).status, FreeStatus::ok);  // behind a fence
  ASSERT_GT(pool->stats().pending_free, 0u);

  reset();  // destroys the fence: the pool must not query or destroy it
  EXPECT_TRUE(pool->owns(kept.ptr));
  EXPECT_FALSE(pool->owns(device_wide.ptr));
  PoolStats s = pool->stats();
  EXPECT_EQ(s.allocated, kept.block);
  EXPECT_EQ(s.pending_free, 0u);
  // kOther's stream is gone: its cached segment went back to the upstream.
  EXPECT_EQ(up.stream_segments.size(), 1u);
  expect_observer_matches_upstream();

  BlockInfo info;
  ASSERT_TRUE(pool->find(kept.ptr, &info));
  EXPECT_EQ(info.size, 6000u);
  // Freed after the reset (the stream handle may be a new stream by now):
  // the segment holds nothing else, so it goes back.
  const FreeResult r = pool->free_async(kept.ptr, kStream);
  EXPECT_EQ(r.status, FreeStatus::ok);
  EXPECT_EQ(r.size, 6000u);
  EXPECT_TRUE(up.stream_segments.empty());
  EXPECT_EQ(pool->free_async(kept.ptr, kStream).status, FreeStatus::not_owned);
  s = pool->stats();
  EXPECT_EQ(s.reserved, 0u);
  expect_observer_matches_upstream();

  // The same handle, a new stream: a fresh sub-pool and fresh memory.
  const Allocation again = pool->allocate_async(6000, kStream);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.survives_reset);
  EXPECT_EQ(pool->free_async(again.ptr, kStream).status, FreeStatus::ok);
}

TEST_F(ResetFixture, WithoutStreamOrderedSegmentsEverythingIsDropped) {
  make();
  const Allocation a = pool->allocate_async(6000, kStream);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a.survives_reset);
  reset();
  EXPECT_FALSE(pool->owns(a.ptr));
  EXPECT_EQ(pool->stats().reserved, 0u);
  expect_observer_matches_upstream();
}

TEST_F(ResetFixture, ExpandableRangesSurviveOnlyInStreamSubPools) {
  up = FakeUpstream(kUnlimited, 2 * MiB);
  up.stream_ordered = true;
  make("device_shards:1,expandable_segments:true");
  const Allocation device_wide = pool->allocate(30 * MiB);
  const Allocation streamed = pool->allocate_async(30 * MiB, kStream);
  ASSERT_TRUE(device_wide.ok() && streamed.ok());
  EXPECT_FALSE(device_wide.survives_reset);
  EXPECT_TRUE(streamed.survives_reset);
  ASSERT_EQ(up.ranges.size(), 2u);
  // The reset leaves mapped pages alone (cuMemCreate memory is no context's):
  // the pool gives back the device-wide range, whose blocks were cudaMalloc's.
  reset();
  EXPECT_EQ(up.ranges.size(), 1u);
  EXPECT_TRUE(pool->owns(streamed.ptr));
  EXPECT_FALSE(pool->owns(device_wide.ptr));
  EXPECT_EQ(pool->stats().allocated, streamed.block);
  expect_observer_matches_upstream();
  ASSERT_EQ(pool->free_async(streamed.ptr, kStream).status, FreeStatus::ok);
  EXPECT_TRUE(up.ranges.empty());
  EXPECT_EQ(up.used, 0u);
  expect_observer_matches_upstream();
}
