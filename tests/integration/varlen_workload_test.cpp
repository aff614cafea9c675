// Issue 18's quality target on variable-length workloads
// (tests/apps/varlen_workloads: padded buckets, long attention, two streams,
// a growing KV cache, many layers of small and medium temporaries): with no
// settings, the pool's peak of reserved memory stays within 1.05 x the peak
// of live memory, both as the program runs under the preload's pool on the
// simulated device and as `cumemtrace replay` of its passthrough trace, where
// it must also be no worse than PyTorch's policy.
//
// "No settings" is the pool's default, as a user gets it: CUMEMTRACE_POOL_CONF
// is passed through from the test's environment (as the seeds' tests do), and
// the replay uses the same text as --pool-conf, so
//   CUMEMTRACE_POOL_CONF=expandable_segments:false ctest -R Varlen
// shows what the bounds make of the old default.
//
// Then issue 30's StepLoop tests (below; in this file rather than one of
// their own: each file that includes workload_output.h's <regex> costs CI
// 10 to 20 s to compile per build).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "integration_support.h"
#include "workload_output.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

constexpr const char* kVarlenApp = CUMEMTRACE_APPS_DIR "/varlen_workloads";
// Issue 18: peak reserved at most 1.05 x peak live, with no settings.
// kv_cache met it only with issue 30's placement by mapped stretch (1.061
// before, 1.035 since, replay and preload alike).
constexpr double kVarlenReservedBound = 1.05;
const std::vector<std::string> kShapes = {"padded_buckets", "long_attention", "two_streams", "kv_cache", "many_layers",
                                           "repeat"};

// The pool settings in force for "the default": the environment's
// CUMEMTRACE_POOL_CONF, normally unset.
std::string pool_conf_in_force() {
  const char* conf = std::getenv("CUMEMTRACE_POOL_CONF");
  return conf ? conf : "";
}

const char* describe(const std::string& conf) { return conf.empty() ? "default settings" : conf.c_str(); }

double ratio(const json& figures, std::uint64_t peak_live) {
  return figures["peak_reserved"].get<double>() / static_cast<double>(peak_live);
}

TEST(VarlenWorkloads, TheProgramHasEveryShapeTheTestsCheck) {
  const CommandResult r = run_command({kVarlenApp, "--list"}, sim_environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out), kShapes);
  EXPECT_NE(run_command({kVarlenApp, "--shape", "no_such_shape"}, sim_environment()).exit_code, 0);
}

class VarlenWorkload : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::string> traced(const std::string& trace) const {
    return {CUMEMTRACE_CLI, "run", "--output", trace, "--", kVarlenApp, "--shape", GetParam()};
  }

  TempDir dir_;
  std::string trace_ = dir_ / "varlen.jsonl";
};

