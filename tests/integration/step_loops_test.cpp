// Issue 30: the pool's workloads as training loops whose host runs ahead of
// a busy simulated device (tests/apps/workload_device.h, --host-us), under
// the preload's pool with no settings and with PyTorch's policy. What the
// tests assert is what does not depend on timing: the host never waits for
// the device on the pool's account in a steady-state step (the sim's
// counters: only the program's own read-back per step), no queued work ever
// touches memory given back (the sim's device faults), nothing fails, and a
// workload that repeats the same shapes maps and unmaps nothing once warm.
// Step times are benchmarks (scripts/bench_steps.sh), never asserted here.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "integration_support.h"
#include "workload_output.h"

using namespace cumemtrace::testing;

namespace {

constexpr const char* kApps = CUMEMTRACE_APPS_DIR;
constexpr const char* kPyTorchPolicy = "segment_policy:pytorch,expandable_segments:false";

// name=value fields of the program's lines starting with `tag`.
std::vector<std::map<std::string, double>> fields_of(const std::string& out, const std::string& tag) {
  std::vector<std::map<std::string, double>> lines;
  for (const std::string& line : lines_of(out)) {
    std::istringstream in(line);
    std::string word;
    if (!(in >> word) || word != tag) continue;
    std::map<std::string, double> f;
    while (in >> word) {
      const auto eq = word.find('=');
      if (eq != std::string::npos) f[word.substr(0, eq)] = std::stod(word.substr(eq + 1));
    }
    lines.push_back(f);
  }
  return lines;
}

struct Loop {
  std::string workload;
  std::string steps;  // short runs: what is asserted holds from the first steady step
  friend void PrintTo(const Loop& loop, std::ostream* out) { *out << loop.workload << ", " << loop.steps << " steps"; }
};

class StepLoop : public ::testing::TestWithParam<Loop> {
 protected:
  CommandResult run(const std::optional<std::string>& conf) {
    const Loop& loop = GetParam();
    std::vector<std::string> argv = {CUMEMTRACE_CLI, "run", "--output", dir_ / "t.jsonl", "--"};
    if (loop.workload == "seeds_transformer") {
      argv.insert(argv.end(), {std::string(kApps) + "/seeds_transformer", "--host-us", "0", loop.steps});
    } else {
      argv.insert(argv.end(), {std::string(kApps) + "/varlen_workloads", "--shape", loop.workload, "--steps",
                               loop.steps, "--host-us", "0"});
    }
    // Device work slower than the host's: the host runs ahead.
    return run_command(argv, sim_environment({{"SIMCUDA_ASYNC_LATENCY_US", "20"},
                                              {"CUMEMTRACE_POOL", std::nullopt},
                                              {"CUMEMTRACE_POOL_CONF", conf},
                                              {"CUMEMTRACE_STACKS", "0"}}));
  }
  void check(const CommandResult& r, const char* what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(parse_output(r).failed, 0u);
    const auto steps = fields_of(r.out, "step");
    ASSERT_EQ(steps.size(), std::stoul(GetParam().steps)) << r.out;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      EXPECT_EQ(steps[i].at("faults"), 0) << "step " << i << ": queued work touched memory given back";
    }
    const auto steady = fields_of(r.out, "steady_state");
    ASSERT_EQ(steady.size(), 1u);
    EXPECT_EQ(steady[0].at("waits"), 0) << "the host waited for the device on the pool's account:\n" << r.out;
    if (GetParam().workload == "repeat") {
      for (const char* call : {"create", "release", "map", "unmap"})
        EXPECT_EQ(steady[0].at(call), 0) << call << " calls once warm:\n" << r.out;
    }
  }
  TempDir dir_;
};

TEST_P(StepLoop, TheDefaultPoolNeverWaitsAndGivesNothingBackEarly) { check(run(std::nullopt), "default pool"); }

TEST_P(StepLoop, PyTorchsPolicyNeverWaitsEither) { check(run(kPyTorchPolicy), kPyTorchPolicy); }

INSTANTIATE_TEST_SUITE_P(Workloads, StepLoop,
                         ::testing::Values(Loop{"seeds_transformer", "12"}, Loop{"padded_buckets", "8"},
                                           Loop{"long_attention", "8"}, Loop{"two_streams", "8"},
                                           Loop{"kv_cache", "40"}, Loop{"many_layers", "4"}, Loop{"repeat", "8"}),
                         [](const ::testing::TestParamInfo<Loop>& info) { return info.param.workload; });

}  // namespace
