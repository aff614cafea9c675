// Reuse-after-free safety at the pool level: cudaFree'd blocks wait for a
// device synchronisation, stream-ordered frees follow stream order, fences
// guard cross-stream reuse, destroyed streams let go of their memory.
#include <gtest/gtest.h>

#include "cumemtrace/pool/device_pool.h"
#include "pool_test_support.h"

using namespace pool_test;

namespace {

constexpr StreamHandle kS1 = 0x1001;
constexpr StreamHandle kS2 = 0x2002;

struct SafetyTest : ::testing::Test {
  FakeUpstream up;
  DevicePool pool{up, config_from("device_shards:1")};
  void TearDown() override {
    EXPECT_EQ(pool.check_invariants(), "");
    EXPECT_TRUE(up.violations.empty()) << up.violations.front();
  }
};

}  // namespace

TEST_F(SafetyTest, CudaFreedBlockIsPendingUntilASynchronisation) {
  // A 2 MiB small segment holds two 1 MiB blocks.
  const DevicePtr a = pool.allocate(MiB).ptr;
  ASSERT_EQ(pool.free(a).status, FreeStatus::ok);
  EXPECT_EQ(pool.stats().pending_free, MiB);
  // Kernels issued before the free may still write `a`: the next request
  // gets the other half of the segment, not `a`.
  const DevicePtr b = pool.allocate(MiB).ptr;
  EXPECT_NE(b, a);
  EXPECT_EQ(up.synchronize_calls, 0u);
  // Now only the pending block could serve: one synchronisation, then `a`.
  const DevicePtr c = pool.allocate(MiB).ptr;
  EXPECT_EQ(c, a);
  EXPECT_EQ(up.synchronize_calls, 1u);
  EXPECT_EQ(up.segments.size(), 1u) << "reclaimed before growing";
}

TEST_F(SafetyTest, MallocFreeLoopKeepsAConstantFootprint) {
  for (int i = 0; i < 50; ++i) {
    const Allocation a = pool.allocate(300 * MiB);
    ASSERT_TRUE(a.ok());
    ASSERT_EQ(pool.free(a.ptr).status, FreeStatus::ok);
  }
  EXPECT_EQ(up.segments.size(), 1u);
  EXPECT_EQ(pool.stats().peak_reserved, 300 * MiB);
  EXPECT_EQ(up.synchronize_calls, 49u);
}

TEST_F(SafetyTest, SmallBlockLoopsSynchroniseRarely) {
  // Thousands of pairs share one synchronisation per segment's worth.
  for (int i = 0; i < 10000; ++i) {
    const DevicePtr p = pool.allocate(4 * KiB).ptr;
    ASSERT_NE(p, 0u);
    ASSERT_EQ(pool.free(p).status, FreeStatus::ok);
  }
  EXPECT_EQ(up.segments.size(), 1u);
  EXPECT_LE(up.synchronize_calls, 10000u / 500);
}

TEST_F(SafetyTest, ApplicationSynchronisationMakesPendingBlocksReusable) {
  const DevicePtr a = pool.allocate(MiB).ptr;
  const DevicePtr b = pool.allocate(MiB).ptr;
  ASSERT_EQ(pool.free(a).status, FreeStatus::ok);
  // cudaDeviceSynchronize seen by the hooks: ticket before, report after.
  const std::uint64_t ticket = pool.sync_ticket();
  pool.device_synchronized(ticket);
  EXPECT_EQ(pool.allocate(MiB).ptr, a);
  EXPECT_EQ(up.synchronize_calls, 0u);
  // A free after the ticket was taken is not covered by that synchronisation.
  const std::uint64_t early = pool.sync_ticket();
  ASSERT_EQ(pool.free(b).status, FreeStatus::ok);
  pool.device_synchronized(early);
  EXPECT_EQ(pool.stats().pending_free, MiB);
  EXPECT_EQ(pool.allocate(MiB).ptr, b);
  EXPECT_EQ(up.synchronize_calls, 1u) << "the pool had to synchronise itself";
}

TEST_F(SafetyTest, StreamOrderedFreeIsReusableAtOnceOnItsStreamOnly) {
  const DevicePtr a = pool.allocate_async(MiB, kS1).ptr;
  ASSERT_EQ(pool.free_async(a, kS1).status, FreeStatus::ok);
  EXPECT_EQ(pool.stats().pending_free, 0u);
  EXPECT_EQ(pool.allocate_async(MiB, kS1).ptr, a) << "reused at once on its own stream";
  EXPECT_EQ(up.synchronize_calls, 0u);
  ASSERT_EQ(pool.free_async(a, kS1).status, FreeStatus::ok);
  // Another stream might run concurrently with work still using `a`: it
  // never gets S1's memory from the pool (the tight policy may give S1's
  // free segment back to the upstream first, whose release waits for the
  // device; the fake never hands an address out twice).
  const DevicePtr other = pool.allocate_async(MiB, kS2).ptr;
  EXPECT_FALSE(other >= a && other < a + 2 * MiB) << "another stream got memory of S1's segment";
  const DevicePtr device_wide = pool.allocate(MiB).ptr;
  EXPECT_FALSE(device_wide >= a && device_wide < a + 2 * MiB);
}

