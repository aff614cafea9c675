// The pool on a device it can order without waiting for it
// (Upstream::order_device, what libcumemtrace.so's upstream does on a GPU;
// issue 30): memory freed with cudaFree is handed out again after an
// ordering, never after a synchronisation; pages go back to the driver only
// once an ordering made after their last use has completed; moving pages to
// where a request needs them keeps their physical memory.
#include <gtest/gtest.h>

#include <memory>

#include "cumemtrace/pool/device_pool.h"
#include "pool_test_support.h"

using namespace pool_test;

namespace {

constexpr StreamHandle kS = 0x51;

struct OrderingTest : ::testing::Test {
  FakeUpstream up{kUnlimited, 2 * MiB};
  std::unique_ptr<DevicePool> pool;
  void SetUp() override { make(""); }
  void make(const char* conf) {
    pool.reset();
    up.ordering = true;
    pool = std::make_unique<DevicePool>(up, config_from(conf));
  }
  void TearDown() override {
    EXPECT_EQ(pool->check_invariants(), "");
    EXPECT_TRUE(up.violations.empty()) << up.violations.front();
  }
};

}  // namespace

TEST_F(OrderingTest, CudaFreedMemoryComesBackAfterAnOrderingWithoutAWait) {
  make("device_shards:1");
  const DevicePtr a = pool->allocate(MiB).ptr;
  ASSERT_EQ(pool->free(a).status, FreeStatus::ok);
  EXPECT_NE(pool->allocate(MiB).ptr, a) << "the other half of the segment first";
  // Only the pending block could serve: the device is ordered (whatever
  // uses `a` next runs after whatever used it), and the host goes on.
  EXPECT_EQ(pool->allocate(MiB).ptr, a);
  EXPECT_EQ(up.order_calls, 1u);
  EXPECT_EQ(up.synchronize_calls, 0u);
  EXPECT_EQ(pool->stats().orderings, 1u);
  EXPECT_EQ(pool->stats().synchronizes, 0u);
}

TEST_F(OrderingTest, AMallocFreeLoopNeverWaits) {
  for (int i = 0; i < 50; ++i) {
    const Allocation a = pool->allocate(300 * MiB);
    ASSERT_TRUE(a.ok());
    ASSERT_EQ(pool->free(a.ptr).status, FreeStatus::ok);
  }
  EXPECT_EQ(pool->stats().peak_reserved, 300 * MiB);
  EXPECT_EQ(up.synchronize_calls, 0u);
  EXPECT_GE(up.order_calls, 49u);
}

// The tight policy moves pages from free holes rather than raise the peak,
// but only pages no queued work can still touch: cuMemUnmap does not wait
// (pytorch/pytorch#196258), and a wait would stop the host from running
// ahead of the GPU. A hole freed in its stream's order a moment ago may
// still be in use: the range grows instead, and the hole's pages move once
// an ordering made after the free has completed.
TEST_F(OrderingTest, OnlyIdlePagesMoveAndNothingWaits) {
  DevicePtr unmapped_busy = 0;
  std::vector<DevicePtr> recently_freed;
  up.on_unmap = [&](DevicePtr addr, std::size_t size) {
    for (DevicePtr p : recently_freed)
      if (addr < p + 30 * MiB && p < addr + size) unmapped_busy = addr;
  };
  const DevicePtr a = pool->allocate_async(30 * MiB, kS).ptr;
  const DevicePtr b = pool->allocate_async(50 * MiB, kS).ptr;
  ASSERT_EQ(pool->free_async(a, kS).status, FreeStatus::ok);
  recently_freed.push_back(a);
  const DevicePtr c = pool->allocate_async(40 * MiB, kS).ptr;
  EXPECT_EQ(c, b + 50 * MiB);
  EXPECT_EQ(pool->stats().reserved, 120 * MiB) << "a's pages may still be in use: the range grew";
  EXPECT_EQ(unmapped_busy, 0u) << "pages unmapped while work may still use them";
  // The device ran past the ordering made then: a's pages are idle now, and
  // the next growth takes them before new memory.
  up.complete_orderings();
  recently_freed.clear();
  const std::size_t new_before = up.new_map_bytes;
  const DevicePtr d = pool->allocate_async(60 * MiB, kS).ptr;
  EXPECT_EQ(d, c + 40 * MiB);
  EXPECT_EQ(pool->stats().reserved, 150 * MiB) << "a's 30 MiB moved, 30 MiB new";
  EXPECT_EQ(up.new_map_bytes - new_before, 30 * MiB)
      << "a move keeps the memory it moves (no cuMemRelease, no cuMemCreate)";
  EXPECT_EQ(up.kept, 0u) << "what a move kept was mapped or given back";
  EXPECT_EQ(up.synchronize_calls, 0u);
  for (DevicePtr p : {b, c, d}) ASSERT_EQ(pool->free_async(p, kS).status, FreeStatus::ok);
}

// Without an ordering the same moves need a synchronisation: the upstream's
// refusal makes the pool wait, as it must, never give busy pages back.
TEST_F(OrderingTest, WhereTheDeviceCannotBeOrderedThePoolSynchronisesBeforeAMove) {
  up.ordering = false;
  const DevicePtr a = pool->allocate_async(30 * MiB, kS).ptr;
  const DevicePtr b = pool->allocate_async(50 * MiB, kS).ptr;
  ASSERT_EQ(pool->free_async(a, kS).status, FreeStatus::ok);
  const DevicePtr c = pool->allocate_async(40 * MiB, kS).ptr;
  EXPECT_EQ(pool->stats().reserved, 90 * MiB) << "a's pages moved after one synchronisation";
  EXPECT_EQ(up.synchronize_calls, 1u);
  for (DevicePtr p : {b, c}) ASSERT_EQ(pool->free_async(p, kS).status, FreeStatus::ok);
}

// A request lands where its whole size is mapped already, if any free block
// has such a stretch, rather than where pages would have to be mapped.
TEST_F(OrderingTest, ARequestTakesAMappedStretchBeforeAHoleWithoutPages) {
  const DevicePtr a = pool->allocate_async(30 * MiB, kS).ptr;
  const DevicePtr b = pool->allocate_async(50 * MiB, kS).ptr;
  const DevicePtr keep = pool->allocate_async(2 * MiB, kS).ptr;
  ASSERT_EQ(pool->free_async(a, kS).status, FreeStatus::ok);
  // The program synchronised: a's pages are idle.
  pool->device_synchronized(pool->sync_ticket());
  // 40 MiB: a's 30 MiB hole is too small, the range grows by 40 MiB and the
  // hole's pages move there (reserved stays at its peak).
  const DevicePtr c = pool->allocate_async(40 * MiB, kS).ptr;
  ASSERT_NE(c, 0u);
  ASSERT_EQ(pool->stats().reserved, 92 * MiB);
  ASSERT_EQ(pool->free_async(b, kS).status, FreeStatus::ok);
  // 28 MiB fits the 30 MiB hole (best fit), whose pages are gone, and b's
  // 50 MiB, still mapped: b's, with no driver call.
  const std::uint64_t maps = up.allocate_calls;
  const DevicePtr d = pool->allocate_async(28 * MiB, kS).ptr;
  EXPECT_EQ(d, b);
  EXPECT_EQ(up.allocate_calls, maps);
  for (DevicePtr p : {c, d, keep}) ASSERT_EQ(pool->free_async(p, kS).status, FreeStatus::ok);
}
