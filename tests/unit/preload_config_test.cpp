#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config.h"
#include "cumemtrace/trace_format.h"

using cumemtrace::preload::Config;
using cumemtrace::preload::parse_config;

namespace {

// Captures what the config parser warns on stderr.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    file_ = std::tmpfile();
    dup2(fileno(file_), STDERR_FILENO);
  }
  std::string finish() {
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    std::string out;
    std::rewind(file_);
    for (int c; (c = std::fgetc(file_)) != EOF;) out.push_back(static_cast<char>(c));
    std::fclose(file_);
    return out;
  }

 private:
  int saved_ = -1;
  std::FILE* file_ = nullptr;
};

struct Parsed {
  Config config;
  std::string warnings;
};

Parsed parse(const std::map<std::string, std::string>& env) {
  std::vector<std::string> entries;
  for (const auto& [k, v] : env) entries.push_back(k + "=" + v);
  std::vector<const char*> environ_names;
  for (const auto& e : entries) environ_names.push_back(e.c_str());
  environ_names.push_back(nullptr);
  StderrCapture capture;
  Config c = parse_config(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      environ_names.data());
  return {c, capture.finish()};
}

TEST(Config, DefaultsWithoutEnvironment) {
  const auto p = parse({});
  EXPECT_EQ(p.config.output_template, cumemtrace::format::kDefaultOutputTemplate);
  EXPECT_EQ(p.config.buffer_kb, 256u);
  EXPECT_EQ(p.warnings, "");
}

TEST(Config, ReadsGoodValues) {
  const auto p = parse({{"CUMEMTRACE_OUTPUT", "/tmp/x.%p.jsonl"}, {"CUMEMTRACE_BUFFER_KB", "64"}});
  EXPECT_EQ(p.config.output_template, "/tmp/x.%p.jsonl");
  EXPECT_EQ(p.config.buffer_kb, 64u);
  EXPECT_EQ(p.warnings, "");
}

TEST(Config, BadValuesWarnOnceAndKeepTheDefault) {
  for (const char* bad : {"", "abc", "-5", "12kb", "0", "3", "99999999999999999999999", "65537", " 8"}) {
    const auto p = parse({{"CUMEMTRACE_BUFFER_KB", bad}});
    EXPECT_EQ(p.config.buffer_kb, 256u) << "value '" << bad << "'";
    EXPECT_NE(p.warnings.find("CUMEMTRACE_BUFFER_KB"), std::string::npos) << bad;
    EXPECT_EQ(std::count(p.warnings.begin(), p.warnings.end(), '\n'), 1) << p.warnings;
  }
  const auto empty_output = parse({{"CUMEMTRACE_OUTPUT", ""}});
  EXPECT_EQ(empty_output.config.output_template, cumemtrace::format::kDefaultOutputTemplate);
  EXPECT_NE(empty_output.warnings.find("CUMEMTRACE_OUTPUT is empty"), std::string::npos);
}

TEST(Config, UnknownOptionIsNamedInAWarning) {
  const auto p = parse({{"CUMEMTRACE_OUTPT", "typo.jsonl"}, {"CUMEMTRACE_LIBRARY", "/x.so"}});
  EXPECT_NE(p.warnings.find("unknown option CUMEMTRACE_OUTPT"), std::string::npos);
  EXPECT_EQ(p.warnings.find("CUMEMTRACE_LIBRARY"), std::string::npos);  // read by the CLI
}

TEST(Config, EchoIsValidJsonWithEveryOption) {
  Config c = parse({{"CUMEMTRACE_OUTPUT", "a\"b.jsonl"}}).config;
  cumemtrace::preload::LineBuffer b;
  cumemtrace::preload::append_config_json(b, c);
  const auto j = nlohmann::json::parse(b.view());
  EXPECT_EQ(j["output"], "a\"b.jsonl");
  EXPECT_EQ(j["buffer_kb"], 256);
  EXPECT_EQ(j["stacks"], 32);
}

