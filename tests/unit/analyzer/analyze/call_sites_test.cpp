// SiteTable::intern against std::unordered_map as the model: stack ids small
// (the flat table), huge (the hash map) and ones first seen while too large
// for the flat table that later fall within its reach, which must keep the
// site they were given.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "cumemtrace/analyzer/call_sites.h"

namespace cumemtrace::analyzer {
namespace {

TEST(SiteTable, InternGivesEachStackIdOneSiteWhateverItsSize) {
  SiteTable sites;
  std::unordered_map<std::uint64_t, std::uint32_t> model;
  std::mt19937_64 rng(7);
  auto check = [&](std::uint64_t stack) {
    const std::uint32_t site = sites.intern(stack);
    const auto [it, is_new] = model.try_emplace(stack, static_cast<std::uint32_t>(model.size()));
    ASSERT_EQ(site, it->second) << "stack " << stack << (is_new ? " (new)" : "");
    ASSERT_EQ(sites[site].stack, stack);
  };
  // Beyond the flat table's reach while there are few sites (it grows with them).
  for (std::uint64_t stack : {5000ull, 3000ull, 0ull, 1ull << 40, ~0ull}) check(stack);
  for (std::uint64_t stack = 1; stack <= 2000; ++stack) check(stack);
  for (int i = 0; i < 100000; ++i) {
    switch (rng() % 3) {
      case 0: check(rng() % 6000); break;           // small ids, mostly seen before
      case 1: check(rng() % 64 + (1ull << 40)); break;  // huge ids
      default: check(rng()); break;                  // anything (a damaged trace)
    }
  }
  EXPECT_EQ(sites.size(), model.size());
}

}  // namespace
}  // namespace cumemtrace::analyzer
