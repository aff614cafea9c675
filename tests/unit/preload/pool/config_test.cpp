// CUMEMTRACE_POOL_CONF parsing and its echo in the trace header.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cumemtrace/pool/pool_config.h"
#include "pool_test_support.h"

using namespace cumemtrace::pool;
using pool_test::MiB;

TEST(PoolConfigTest, EmptyTextGivesDefaults) {
  const PoolConfigParse p = parse_pool_config("");
  EXPECT_TRUE(p.ok());
  EXPECT_EQ(p.config.max_split_size, kUnlimited);
  EXPECT_EQ(p.config.max_non_split_rounding, 20 * MiB);
  EXPECT_EQ(p.config.garbage_collection_threshold, 0.0);
  EXPECT_EQ(p.config.release_threshold, kUnlimited);
  EXPECT_TRUE(p.config.expandable_segments) << "issue 18: expandable where the device has VMM";
  EXPECT_EQ(p.config.segment_policy, SegmentPolicy::tight);
}

TEST(PoolConfigTest, PyTorchKeysParse) {
  const PoolConfigParse p = parse_pool_config(
      " max_split_size_mb:128, roundup_power2_divisions:4,garbage_collection_threshold:0.8,"
      "release_threshold_mb:512,expandable_segments:True,max_non_split_rounding_mb:64");
  ASSERT_TRUE(p.ok()) << p.errors.front();
  EXPECT_EQ(p.config.max_split_size, 128 * MiB);
  EXPECT_EQ(p.config.max_non_split_rounding, 64 * MiB);
  for (auto d : p.config.roundup_power2_divisions) EXPECT_EQ(d, 4u);
  EXPECT_DOUBLE_EQ(p.config.garbage_collection_threshold, 0.8);
  EXPECT_EQ(p.config.release_threshold, 512 * MiB);
  EXPECT_TRUE(p.config.expandable_segments);
}

TEST(PoolConfigTest, OurKeysParse) {
  const PoolConfigParse p = parse_pool_config("segment_policy:pytorch,device_shards:3,expandable_page_size_mb:8");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.config.segment_policy, SegmentPolicy::pytorch);
  EXPECT_EQ(p.config.device_shards, 3u);
  EXPECT_EQ(p.config.expandable_page_size, 8 * MiB);
  EXPECT_EQ(parse_pool_config("").config.expandable_page_size, 0u) << "the device's granularity";
}

TEST(PoolConfigTest, PageSizeBeyondOneGiBIsRefused) {
  const PoolConfigParse p = parse_pool_config("expandable_page_size_mb:2048");
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_NE(p.errors[0].find("from 0 to 1024"), std::string::npos) << p.errors[0];
  EXPECT_EQ(p.config.expandable_page_size, 0u);
}

TEST(PoolConfigTest, DivisionListCoversIntervalsUpToEachKey) {
  const PoolConfigParse p = parse_pool_config("roundup_power2_divisions:[1:2, 4:8, >:16]");
  ASSERT_TRUE(p.ok()) << p.errors.front();
  const auto& d = p.config.roundup_power2_divisions;
  EXPECT_EQ(d[0], 2u);  // ≤ 1 MiB
  EXPECT_EQ(d[1], 8u);  // 1–2 MiB
  EXPECT_EQ(d[2], 8u);  // 2–4 MiB
  EXPECT_EQ(d[3], 16u);
  EXPECT_EQ(d[PoolConfig::kRoundupIntervals - 1], 16u);
}

TEST(PoolConfigTest, BadEntriesAreNamedAndKeepDefaults) {
  const PoolConfigParse p = parse_pool_config(
      "max_split_size_mb:abc,colour:blue,garbage_collection_threshold:1.5,expandable_segments:maybe,"
      "roundup_power2_divisions:3,noseparator,max_split_size_mb:10,release_threshold_mb:64");
  ASSERT_EQ(p.errors.size(), 7u);
  EXPECT_NE(p.errors[0].find("max_split_size_mb: 'abc'"), std::string::npos) << p.errors[0];
  EXPECT_NE(p.errors[1].find("unknown key"), std::string::npos) << p.errors[1];
  EXPECT_NE(p.errors[1].find("colour"), std::string::npos);
  EXPECT_NE(p.errors[2].find("between 0 and 1"), std::string::npos) << p.errors[2];
  EXPECT_NE(p.errors[3].find("true or false"), std::string::npos) << p.errors[3];
  EXPECT_NE(p.errors[4].find("power of two"), std::string::npos) << p.errors[4];
  EXPECT_NE(p.errors[5].find("expected key:value"), std::string::npos) << p.errors[5];
  EXPECT_NE(p.errors[6].find("≥ 20"), std::string::npos) << p.errors[6];
  // Bad values left the defaults; the good entry applied.
  EXPECT_EQ(p.config.max_split_size, kUnlimited);
  EXPECT_EQ(p.config.garbage_collection_threshold, 0.0);
  EXPECT_EQ(p.config.release_threshold, 64 * MiB);
  for (auto d : p.config.roundup_power2_divisions) EXPECT_EQ(d, 0u);
}

TEST(PoolConfigTest, BadDivisionListIsRejectedWhole) {
  for (const char* text : {"roundup_power2_divisions:[4:2,1:4]", "roundup_power2_divisions:[3:2]",
                           "roundup_power2_divisions:[1-2]", "roundup_power2_divisions:[1:3]"}) {
    const PoolConfigParse p = parse_pool_config(text);
    EXPECT_EQ(p.errors.size(), 1u) << text;
    for (auto d : p.config.roundup_power2_divisions) EXPECT_EQ(d, 0u) << text;
  }
}

TEST(PoolConfigTest, EchoListsEveryOptionAsJson) {
  PoolConfig c = parse_pool_config("max_split_size_mb:256,expandable_segments:true").config;
  const auto described = describe_pool_config(c);
  const nlohmann::json j = nlohmann::json::parse(pool_config_json(c));
  EXPECT_EQ(j.size(), described.size());
  EXPECT_EQ(j.at("max_split_size"), 256 * MiB);
  EXPECT_TRUE(j.at("release_threshold").is_null());
  EXPECT_EQ(j.at("expandable_segments"), true);
  EXPECT_EQ(j.at("segment_policy"), c.segment_policy == SegmentPolicy::tight ? "tight" : "pytorch");
  EXPECT_TRUE(j.contains("garbage_collection_threshold"));
  EXPECT_TRUE(j.contains("roundup_power2_divisions"));
  EXPECT_TRUE(j.contains("max_non_split_rounding"));
  EXPECT_TRUE(j.contains("device_shards"));
  EXPECT_EQ(j.at("expandable_page_size"), 0u);
}

TEST(PoolConfigTest, PyTorchBaselineIsPyTorchsPolicy) {
  const PoolConfig c = pytorch_pool_config();
  EXPECT_EQ(c.segment_policy, SegmentPolicy::pytorch);
  EXPECT_FALSE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size, kUnlimited);
}
