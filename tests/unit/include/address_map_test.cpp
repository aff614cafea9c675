// The live-set hash map against std::unordered_map as the model: random
// inserts, overwrites, finds and erases, with keys chosen to collide so that
// long probe runs and backward-shift deletion across the wrap are exercised.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "cumemtrace/address_map.h"

namespace cumemtrace {
namespace {

TEST(AddressMap, BehavesLikeAnUnorderedMapUnderRandomOperations) {
  AddressMap<std::uint64_t> map;
  std::unordered_map<std::uint64_t, std::uint64_t> model;
  std::mt19937_64 rng(12345);
  // Few distinct keys, 512-byte aligned like device pointers: many hits,
  // many collisions, the table grows and shrinks its live count repeatedly.
  auto key = [&] { return 0x7f0000000000ull + (rng() % 4096) * 512; };
  for (int step = 0; step < 300000; ++step) {
    const std::uint64_t k = key();
    switch (rng() % 4) {
      case 0: {
        const std::uint64_t v = rng();
        EXPECT_EQ(map.insert(k, v), model.insert_or_assign(k, v).second);
        break;
      }
      case 3: {  // find_or_insert: an absent key comes back as a new, default value
        bool inserted = false;
        std::uint64_t& value = map.find_or_insert(k, inserted);
        const auto [it, was_absent] = model.try_emplace(k, 0);
        EXPECT_EQ(inserted, was_absent) << "step " << step;
        EXPECT_EQ(value, it->second) << "step " << step;
        value = it->second = rng();
        break;
      }
      case 1: {
        std::uint64_t removed = 0;
        const auto it = model.find(k);
        ASSERT_EQ(map.erase(k, &removed), it != model.end()) << "step " << step;
        if (it != model.end()) {
          EXPECT_EQ(removed, it->second);
          model.erase(it);
        }
        break;
      }
      default: {
        const std::uint64_t* found = map.find(k);
        const auto it = model.find(k);
        ASSERT_EQ(found != nullptr, it != model.end()) << "step " << step;
        if (found) {
          EXPECT_EQ(*found, it->second);
        }
      }
    }
    ASSERT_EQ(map.size(), model.size());
  }
  for (const auto& [k, v] : model) {
    const std::uint64_t* found = map.find(k);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(*found, v);
  }
  std::unordered_map<std::uint64_t, std::uint64_t> visited;
  map.for_each([&](std::uint64_t k, std::uint64_t v) { EXPECT_TRUE(visited.emplace(k, v).second) << k; });
  EXPECT_EQ(visited, model);
}

}  // namespace
}  // namespace cumemtrace