TEST_F(SafetyTest, CrossStreamFreeWaitsForItsFence) {
  // Four 512 KiB blocks fill S1's 2 MiB segment; three are taken.
  const DevicePtr a = pool.allocate_async(512 * KiB, kS1).ptr;
  pool.allocate_async(512 * KiB, kS1);
  pool.allocate_async(512 * KiB, kS1);
  // Freed in S2's order: S1 may reuse it only once S2 got there.
  ASSERT_EQ(pool.free_async(a, kS2).status, FreeStatus::ok);
  EXPECT_EQ(pool.stats().pending_free, 512 * KiB);
  EXPECT_NE(pool.allocate_async(512 * KiB, kS1).ptr, a);
  // S2 finished its work: the fence completes and `a` comes back without a
  // device synchronisation.
  up.complete_stream(kS2);
  EXPECT_EQ(pool.allocate_async(512 * KiB, kS1).ptr, a);
  EXPECT_EQ(up.synchronize_calls, 0u);
  EXPECT_EQ(up.segments.size(), 1u);
}

TEST_F(SafetyTest, PendingFenceIsResolvedBySynchronisingBeforeGrowth) {
  const DevicePtr a = pool.allocate_async(300 * MiB, kS1).ptr;
  ASSERT_EQ(pool.free_async(a, kS2).status, FreeStatus::ok);
  // The fence is still pending; the only memory that could serve is behind
  // it: one synchronisation instead of a second 300 MiB segment.
  EXPECT_EQ(pool.allocate_async(300 * MiB, kS1).ptr, a);
  EXPECT_EQ(up.synchronize_calls, 1u);
  EXPECT_EQ(up.segments.size(), 1u);
}

TEST_F(SafetyTest, DeviceWideBlockFreedInStreamOrderUsesAFence) {
  const DevicePtr a = pool.allocate(512 * KiB).ptr;
  pool.allocate(512 * KiB);
  pool.allocate(512 * KiB);
  ASSERT_EQ(pool.free_async(a, kS1).status, FreeStatus::ok);
  EXPECT_NE(pool.allocate(512 * KiB).ptr, a);
  up.complete_stream(kS1);
  EXPECT_EQ(pool.allocate(512 * KiB).ptr, a);
  EXPECT_EQ(up.synchronize_calls, 0u);
}

TEST_F(SafetyTest, CudaFreeOfAStreamOrderedBlockWaitsForASynchronisation) {
  const DevicePtr a = pool.allocate_async(512 * KiB, kS1).ptr;
  pool.allocate_async(512 * KiB, kS1);
  pool.allocate_async(512 * KiB, kS1);
  ASSERT_EQ(pool.free(a).status, FreeStatus::ok);
  EXPECT_EQ(pool.stats().pending_free, 512 * KiB);
  // Even S1 may not reuse it at once: cudaFree promised nothing about order.
  EXPECT_NE(pool.allocate_async(512 * KiB, kS1).ptr, a);
  EXPECT_EQ(pool.allocate_async(512 * KiB, kS1).ptr, a);
  EXPECT_EQ(up.synchronize_calls, 1u);
}

TEST_F(SafetyTest, DestroyedStreamReleasesItsMemoryAndItsHandleStartsFresh) {
  // Two 5 MiB blocks share one 20 MiB segment.
  const DevicePtr a = pool.allocate_async(5 * MiB, kS1).ptr;
  const DevicePtr b = pool.allocate_async(5 * MiB, kS1).ptr;
  ASSERT_EQ(up.segments.size(), 1u);
  ASSERT_EQ(pool.free_async(a, kS1).status, FreeStatus::ok);
  pool.stream_destroyed(kS1);
  // A new stream that happens to get the same handle must not see old
  // blocks: the old stream's work may still be running.
  const DevicePtr c = pool.allocate_async(5 * MiB, kS1).ptr;
  EXPECT_FALSE(c >= a && c < a + 20 * MiB);
  EXPECT_EQ(up.segments.size(), 2u);
  // The old stream's live block can still be freed; its segment, now empty,
  // goes back.
  ASSERT_EQ(pool.free_async(b, kS1).status, FreeStatus::ok);
  EXPECT_EQ(up.segments.size(), 1u);
  EXPECT_EQ(pool.stats().reserved, 20 * MiB);
}

TEST_F(SafetyTest, ManyShortLivedStreamsReuseSubPools) {
  for (StreamHandle s = 1; s <= 6000; ++s) {
    const DevicePtr p = pool.allocate_async(4 * KiB, s).ptr;
    ASSERT_NE(p, 0u);
    ASSERT_EQ(pool.free_async(p, s).status, FreeStatus::ok);
    pool.stream_destroyed(s);
  }
  EXPECT_EQ(pool.stats().reserved, 0u);
}
