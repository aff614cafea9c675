#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "options/config.h"
#include "cumemtrace/trace_format.h"

using cumemtrace::contract::Config;
using cumemtrace::contract::ForkMode;
using cumemtrace::contract::parse_config;

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
  EXPECT_EQ(p.config.flush_ms, 200u);
  EXPECT_LE(p.config.flush_ms, 500u) << "a process killed 1 s after its last event loses nothing";
  EXPECT_EQ(p.config.fork, ForkMode::trace);
  EXPECT_EQ(p.warnings, "");
}

TEST(Config, ReadsGoodValues) {
  const auto p = parse({{"CUMEMTRACE_OUTPUT", "/tmp/x.%p.jsonl"},
                        {"CUMEMTRACE_BUFFER_KB", "64"},
                        {"CUMEMTRACE_FLUSH_MS", "1000"},
                        {"CUMEMTRACE_FORK", "off"}});
  EXPECT_EQ(p.config.output_template, "/tmp/x.%p.jsonl");
  EXPECT_EQ(p.config.buffer_kb, 64u);
  EXPECT_EQ(p.config.flush_ms, 1000u);
  EXPECT_EQ(p.config.fork, ForkMode::off);
  EXPECT_EQ(p.warnings, "");
  EXPECT_EQ(parse({{"CUMEMTRACE_FORK", "trace"}}).config.fork, ForkMode::trace);
}

struct BadValue {
  const char* name;
  const char* value;
  const char* default_text;  // as the warning names it
};

TEST(Config, BadValuesWarnOnceAndKeepTheDefault) {
  const BadValue cases[] = {
      {"CUMEMTRACE_BUFFER_KB", "", "256"},        {"CUMEMTRACE_BUFFER_KB", "abc", "256"},
      {"CUMEMTRACE_BUFFER_KB", "-5", "256"},      {"CUMEMTRACE_BUFFER_KB", "12kb", "256"},
      {"CUMEMTRACE_BUFFER_KB", "0", "256"},       {"CUMEMTRACE_BUFFER_KB", "3", "256"},
      {"CUMEMTRACE_BUFFER_KB", "65537", "256"},   {"CUMEMTRACE_BUFFER_KB", " 8", "256"},
      {"CUMEMTRACE_BUFFER_KB", "99999999999999999999999", "256"},
      {"CUMEMTRACE_FLUSH_MS", "0", "200"},        {"CUMEMTRACE_FLUSH_MS", "600001", "200"},
      {"CUMEMTRACE_FLUSH_MS", "0.5", "200"},      {"CUMEMTRACE_FLUSH_MS", "", "200"},
      {"CUMEMTRACE_FORK", "no", "\"trace\""},   {"CUMEMTRACE_FORK", "TRACE", "\"trace\""},
      {"CUMEMTRACE_FORK", "", "\"trace\""},
      {"CUMEMTRACE_OUTPUT", "", "\"cumemtrace.%h.%p.jsonl\""},
  };
  for (const auto& bad : cases) {
    const auto p = parse({{bad.name, bad.value}});
    const Config defaults;
    EXPECT_EQ(p.config.buffer_kb, defaults.buffer_kb) << bad.name << "=" << bad.value;
    EXPECT_EQ(p.config.flush_ms, defaults.flush_ms) << bad.name << "=" << bad.value;
    EXPECT_EQ(p.config.fork, defaults.fork) << bad.name << "=" << bad.value;
    EXPECT_EQ(p.config.output_template, defaults.output_template) << bad.name << "=" << bad.value;
    EXPECT_EQ(std::count(p.warnings.begin(), p.warnings.end(), '\n'), 1) << p.warnings;
    const std::string expected_start = "cumemtrace: warning: " + std::string(bad.name) + "='" + bad.value + "' is not ";
    EXPECT_EQ(p.warnings.rfind(expected_start, 0), 0u) << p.warnings;
    EXPECT_NE(p.warnings.find(std::string("; using ") + bad.default_text + "\n"), std::string::npos)
        << p.warnings;
  }
}

TEST(Config, EachBadValueOfSeveralGetsItsOwnLine) {
  const auto p = parse({{"CUMEMTRACE_FLUSH_MS", "x"}, {"CUMEMTRACE_FORK", "y"}, {"CUMEMTRACE_BUFFER_KB", "64"}});
  EXPECT_EQ(std::count(p.warnings.begin(), p.warnings.end(), '\n'), 2) << p.warnings;
  EXPECT_EQ(p.config.buffer_kb, 64u) << "a good option is not spoilt by bad neighbours";
}

