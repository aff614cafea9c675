// README.md's recipes for reading a trace with pandas and with DuckDB, run
// as they are printed there (the code blocks after `<!-- recipe: pandas -->`
// and `<!-- recipe: duckdb -->`, extracted from README.md here, so the
// README cannot drift from what is tested), must say exactly what
// `cumemtrace report --format json` says: peak allocated and leaked bytes per
// device and for all devices, on golden traces, on traces made to trip a
// naive reader (frees of unknown pointers, double frees, a free naming the
// wrong device, an address allocated twice without a free, segments at an
// allocation's address, an alloc and its free at the same time), on a trace
// recorded from a real program under the preload, and (DuckDB) on a .zst.
//
// The clients are Debian's /usr/bin/python3 with python3-pandas and Node's
// @duckdb/node-api from tests/js/node_modules; without them the tests skip,
// except with CI=true (scripts/setup.sh installs them there).
#include <gtest/gtest.h>
#include <zstd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "integration_support.h"

namespace cumemtrace::testing {
namespace {

using nlohmann::json;

const std::string kGolden = CUMEMTRACE_SOURCE_DIR "/tests/integration/golden/traces/";
const std::string kHere = CUMEMTRACE_SOURCE_DIR "/tests/integration/recipes/";

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// Skips the test (fails it in CI) when a client is missing.
#define SKIP_UNLESS(available, why)                                       \
  do {                                                                    \
    if (!(available)) {                                                   \
      if (in_ci()) FAIL() << (why) << " (CI=true: scripts/setup.sh installs it)"; \
      GTEST_SKIP() << (why);                                              \
    }                                                                     \
  } while (0)

// The code block that follows `<!-- recipe: NAME -->` in README.md.
std::string readme_block(const std::string& name) {
  std::istringstream readme(read_file(CUMEMTRACE_SOURCE_DIR "/README.md"));
  const std::string marker = "<!-- recipe: " + name + " -->";
  std::string line, code;
  bool after_marker = false, inside = false;
  while (std::getline(readme, line)) {
    if (inside) {
      if (line.starts_with("```")) return code;
      code += line + "\n";
    } else if (after_marker && line.starts_with("```")) {
      inside = true;
    } else if (line == marker) {
      after_marker = true;
    }
  }
  ADD_FAILURE() << "README.md has no code block after " << marker;
  return "";
}

// A trace from a real program: the bundled demo (a leak per step, the
// caching pool's segments) run under the preload on the simulated device.
std::string record_demo(const TempDir& dir) {
  const std::string trace = dir / "demo.jsonl";
  const CommandResult run = run_at_most(
      {CUMEMTRACE_CLI, "run", "--output", trace, "--", CUMEMTRACE_APPS_DIR "/demo_training_loop", "6"},
      sim_environment(), 60);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return trace;
}

std::string zstd_copy(const TempDir& dir, const std::string& trace) {
  const std::string text = read_file(trace);
  std::string frame(ZSTD_compressBound(text.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), text.data(), text.size(), 3));
  const std::string path = dir / (std::filesystem::path(trace).filename().string() + ".zst");
  write_file(path, frame);
  return path;
}

// An integer the client printed, as a number or (BigInt) a decimal string.
std::string integer_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  ADD_FAILURE() << "not an integer: " << value;
  return value.dump();
}

// `results` (the driver's JSON) against the report of each trace (for a
// .zst, the report of the trace it was compressed from).
void expect_same_as_report(const json& results, const std::vector<std::string>& traces) {
  for (const std::string& trace : traces) {
    SCOPED_TRACE(trace);
    const CommandResult report = run_command({CUMEMTRACE_CLI, "report", trace, "--format", "json"});
    ASSERT_EQ(report.exit_code, 0) << report.err;
    const json expected = json::parse(report.out);
    ASSERT_TRUE(results.contains(trace)) << results.dump();
    const json& got = results[trace];
    EXPECT_EQ(integer_text(got["peak_allocated"]), std::to_string(expected["peak_allocated"].get<long long>()));
    EXPECT_EQ(integer_text(got["leaked_bytes"]), std::to_string(expected["leaked_bytes"].get<long long>()));
    // Every device the report has memory on, and no other.
    std::size_t devices_with_allocations = 0;
    for (const auto& [dev, figures] : expected["devices"].items()) {
      if (figures["allocs"].get<long long>() == 0) continue;
      ++devices_with_allocations;
      ASSERT_TRUE(got["devices"].contains(dev)) << "device " << dev << ": " << got.dump();
      EXPECT_EQ(integer_text(got["devices"][dev][0]), std::to_string(figures["peak_allocated"].get<long long>()))
          << "peak allocated on device " << dev;
      EXPECT_EQ(integer_text(got["devices"][dev][1]), std::to_string(figures["leaked_bytes"].get<long long>()))
          << "leaked on device " << dev;
      EXPECT_EQ(integer_text(got["over_time_max"][dev]), std::to_string(figures["peak_allocated"].get<long long>()))
          << "highest point of the allocated-over-time series on device " << dev;
    }
    EXPECT_EQ(got["devices"].size(), devices_with_allocations) << got.dump();
  }
}

