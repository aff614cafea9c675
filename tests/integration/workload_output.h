// What the workload programs of tests/apps (seeds_transformer,
// varlen_workloads) print, and running the CLI for JSON: shared by the
// seeds' and the variable-length workloads' tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "integration_support.h"

namespace cumemtrace::testing {

// `peak_live_bytes=N failed_mallocs=N steps=N`
struct AppOutput {
  std::uint64_t peak_live = 0;
  std::uint64_t failed = 0;
  std::uint64_t steps = 0;
};

inline AppOutput parse_output(const CommandResult& r) {
  std::smatch m;
  static const std::regex line(R"(peak_live_bytes=(\d+) failed_mallocs=(\d+) steps=(\d+))");
  EXPECT_TRUE(std::regex_search(r.out, m, line)) << r.out << r.err;
  if (m.empty()) return {};
  return {std::stoull(m[1]), std::stoull(m[2]), std::stoull(m[3])};
}

// A CLI command that prints JSON (report, replay --format json).
inline nlohmann::json run_json(const std::vector<std::string>& argv) {
  const CommandResult r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

}  // namespace cumemtrace::testing