TEST(Config, UnknownOptionIsNamedInAWarningAndOptionsReadElsewhereAreNot) {
  const auto p = parse({{"CUMEMTRACE_OUTPT", "typo.jsonl"},
                        {"CUMEMTRACE_LIBRARY", "/x.so"},
                        {"CUMEMTRACE_BUILD_DIR", "/b"},
                        {"CUMEMTRACE_STACKS", "8"},
                        {"CUMEMTRACE_POOL", "caching"},
                        {"CUMEMTRACE_POOL_CONF", "max_split_size_mb:64"},
                        {"CUMEMTRACE_POOL_SAMPLE_MS", "100"}});
  EXPECT_NE(p.warnings.find("unknown option CUMEMTRACE_OUTPT ignored"), std::string::npos);
  EXPECT_EQ(std::count(p.warnings.begin(), p.warnings.end(), '\n'), 1) << p.warnings;
  for (const char* known : {"CUMEMTRACE_LIBRARY", "CUMEMTRACE_STACKS", "CUMEMTRACE_POOL",
                            "CUMEMTRACE_POOL_CONF", "CUMEMTRACE_POOL_SAMPLE_MS", "CUMEMTRACE_FLUSH_MS",
                            "CUMEMTRACE_FORK", "CUMEMTRACE_OUTPUT", "CUMEMTRACE_BUFFER_KB"}) {
    EXPECT_TRUE(cumemtrace::contract::is_known_option(known)) << known;
  }
  EXPECT_FALSE(cumemtrace::contract::is_known_option("CUMEMTRACE_OUTPT"));
}

TEST(Config, EchoIsValidJsonWithEveryOptionInForce) {
  Config c = parse({{"CUMEMTRACE_OUTPUT", "a\"b.jsonl"}, {"CUMEMTRACE_FLUSH_MS", "50"}, {"CUMEMTRACE_FORK", "off"}})
                 .config;
  cumemtrace::contract::LineBuffer b;
  cumemtrace::contract::append_config_json(b, c);
  const auto j = nlohmann::json::parse(b.view());
  EXPECT_EQ(j["output"], "a\"b.jsonl");
  EXPECT_EQ(j["buffer_kb"], 256);
  EXPECT_EQ(j["flush_ms"], 50);
  EXPECT_EQ(j["fork"], "off");
  EXPECT_EQ(j["stacks"], 32);
  EXPECT_EQ(j["pool"], "caching");
  EXPECT_EQ(j["pool_sample_ms"], 100);
  EXPECT_TRUE(j.contains("max_split_size")) << "the pool's policy, flat: " << j.dump();
}

TEST(Config, ValuesAreCheckedWithTheSameTableForTheLauncher) {
  using cumemtrace::contract::option_value_problem;
  EXPECT_EQ(option_value_problem("CUMEMTRACE_FLUSH_MS", "50"), std::nullopt);
  EXPECT_EQ(option_value_problem("CUMEMTRACE_FORK", "off"), std::nullopt);
  EXPECT_EQ(option_value_problem("CUMEMTRACE_FLUSH_MS", "0"),
            "expected a whole number of milliseconds in [1, 600000]");
  EXPECT_EQ(option_value_problem("CUMEMTRACE_FORK", "sometimes"), "expected 'trace' or 'off'");
  EXPECT_EQ(option_value_problem("CUMEMTRACE_OUTPUT", ""), "expected a non-empty path template");
  EXPECT_EQ(option_value_problem("CUMEMTRACE_STACKS", "257"), "expected a stack depth in [0, 256] (0: no stacks)");
  EXPECT_EQ(option_value_problem("CUMEMTRACE_POOL", "cached"), "expected 'caching' or 'passthrough'");
  // Taken in part by the library (good entries apply), refused whole here.
  EXPECT_NE(option_value_problem("CUMEMTRACE_POOL_CONF", "bogus:1,max_split_size_mb:64"), std::nullopt);
  EXPECT_EQ(option_value_problem("CUMEMTRACE_POOL_CONF", "max_split_size_mb:64"), std::nullopt);
  // Not the table's to judge.
  EXPECT_EQ(option_value_problem("CUMEMTRACE_LIBRARY", "anything"), std::nullopt);
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
  cumemtrace::contract::LineBuffer b;
  cumemtrace::contract::append_config_json(b, c);
  const auto j = nlohmann::json::parse(b.view());
  EXPECT_EQ(j["pool"], "caching");
  EXPECT_EQ(j["pool_sample_ms"], 100);
  EXPECT_EQ(j["max_split_size"], 128 << 20);
  EXPECT_TRUE(j["release_threshold"].is_null());
  EXPECT_EQ(j["expandable_segments"], true) << "the default since issue 18";
  const Config off = parse({{"CUMEMTRACE_POOL_CONF", "expandable_segments:false"}}).config;
  cumemtrace::contract::LineBuffer b2;
  cumemtrace::contract::append_config_json(b2, off);
  EXPECT_EQ(nlohmann::json::parse(b2.view())["expandable_segments"], false);
}

