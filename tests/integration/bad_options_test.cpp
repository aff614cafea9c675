// Every CUMEMTRACE_* option the library reads, given garbage, empty, huge,
// negative, overlong and non-UTF-8 values, in a real program under
// LD_PRELOAD on the simulated device (issue 6, item 4). Whatever the value,
// the program runs as it does without cumemtrace, a bad value costs one
// warning line naming the option and leaves the default in force (the
// header's `config` says so), and the trace is complete and readable.
// tests/unit/contract/options/config_test.cpp checks the parser's messages word by word; this
// checks that nothing between the environment and the trace breaks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "options/config.h"
#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kKnownSequence = CUMEMTRACE_APPS_DIR "/known_sequence";
constexpr int kSequenceAllocs = 7, kSequenceFrees = 5, kSequenceLeaked = 2;  // known_sequence.cpp's sequence

// Values no option takes, or that take a path the system refuses. An
// environment string cannot hold NUL; 100,000 bytes is near the kernel's
// limit for one (MAX_ARG_STRLEN, 128 KiB).
std::vector<std::string> bad_values() {
  return {"",
          "garbage!",
          "-1",
          "-99999999999999999999",
          "99999999999999999999999999999999",
          "18446744073709551616",  // 2^64
          "1e9",
          " 7 ",
          "0x10",
          "caf\xc3\xa9",      // UTF-8 letters where a number or word goes
          "\xff\xfe\x80",     // not UTF-8 at all
          "%n%s%s%s%p%p",     // a format string, in case one reaches printf
          std::string(100'000, '9')};
}

// Values of the pool policy's own syntax that are wrong entry by entry.
std::vector<std::string> bad_pool_conf_values() {
  return {"max_split_size_mb:-1",
          "max_split_size_mb:99999999999999999999999",
          "roundup_power2_divisions:18446744073709551616",
          "garbage_collection_threshold:nan,release_threshold_mb:1e400",
          ",,,:::,,",
          "expandable_segments:maybe,segment_policy:",
          "max_split_size_mb" + std::string(50'000, ':')};
}

struct ProgramRun {
  CommandResult result;
  std::string manifest;
  std::vector<std::string> traces;  // files the run left in its directory, but the manifest
};

// known_sequence under the preload in a fresh directory, with `env` added
// (CUMEMTRACE_OUTPUT=t.jsonl unless `env` names it).
ProgramRun run_known_sequence(const TempDir& dir, EnvChanges env, bool preloaded = true) {
  const bool output_given =
      std::any_of(env.begin(), env.end(), [](const auto& e) { return e.first == "CUMEMTRACE_OUTPUT"; });
  if (preloaded) env.emplace_back("LD_PRELOAD", CUMEMTRACE_PRELOAD);
  if (!output_given) env.emplace_back("CUMEMTRACE_OUTPUT", "t.jsonl");
  ProgramRun run;
  run.result = run_command({kKnownSequence, "manifest.txt"}, sim_environment(env), dir.dir());
  run.manifest = read_file(dir / "manifest.txt");
  for (const auto& entry : fs::directory_iterator(dir.dir())) {
    if (entry.path().filename() != "manifest.txt") run.traces.push_back(entry.path());
  }
  return run;
}

// The manifest's operations without their pointers, which differ from run to run.
std::string operations(const std::string& manifest) {
  std::istringstream lines(manifest);
  std::string out;
  for (std::string op, name, rest; lines >> op >> name && std::getline(lines, rest);) {
    out += op + " " + name + (op == "alloc" ? " " + rest.substr(0, rest.rfind(' ')) : "") + "\n";
  }
  return out;
}

class BadOptions : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TempDir bare_dir, good_dir;
    bare_ = new ProgramRun(run_known_sequence(bare_dir, {}, false));
    const ProgramRun good = run_known_sequence(good_dir, {});
    ASSERT_EQ(good.result.exit_code, 0) << good.result.err;
    ASSERT_EQ(good.result.err, "");
    default_config_ = new json(read_json_lines(good_dir / "t.jsonl").front()["config"]);
  }
  static void TearDownTestSuite() {
    delete bare_;
    delete default_config_;
  }

  // The program ran as it did bare, and `trace` holds all of it.
  static void expect_untouched(const ProgramRun& run, const std::string& trace, const std::string& what) {
    ASSERT_EQ(run.result.exit_code, bare_->result.exit_code) << what << ": " << run.result.err;
    EXPECT_EQ(run.result.out, bare_->result.out) << what;
    EXPECT_EQ(operations(run.manifest), operations(bare_->manifest)) << what;
    const std::vector<json> lines = read_json_lines(trace);  // throws on a line that is not JSON
    ASSERT_GE(lines.size(), 2u) << what;
    EXPECT_EQ(lines.front()["ev"], "header") << what;
    EXPECT_EQ(lines.back()["ev"], "end") << what;
    const auto count = [&](const char* ev) {
      return std::count_if(lines.begin(), lines.end(), [&](const json& l) { return l["ev"] == ev; });
    };
    EXPECT_EQ(count("alloc"), kSequenceAllocs) << what;
    EXPECT_EQ(count("free"), kSequenceFrees) << what;
    EXPECT_EQ(count("error"), 0) << what;
    const CommandResult report = run_command({CUMEMTRACE_CLI, "report", "--format", "json", trace});
    ASSERT_EQ(report.exit_code, 0) << what << ": " << report.err;
    const json r = json::parse(report.out);
    EXPECT_EQ(r["leaked_count"], kSequenceLeaked) << what;
    EXPECT_EQ(r["bad_lines"], 0) << what;
    EXPECT_FALSE(r["truncated"]) << what;
  }

  // Each line of stderr is one of the library's warnings and names `name`.
  static void expect_warnings_name(const ProgramRun& run, const std::string& name, std::size_t most,
                                   const std::string& what) {
    const std::vector<std::string> lines = lines_of(run.result.err);
    EXPECT_GE(lines.size(), 1u) << what << ": no warning";
    EXPECT_LE(lines.size(), most) << what << ": " << run.result.err;
    for (const std::string& line : lines) {
      EXPECT_EQ(line.rfind("cumemtrace: warning: " + name, 0), 0u) << what << ": " << line;
      EXPECT_LE(line.size(), 511u) << what << ": one bounded line, however long the value";
    }
  }

  static ProgramRun* bare_;
  static json* default_config_;
};
ProgramRun* BadOptions::bare_ = nullptr;
json* BadOptions::default_config_ = nullptr;

TEST_F(BadOptions, TheBareProgramIsTheReference) {
  ASSERT_EQ(bare_->result.exit_code, 0) << bare_->result.err;
  EXPECT_EQ(std::count(bare_->manifest.begin(), bare_->manifest.end(), '\n'), kSequenceAllocs + kSequenceFrees);
  ASSERT_TRUE(default_config_->is_object());
  EXPECT_EQ((*default_config_)["output"], "t.jsonl");
}

// Every option but the output path and the pool policy: the value is
// refused with one warning and the header shows the default in force.
TEST_F(BadOptions, EveryNumberAndWordOptionRefusesEveryBadValue) {
  int checked = 0;
  for (const std::string_view option : cumemtrace::contract::option_names()) {
    const std::string name(option);
    if (name == "CUMEMTRACE_OUTPUT" || name == "CUMEMTRACE_POOL_CONF") continue;
    for (const std::string& value : bad_values()) {
      SCOPED_TRACE(name + "='" + value.substr(0, 40) + "'");
      TempDir dir;
      const ProgramRun run = run_known_sequence(dir, {{name, value}});
      const std::string what = name + " (" + std::to_string(value.size()) + " bytes)";
      expect_untouched(run, dir / "t.jsonl", what);
      expect_warnings_name(run, name + "='", 1, what);
      EXPECT_EQ(read_json_lines(dir / "t.jsonl").front()["config"], *default_config_) << what;
      ++checked;
    }
  }
  EXPECT_GE(checked, 6 * static_cast<int>(bad_values().size())) << "the option table lost its options";
}

// The pool policy: each bad entry warns and keeps its default; the rest of
// the policy, and the program, are untouched.
TEST_F(BadOptions, PoolPolicyRefusesEveryBadEntry) {
  std::vector<std::string> values = bad_values();
  values.erase(values.begin());  // empty: no entries, a valid (default) policy
  for (const std::string& more : bad_pool_conf_values()) values.push_back(more);
  for (const std::string& value : values) {
    SCOPED_TRACE("CUMEMTRACE_POOL_CONF='" + value.substr(0, 40) + "'");
    TempDir dir;
    const ProgramRun run = run_known_sequence(dir, {{"CUMEMTRACE_POOL_CONF", value}});
    expect_untouched(run, dir / "t.jsonl", value.substr(0, 40));
    expect_warnings_name(run, "CUMEMTRACE_POOL_CONF", 8, value.substr(0, 40));
    EXPECT_EQ(read_json_lines(dir / "t.jsonl").front()["config"], *default_config_) << value.substr(0, 40);
  }
}

// The output path: an empty template warns and uses the default; any other
// value is a path, which is either created (the header names it, in valid
// JSON whatever its bytes) or refused by the system with one warning, and
// the program never notices.
TEST_F(BadOptions, AnyOutputPathIsATraceOrOneWarning) {
  std::vector<std::string> values = bad_values();
  values.push_back("no/such/dir/t.jsonl");
  values.push_back("%");
  values.push_back("%q%%%");
  values.push_back(std::string(300, 'x') + ".jsonl");  // a name longer than NAME_MAX
  for (const std::string& value : values) {
    SCOPED_TRACE("CUMEMTRACE_OUTPUT='" + value.substr(0, 40) + "'");
    TempDir dir;
    const ProgramRun run = run_known_sequence(dir, {{"CUMEMTRACE_OUTPUT", value}});
    ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
    EXPECT_LE(run.traces.size(), 1u);
    if (run.traces.empty()) {
      expect_warnings_name(run, "cannot create the trace file", 1, value.substr(0, 40));
      EXPECT_EQ(operations(run.manifest), operations(bare_->manifest));
      continue;
    }
    expect_untouched(run, run.traces.front(), value.substr(0, 40));
    const json header = read_json_lines(run.traces.front()).front();
    if (value.empty()) {
      expect_warnings_name(run, "CUMEMTRACE_OUTPUT=''", 1, "empty");
      EXPECT_EQ(header["config"]["output"], "cumemtrace.%h.%p.jsonl");
    } else {
      EXPECT_EQ(run.result.err, "");
      EXPECT_TRUE(header["config"]["output"].is_string());
    }
  }
}

}  // namespace
