// The stack interner: dense ids, collisions told apart by the frames, full
// tables, and — under many threads — one `on_new` per stack, always finished
// before any thread is given the stack's id.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "stacks/stack_table.h"

using cumemtrace::preload::StackTable;
using Stack = std::vector<std::uintptr_t>;

namespace {

std::uint64_t everything_collides(std::span<const std::uintptr_t>) { return 42; }
std::uint64_t hashes_to_zero(std::span<const std::uintptr_t>) { return 0; }
// Few distinct hashes: long collision chains under concurrency.
std::uint64_t sixteen_buckets(std::span<const std::uintptr_t> ips) { return ips[0] % 16; }

Stack make_stack(std::size_t seed, std::size_t depth = 5) {
  Stack s;
  for (std::size_t i = 0; i < depth; ++i) s.push_back(0x400000 + seed * 0x1000 + i * 0x10);
  return s;
}

struct Recording {
  std::vector<std::pair<std::uint32_t, Stack>> created;
  auto callback() {
    return [this](std::uint32_t id, std::span<const std::uintptr_t> ips) {
      created.emplace_back(id, Stack(ips.begin(), ips.end()));
    };
  }
};

TEST(StackTable, IdsAreDenseInOrderOfFirstSightAndStable) {
  StackTable table(64, 1024);
  Recording rec;
  const Stack a = make_stack(1), b = make_stack(2), c = make_stack(1, 4);  // c: a prefix of a
  EXPECT_EQ(table.intern(a, rec.callback()), 1u);
  EXPECT_EQ(table.intern(b, rec.callback()), 2u);
  EXPECT_EQ(table.intern(a, rec.callback()), 1u);
  EXPECT_EQ(table.intern(c, rec.callback()), 3u);
  EXPECT_EQ(table.intern(b, rec.callback()), 2u);
  ASSERT_EQ(rec.created.size(), 3u);
  EXPECT_EQ(rec.created[0], std::make_pair(1u, a));
  EXPECT_EQ(rec.created[1], std::make_pair(2u, b));
  EXPECT_EQ(rec.created[2], std::make_pair(3u, c));
  EXPECT_EQ(table.size(), 3u);
  EXPECT_FALSE(table.overflowed());
}

TEST(StackTable, EmptyAndTooDeepStacksGetNoId) {
  StackTable table(64, 4096);
  Recording rec;
  EXPECT_EQ(table.intern(Stack{}, rec.callback()), 0u);
  EXPECT_EQ(table.intern(make_stack(1, StackTable::kMaxDepth + 1), rec.callback()), 0u);
  EXPECT_EQ(table.intern(make_stack(1, StackTable::kMaxDepth), rec.callback()), 1u);
  EXPECT_EQ(rec.created.size(), 1u);
}

TEST(StackTable, CollidingHashesAreToldApartByTheirFrames) {
  for (auto hasher : {&everything_collides, &hashes_to_zero}) {
    StackTable table(256, 8192, hasher);
    Recording rec;
    for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(table.intern(make_stack(i), rec.callback()), i + 1);
    for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(table.intern(make_stack(i), rec.callback()), i + 1);
    EXPECT_EQ(rec.created.size(), 100u);
  }
}

TEST(StackTable, FullTableTurnsAwayOnlyNewStacks) {
  StackTable table(8, 1024);  // 3/4 of 8 slots usable
  Recording rec;
  for (std::size_t i = 0; i < 6; ++i) ASSERT_EQ(table.intern(make_stack(i), rec.callback()), i + 1);
  EXPECT_EQ(table.intern(make_stack(6), rec.callback()), 0u);
  EXPECT_TRUE(table.overflowed());
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(table.intern(make_stack(i), rec.callback()), i + 1);
  EXPECT_EQ(rec.created.size(), 6u);
}

TEST(StackTable, ExhaustedFrameStorageTurnsAwayNewStacks) {
  StackTable table(64, 10);
  Recording rec;
  EXPECT_EQ(table.intern(make_stack(1, 4), rec.callback()), 1u);
  EXPECT_EQ(table.intern(make_stack(2, 4), rec.callback()), 2u);
  EXPECT_EQ(table.intern(make_stack(3, 4), rec.callback()), 0u);
  EXPECT_EQ(table.intern(make_stack(3, 4), rec.callback()), 0u);
  EXPECT_TRUE(table.overflowed());
  EXPECT_EQ(table.intern(make_stack(1, 4), rec.callback()), 1u);
  EXPECT_EQ(rec.created.size(), 2u);
}

TEST(StackTable, AStackWhoseEventFailedIsNeverGivenAnId) {
  StackTable table(64, 1024);
  const Stack a = make_stack(1), b = make_stack(2);
  EXPECT_THROW(table.intern(a, [](std::uint32_t, std::span<const std::uintptr_t>) {
    throw std::runtime_error("out of memory while naming frames");
  }), std::runtime_error);
  int calls = 0;
  auto count = [&](std::uint32_t, std::span<const std::uintptr_t>) { ++calls; };
  EXPECT_EQ(table.intern(a, count), 0u);
  EXPECT_EQ(calls, 0);
  EXPECT_NE(table.intern(b, count), 0u);
  EXPECT_EQ(calls, 1);
}

// Every thread interns every stack of a shared set, in its own order. A
// global sequence orders "event written" (the end of on_new) against "id
// used" (after intern returns): each use must come after its stack's event.
TEST(StackTable, ConcurrentThreadsAgreeAndEventsPrecedeEveryUse) {
  for (auto hasher : {&StackTable::default_hash, &sixteen_buckets}) {
    constexpr std::size_t kThreads = 8, kStacks = 300, kRounds = 3;
    StackTable table(1024, 1 << 16, hasher);
    std::atomic<std::uint64_t> sequence{0};
    std::mutex log_mutex;
    std::map<std::uint32_t, std::uint64_t> written_at;  // id -> sequence
    std::map<std::uint32_t, Stack> stack_of;
    std::atomic<int> new_calls{0};
    std::vector<std::vector<std::pair<std::uint32_t, std::uint64_t>>> uses(kThreads);
    std::vector<std::vector<std::uint32_t>> ids(kThreads, std::vector<std::uint32_t>(kStacks));

    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (std::size_t round = 0; round < kRounds; ++round) {
          for (std::size_t k = 0; k < kStacks; ++k) {
            const std::size_t i = (k * 7 + t * 13 + round) % kStacks;
            const Stack s = make_stack(i, 3 + i % 5);
            const std::uint32_t id = table.intern(s, [&](std::uint32_t new_id, std::span<const std::uintptr_t> ips) {
              new_calls.fetch_add(1);
              // Widen the window in which other threads find the slot unpublished.
              std::this_thread::sleep_for(std::chrono::microseconds(i % 3 == 0 ? 200 : 0));
              std::scoped_lock lock(log_mutex);
              stack_of[new_id] = Stack(ips.begin(), ips.end());
              written_at[new_id] = sequence.fetch_add(1);
            });
            uses[t].emplace_back(id, sequence.fetch_add(1));
            if (round == 0) {
              ids[t][i] = id;
            } else {
              EXPECT_EQ(ids[t][i], id);
            }
          }
        }
      });
    }
    for (auto& th : threads) th.join();

    EXPECT_EQ(new_calls.load(), static_cast<int>(kStacks));
    EXPECT_EQ(table.size(), kStacks);
    for (std::size_t i = 0; i < kStacks; ++i) {
      for (std::size_t t = 1; t < kThreads; ++t) EXPECT_EQ(ids[t][i], ids[0][i]) << "stack " << i;
      EXPECT_EQ(stack_of[ids[0][i]], make_stack(i, 3 + i % 5));
    }
    // Ids are exactly 1..kStacks.
    std::vector<std::uint32_t> all(ids[0]);
    std::sort(all.begin(), all.end());
    for (std::size_t i = 0; i < kStacks; ++i) EXPECT_EQ(all[i], i + 1);
    for (const auto& thread_uses : uses) {
      for (const auto& [id, at] : thread_uses) {
        ASSERT_TRUE(written_at.contains(id)) << id;
        EXPECT_LT(written_at[id], at) << "id " << id << " used before its event was written";
      }
    }
  }
}

}  // namespace