// The header's `env` field: only PyTorch's allocator variables, verbatim, and
// a valid line whatever bytes they hold.
TEST(Config, HeaderEnvHoldsOnlyTheAllocatorVariablesThatAreSet) {
  const std::map<std::string, std::string> env = {
      {"PYTORCH_CUDA_ALLOC_CONF", "a\"b\\c"},
      {"PYTORCH_ALLOC_CONF", "bad\xff\x01utf8"},
      {"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"},
      {"AWS_SECRET_ACCESS_KEY", "never"},
      {"PYTORCH_CUDA_ALLOC_CONF_X", "never"},
  };
  const auto lookup = [&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  cumemtrace::contract::LineBuffer b;
  b.raw("{\"ev\":\"header\"");
  cumemtrace::contract::append_header_env(b, lookup);
  b.ch('}');
  const auto j = nlohmann::json::parse(b.view());  // throws on an invalid line
  ASSERT_TRUE(j["env"].is_object()) << b.view();
  EXPECT_EQ(j["env"].size(), 3u) << b.view();
  EXPECT_EQ(j["env"]["PYTORCH_CUDA_ALLOC_CONF"], "a\"b\\c");
  EXPECT_EQ(j["env"]["PYTORCH_ALLOC_CONF"], "bad\xef\xbf\xbd\u0001utf8") << "U+FFFD for the bad byte";
  EXPECT_EQ(j["env"]["PYTORCH_NO_CUDA_MEMORY_CACHING"], "1");

  cumemtrace::contract::LineBuffer none;
  cumemtrace::contract::append_header_env(none, [](const char*) -> const char* { return nullptr; });
  EXPECT_EQ(none.view(), "") << "no `env` field when none is set";
  cumemtrace::contract::LineBuffer one;
  cumemtrace::contract::append_header_env(one, [](const char* name) -> const char* {
    return std::string_view(name) == "PYTORCH_ALLOC_CONF" ? "" : nullptr;
  });
  EXPECT_EQ(one.view(), R"(,"env":{"PYTORCH_ALLOC_CONF":""})") << "set to empty is still set";
}

// The header's `rank_env`: the launcher's variables as they were when the
// options were read, never an "unknown option", nothing else recorded.
TEST(Config, RankVariablesAreReadWithTheOptionsAndEchoedInTheHeader) {
  const auto p = parse({{"RANK", "3"},
                        {"LOCAL_RANK", "1"},
                        {"WORLD_SIZE", "4"},
                        {"PMI_RANK", "7"},
                        {"SLURM_JOB_ID", "never"},
                        {"MASTER_ADDR", "never"}});
  EXPECT_EQ(p.warnings, "");
  cumemtrace::contract::LineBuffer b;
  b.raw("{\"ev\":\"header\"");
  cumemtrace::contract::append_header_rank_env(b, p.config);
  b.ch('}');
  const auto j = nlohmann::json::parse(b.view());
  EXPECT_EQ(j["rank_env"], (nlohmann::json{{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}, {"PMI_RANK", "7"}}))
      << b.view();

  cumemtrace::contract::LineBuffer none;
  cumemtrace::contract::append_header_rank_env(none, parse({}).config);
  EXPECT_EQ(none.view(), "") << "no `rank_env` field when no launcher set one";
}

}  // namespace