std::vector<std::string> test_traces(const TempDir& dir) {
  return {kGolden + "normal_leak.jsonl", kGolden + "two_devices.jsonl", kGolden + "training_loop.jsonl",
          kGolden + "python_frames.jsonl", kHere + "edge_cases.jsonl", record_demo(dir)};
}

TEST(Recipes, EdgeCaseTraceHasWhatItClaims) {
  // The traps are really there, as the analyzer counts them.
  const CommandResult report = run_command({CUMEMTRACE_CLI, "report", kHere + "edge_cases.jsonl", "--format", "json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const json r = json::parse(report.out);
  EXPECT_EQ(r["unknown_frees"], 2);     // 0xdead, and 0x1000 freed twice
  EXPECT_EQ(r["duplicate_allocs"], 1);  // 0x3000 allocated twice
  EXPECT_EQ(r["bad_lines"], 0);
  EXPECT_EQ(r["devices"]["0"]["peak_allocated"], 7000);  // 2000 live + 5000 freed at the same t
  EXPECT_EQ(r["peak_allocated"], 7300);
  EXPECT_EQ(r["leaked_bytes"], 2050);
}

TEST(Pandas, ReadmeRecipeGivesTheReportsPeaksAndLeaks) {
  SKIP_UNLESS(std::filesystem::exists("/usr/bin/python3"), "no /usr/bin/python3");
  SKIP_UNLESS(run_command({"/usr/bin/python3", "-c", "import pandas"}).exit_code == 0,
              "Debian's python3 has no pandas (apt-get install python3-pandas)");
  TempDir dir;
  write_file(dir / "recipe.py", readme_block("pandas"));
  const std::vector<std::string> traces = test_traces(dir);
  std::vector<std::string> argv{"/usr/bin/python3", kHere + "pandas_recipe_driver.py", dir / "recipe.py"};
  argv.insert(argv.end(), traces.begin(), traces.end());
  const CommandResult run = run_command(argv);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  expect_same_as_report(json::parse(run.out), traces);
}

TEST(DuckDB, ReadmeRecipeGivesTheReportsPeaksAndLeaks) {
  const std::string js = CUMEMTRACE_SOURCE_DIR "/tests/js";
  SKIP_UNLESS(run_command({"node", "--version"}).exit_code == 0, "no node on PATH");
  SKIP_UNLESS(std::filesystem::exists(js + "/node_modules/@duckdb/node-api"),
              "no tests/js/node_modules/@duckdb/node-api (cd tests/js && npm ci)");
  TempDir dir;
  write_file(dir / "recipe.sql", readme_block("duckdb"));
  std::vector<std::string> traces = test_traces(dir);
  // A trace cut short in the middle of a line (a crash): README says DuckDB
  // skips the half line, and the report reads up to it.
  const std::string whole = read_file(kGolden + "two_devices.jsonl");
  const std::size_t cut_line = whole.find("\n{\"ev\":\"alloc\",\"t\":4000");
  ASSERT_NE(cut_line, std::string::npos);
  write_file(dir / "cut.jsonl", whole.substr(0, cut_line + 40));  // 39 bytes of that line
  traces.push_back(dir / "cut.jsonl");
  // DuckDB reads zstd itself (README says so): a .zst must give the same.
  const std::string compressed = zstd_copy(dir, kGolden + "two_devices.jsonl");
  std::vector<std::string> argv{"node", js + "/duckdb_recipe.mjs", dir / "recipe.sql"};
  argv.insert(argv.end(), traces.begin(), traces.end());
  argv.push_back(compressed);
  const CommandResult run = run_command(argv);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json results = json::parse(run.out);
  expect_same_as_report(results, traces);
  ASSERT_TRUE(results.contains(compressed));
  EXPECT_EQ(results[compressed], results[kGolden + "two_devices.jsonl"]);
}

}  // namespace
}  // namespace cumemtrace::testing