TEST(Config, StackDepthIsReadAndBadValuesWarnOnce) {
  EXPECT_EQ(parse({}).config.stacks, 32u);
  for (const auto& [text, depth] : {std::pair{"0", 0u}, {"4", 4u}, {"256", 256u}}) {
    const auto p = parse({{"CUMEMTRACE_STACKS", text}});
    EXPECT_EQ(p.config.stacks, depth);
    EXPECT_EQ(p.warnings, "");
  }
  for (const char* bad : {"", "-1", "257", "deep", "8 ", "0x10", "99999999999999999999999"}) {
    const auto p = parse({{"CUMEMTRACE_STACKS", bad}});
    EXPECT_EQ(p.config.stacks, 32u) << "value '" << bad << "'";
    EXPECT_NE(p.warnings.find("CUMEMTRACE_STACKS"), std::string::npos) << bad;
    EXPECT_EQ(std::count(p.warnings.begin(), p.warnings.end(), '\n'), 1) << p.warnings;
  }
}

TEST(Config, PoolOptionsDefaultToCachingEveryHundredMilliseconds) {
  const auto p = parse({});
  EXPECT_EQ(p.config.pool, Config::PoolMode::caching);
  EXPECT_EQ(p.config.pool_sample_ms, 100u);
  EXPECT_EQ(p.config.pool_config.segment_policy, cumemtrace::pool::SegmentPolicy::tight);
}

TEST(Config, PoolOptionsReadGoodValues) {
  const auto p = parse({{"CUMEMTRACE_POOL", "passthrough"},
                        {"CUMEMTRACE_POOL_CONF", "max_split_size_mb:128,expandable_segments:true"},
                        {"CUMEMTRACE_POOL_SAMPLE_MS", "5"}});
  EXPECT_EQ(p.warnings, "");
  EXPECT_EQ(p.config.pool, Config::PoolMode::passthrough);
  EXPECT_EQ(p.config.pool_config.max_split_size, std::size_t{128} << 20);
  EXPECT_TRUE(p.config.pool_config.expandable_segments);
  EXPECT_EQ(p.config.pool_sample_ms, 5u);
}

TEST(Config, BadPoolValuesWarnOnceEachAndKeepTheirDefaults) {
  const auto mode = parse({{"CUMEMTRACE_POOL", "cached"}});
  EXPECT_EQ(mode.config.pool, Config::PoolMode::caching);
  EXPECT_NE(mode.warnings.find("CUMEMTRACE_POOL='cached'"), std::string::npos) << mode.warnings;
  EXPECT_EQ(std::count(mode.warnings.begin(), mode.warnings.end(), '\n'), 1) << mode.warnings;

  for (const char* bad : {"", "0", "x", "10ms", "3600001"}) {
    const auto p = parse({{"CUMEMTRACE_POOL_SAMPLE_MS", bad}});
    EXPECT_EQ(p.config.pool_sample_ms, 100u) << bad;
    EXPECT_EQ(std::count(p.warnings.begin(), p.warnings.end(), '\n'), 1) << p.warnings;
  }

  // One warning per bad entry; the good entry still applies.
  const auto conf = parse({{"CUMEMTRACE_POOL_CONF", "bogus:1,max_split_size_mb:64"}});
  EXPECT_NE(conf.warnings.find("CUMEMTRACE_POOL_CONF"), std::string::npos);
  EXPECT_NE(conf.warnings.find("bogus"), std::string::npos) << conf.warnings;
  EXPECT_EQ(std::count(conf.warnings.begin(), conf.warnings.end(), '\n'), 1) << conf.warnings;
  EXPECT_EQ(conf.config.pool_config.max_split_size, std::size_t{64} << 20);
}

TEST(Config, EchoNamesThePoolAndItsPolicy) {
  const Config c = parse({{"CUMEMTRACE_POOL_CONF", "max_split_size_mb:128"}}).config;
  cumemtrace::preload::LineBuffer b;
  cumemtrace::preload::append_config_json(b, c);
  const auto j = nlohmann::json::parse(b.view());
  EXPECT_EQ(j["pool"], "caching");
  EXPECT_EQ(j["pool_sample_ms"], 100);
  EXPECT_EQ(j["max_split_size"], 128 << 20);
  EXPECT_TRUE(j["release_threshold"].is_null());
  EXPECT_EQ(j["expandable_segments"], false);
}

}  // namespace