// (i) The program under libcumemtrace.so's own pool (CUMEMTRACE_POOL unset:
// caching) on the simulated 16 GiB device: what the trace says it reserved.
TEST_P(VarlenWorkload, UnderThePreloadsDefaultPoolReservedStaysWithinTheBound) {
  const CommandResult plain = run_command({kVarlenApp, "--shape", GetParam()}, sim_environment());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const AppOutput without = parse_output(plain);
  EXPECT_EQ(without.failed, 0u);
  // The workload is the size the issue asks for: 1 to 4 GiB live at its peak.
  EXPECT_GE(without.peak_live, std::uint64_t{1} << 30);
  EXPECT_LE(without.peak_live, std::uint64_t{4} << 30);

  const CommandResult r = run_command(traced(trace_), sim_environment({{"CUMEMTRACE_POOL", std::nullopt}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const AppOutput app = parse_output(r);
  const json report = run_json({CUMEMTRACE_CLI, "report", trace_, "--format", "json"});
  ASSERT_EQ(report["program"]["pool"], "caching");
  EXPECT_EQ(app.failed, 0u);
  EXPECT_EQ(report["ooms"], 0);
  EXPECT_EQ(app.peak_live, without.peak_live) << "the pool changed what the program did";
  EXPECT_EQ(app.steps, without.steps);
  EXPECT_EQ(report["peak_allocated"], app.peak_live);
  EXPECT_EQ(report["leaked_count"], 0);
  const double reserved_over_live = ratio(report, app.peak_live);
  const std::string conf = pool_conf_in_force();
  std::printf("%s under the preload (%s): peak live %llu B, peak reserved %llu B, reserved / live %.4f\n",
              GetParam().c_str(), describe(conf), static_cast<unsigned long long>(app.peak_live),
              static_cast<unsigned long long>(report["peak_reserved"].get<std::uint64_t>()), reserved_over_live);
  RecordProperty("preload_reserved_over_live", std::to_string(reserved_over_live));
  EXPECT_LE(reserved_over_live, kVarlenReservedBound) << GetParam() << " under the preload, " << describe(conf);
}

// (ii) The program's own cudaMalloc/cudaFree calls (CUMEMTRACE_POOL=
// passthrough), replayed through the pool with no settings, and with
// PyTorch's policy for comparison.
TEST_P(VarlenWorkload, ReplayedWithDefaultSettingsReservedStaysWithinTheBoundAndPyTorchs) {
  // (--host-us 0: the program marks its steps, with the same allocations.)
  std::vector<std::string> argv_traced = traced(trace_);
  argv_traced.insert(argv_traced.end(), {"--host-us", "0"});
  const CommandResult r = run_command(argv_traced, sim_environment({{"CUMEMTRACE_POOL", "passthrough"}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const AppOutput app = parse_output(r);
  ASSERT_GT(app.peak_live, 0u);
  EXPECT_EQ(app.failed, 0u);
  const std::string conf = pool_conf_in_force();
  std::vector<std::string> argv = {CUMEMTRACE_CLI, "replay", trace_, "--format", "json"};
  if (!conf.empty()) argv.insert(argv.end(), {"--pool-conf", conf});
  const json ours = run_json(argv);
  const json torch = run_json({CUMEMTRACE_CLI, "replay", trace_, "--pool-conf", "pytorch", "--format", "json"});
  EXPECT_EQ(ours["recorded"]["pool"], "passthrough");
  EXPECT_EQ(ours["peak_allocated"], app.peak_live);
  EXPECT_EQ(ours["ooms"], 0);
  EXPECT_EQ(ours["invalid_frees"], 0);
  // Issue 30: the replayed pool orders the device, it never waits for it;
  // and once warm, a workload whose shapes repeat maps and unmaps nothing.
  EXPECT_EQ(ours["synchronizes"], 0);
  ASSERT_TRUE(ours.contains("steps")) << "the program's step marks were not found";
  EXPECT_EQ(ours["steps"]["mark"], "step #");
  EXPECT_EQ(ours["steps"]["count"], app.steps);
  EXPECT_EQ(ours["steps"]["steady_synchronizes"], 0);
  std::printf("%s replayed, per steady step: %s\n", GetParam().c_str(), ours["steps"]["per_steady_step"].dump().c_str());
  if (GetParam() == "repeat") {
    EXPECT_EQ(ours["steps"]["steady_segments_allocated"], 0);
    EXPECT_EQ(ours["steps"]["steady_segments_freed"], 0);
  }
  const double reserved_over_live = ratio(ours, app.peak_live);
  const double torch_over_live = ratio(torch, app.peak_live);
  std::printf("%s replayed: peak live %llu B; peak reserved / peak live %.4f (%s), %.4f (PyTorch's policy)\n",
              GetParam().c_str(), static_cast<unsigned long long>(app.peak_live), reserved_over_live, describe(conf),
              torch_over_live);
  RecordProperty("reserved_over_live", std::to_string(reserved_over_live));
  RecordProperty("pytorch_reserved_over_live", std::to_string(torch_over_live));
  EXPECT_LE(reserved_over_live, kVarlenReservedBound) << GetParam() << " replayed, " << describe(conf);
  EXPECT_LE(ours["peak_reserved"].get<double>(), torch["peak_reserved"].get<double>());
}

INSTANTIATE_TEST_SUITE_P(Shapes, VarlenWorkload, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace

// Issue 30, the StepLoop tests: the pool's workloads as training loops
// whose host runs ahead of a busy simulated device
// (tests/apps/workload_device.h, --host-us), under
// the preload's pool with no settings and with PyTorch's policy. What the
// tests assert is what does not depend on timing: the host never waits for
// the device on the pool's account in a steady-state step (the sim's
// counters: only the program's own read-back per step), no queued work ever
// touches memory given back (the sim's device faults), nothing fails, and a
// workload that repeats the same shapes maps and unmaps nothing once warm;
// and under the default pool reserved memory stays within its bound.
// Step times are benchmarks (scripts/bench_steps.sh), never asserted here.
namespace {

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

TEST_P(StepLoop, TheDefaultPoolNeverWaitsAndGivesNothingBackEarly) {
  check(run(std::nullopt), "default pool");
  // And it still fits on a busy device, where most pages freed lately are
  // still in use by queued work: their memory moves by aliasing, in device
  // order (repeat reached 1.10 when only idle pages moved).
  const json report = run_json({CUMEMTRACE_CLI, "report", dir_ / "t.jsonl", "--format", "json"});
  const double reserved_over_live = ratio(report, report["peak_allocated"].get<std::uint64_t>());
  std::printf("%s on a busy device: peak reserved / peak live %.4f\n", GetParam().workload.c_str(),
              reserved_over_live);
  EXPECT_LE(reserved_over_live, kVarlenReservedBound);
}

TEST_P(StepLoop, PyTorchsPolicyNeverWaitsEither) { check(run(kPyTorchPolicy), kPyTorchPolicy); }

// expandable_page_size_mb: each page is one physical handle, mapped whole.
// The trace's mapped runs are whole pages, and the driver was asked for one
// cuMemMap per page mapped (the sim's counters, summed over the steps, which
// cover the whole run): 2 MiB handles under 8 MiB pages would take four.
class LargerPages : public StepLoop {};

TEST_P(LargerPages, AreOneHandleEach) {
  constexpr std::uint64_t kPage = 8u << 20;
  const CommandResult r = run("expandable_page_size_mb:8");
  check(r, "8 MiB pages");
  std::uint64_t mapped = 0;
  for (const json& e : read_json_lines(dir_ / "t.jsonl")) {
    if (e.value("ev", "") != "segment_alloc" || e.value("api", "") != "cuMemMap") continue;
    EXPECT_EQ(e["size"].get<std::uint64_t>() % kPage, 0u) << e.dump();
    mapped += e["size"].get<std::uint64_t>();
  }
  double map_calls = 0;
  for (const auto& step : fields_of(r.out, "step")) map_calls += step.at("map");
  ASSERT_GT(mapped, 0u) << "no expandable segments";
  EXPECT_GT(map_calls, 0);
  EXPECT_LE(map_calls * kPage, static_cast<double>(mapped)) << "more than one cuMemMap per page";
}

// One workload that moves pages every step is enough.
INSTANTIATE_TEST_SUITE_P(Workloads, LargerPages, ::testing::Values(Loop{"long_attention", "8"}),
                         [](const ::testing::TestParamInfo<Loop>& info) { return info.param.workload; });

INSTANTIATE_TEST_SUITE_P(Workloads, StepLoop,
                         ::testing::Values(Loop{"seeds_transformer", "12"}, Loop{"padded_buckets", "8"},
                                           Loop{"long_attention", "8"}, Loop{"two_streams", "8"},
                                           Loop{"kv_cache", "40"}, Loop{"many_layers", "4"}, Loop{"repeat", "8"}),
                         [](const ::testing::TestParamInfo<Loop>& info) { return info.param.workload; });

}  // namespace
