// Many threads on one pool: device-wide calls (sharded per thread) and
// per-thread streams, frees of blocks other threads allocated. Checks that
// live blocks never overlap across threads and that everything adds up.
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cumemtrace/pool/device_pool.h"
#include "pool_test_support.h"

using namespace pool_test;

namespace {

struct ThreadsCase {
  const char* conf;
  std::size_t capacity;
  std::size_t vm_granularity;
};

class PoolThreadsTest : public ::testing::TestWithParam<ThreadsCase> {};

}  // namespace

// Roomy device; a small one where threads meet in the out-of-memory ladder;
// expandable segments on a small one (mapping, recycling, unmapping).
INSTANTIATE_TEST_SUITE_P(Configs, PoolThreadsTest,
                         ::testing::Values(ThreadsCase{"device_shards:4", 4096 * MiB, 0},
                                           ThreadsCase{"device_shards:4,segment_policy:pytorch", 160 * MiB, 0},
                                           ThreadsCase{"expandable_segments:true", 160 * MiB, 2 * MiB}),
                         // Named by the setting (gtest would print the struct's
                         // bytes, a string pointer among them: a new name per build).
                         [](const ::testing::TestParamInfo<ThreadsCase>& info) {
                           std::string name(info.param.conf);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST_P(PoolThreadsTest, EightThreadsKeepBlocksDisjointAndCountersExact) {
  FakeUpstream up(GetParam().capacity, GetParam().vm_granularity);
  DevicePool pool(up, config_from(GetParam().conf));
  std::mutex mu;
  std::map<DevicePtr, std::size_t> live;  // every thread's blocks, for the overlap check
  std::vector<DevicePtr> handoff;         // blocks passed to another thread to free
  std::atomic<bool> failed{false};

  auto worker = [&](int id) {
    std::mt19937 rng(id);
    const StreamHandle own = 0x100 + id;
    std::vector<std::pair<DevicePtr, bool>> mine;  // (ptr, stream-ordered)
    for (int i = 0; i < 20000 && !failed; ++i) {
      if (mine.size() < 64 && rng() % 2) {
        const std::size_t size = 1 + rng() % (rng() % 8 == 0 ? 8 * MiB : 64 * KiB);
        const bool so = rng() % 2;
        const Allocation a = so ? pool.allocate_async(size, own) : pool.allocate(size);
        if (!a.ok()) continue;
        std::lock_guard lock(mu);
        auto next = live.lower_bound(a.ptr);
        const bool overlap = (next != live.end() && a.ptr + a.block > next->first) ||
                             (next != live.begin() && std::prev(next)->first + std::prev(next)->second > a.ptr);
        if (overlap) failed = true;
        live[a.ptr] = a.block;
        mine.emplace_back(a.ptr, so);
      } else if (!mine.empty()) {
        const auto [p, so] = mine.back();
        mine.pop_back();
        {
          std::lock_guard lock(mu);
          live.erase(p);
          if (rng() % 8 == 0) {
            handoff.push_back(p);  // another thread frees it
            continue;
          }
        }
        const FreeResult r = so ? pool.free_async(p, own) : pool.free(p);
        if (r.status != FreeStatus::ok) failed = true;
      }
      DevicePtr foreign = 0;
      {
        std::lock_guard lock(mu);
        if (!handoff.empty()) {
          foreign = handoff.back();
          handoff.pop_back();
        }
      }
      if (foreign && pool.free(foreign).status != FreeStatus::ok) failed = true;
    }
    for (const auto& [p, so] : mine) {
      {
        std::lock_guard lock(mu);
        live.erase(p);
      }
      if ((so ? pool.free_async(p, own) : pool.free(p)).status != FreeStatus::ok) failed = true;
    }
  };
  std::vector<std::thread> threads;
  for (int id = 0; id < 8; ++id) threads.emplace_back(worker, id);
  for (auto& t : threads) t.join();
  for (DevicePtr p : handoff) EXPECT_EQ(pool.free(p).status, FreeStatus::ok);
  EXPECT_FALSE(failed) << "overlapping blocks or a failed free";
  EXPECT_EQ(pool.check_invariants(), "");
  PoolStats s = pool.stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.reserved, up.used);
  EXPECT_TRUE(pool.release_cached().ok());
  s = pool.stats();
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(up.used, 0u);
  EXPECT_TRUE(up.violations.empty());
}
