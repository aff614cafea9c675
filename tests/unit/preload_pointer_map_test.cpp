// The live table's open-addressed map (pointer_map.h), against
// std::unordered_map on random operations: inserts, finds, erases that shift
// later entries back, growth, the pointer 0 kept aside, and erase_if.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "pointer_map.h"

using cumemtrace::preload::PointerMap;

namespace {

// Keys from a small pool of 256-byte-aligned addresses (many collisions,
// many re-inserts after erase), plus 0.
std::uintptr_t random_key(std::mt19937_64& rng) {
  const std::uint64_t pick = rng() % 600;
  return pick == 0 ? 0 : 0x7f0000000000ull + pick * 256 * (1 + pick % 3);
}

void expect_same(PointerMap<int>& map, const std::unordered_map<std::uintptr_t, int>& want) {
  ASSERT_EQ(map.size(), want.size());
  for (const auto& [key, value] : want) {
    const int* got = map.find(key);
    ASSERT_NE(got, nullptr) << std::hex << key;
    EXPECT_EQ(*got, value);
  }
}

TEST(PointerMap, AgreesWithUnorderedMapOnRandomOperations) {
  std::mt19937_64 rng(12345);
  PointerMap<int> map;
  std::unordered_map<std::uintptr_t, int> want;
  for (int step = 0; step < 200000; ++step) {
    const std::uintptr_t key = random_key(rng);
    switch (rng() % 4) {
      case 0:
      case 1: {
        const auto [value, inserted] = map.try_emplace(key, step);
        const auto [it, want_inserted] = want.try_emplace(key, step);
        ASSERT_EQ(inserted, want_inserted);
        ASSERT_EQ(*value, it->second);
        break;
      }
      case 2:
        ASSERT_EQ(map.erase(key), want.erase(key) == 1) << std::hex << key;
        break;
      default: {
        const int* got = map.find(key);
        const auto it = want.find(key);
        ASSERT_EQ(got != nullptr, it != want.end());
        if (got != nullptr) {
          ASSERT_EQ(*got, it->second);
        }
      }
    }
    if (step % 10000 == 0) expect_same(map, want);
  }
  expect_same(map, want);
}

TEST(PointerMap, EraseIfRemovesExactlyWhatItIsToldTo) {
  PointerMap<int> map;
  std::unordered_map<std::uintptr_t, int> want;
  for (int i = 0; i < 5000; ++i) {
    const std::uintptr_t key = i == 0 ? 0 : 0x10000 + static_cast<std::uintptr_t>(i) * 512;
    map.try_emplace(key, i);
    want.emplace(key, i);
  }
  int seen = 0;
  map.erase_if([&](std::uintptr_t, int& value) {
    ++seen;
    return value % 3 == 0;
  });
  std::erase_if(want, [](const auto& entry) { return entry.second % 3 == 0; });
  EXPECT_EQ(seen, 5000);
  expect_same(map, want);
  EXPECT_EQ(map.find(0), nullptr);  // 0 % 3 == 0: erased too
}

}  // namespace
