// The seeds' workload (tests/apps/seeds_transformer, issue 4's second quality
// target) on the simulated device, with and without cumemtrace, and what the
// caching pool makes of it: `cumemtrace replay` of its passthrough trace, and
// the program itself under the preload's pool on a device it fills to 90%
// (issue 4) and to 97% (issue 18).
//
// "The default pool" is what a user gets with no settings: the tests pass the
// environment's CUMEMTRACE_POOL_CONF through (to the preload, and to replay
// as --pool-conf), normally unset, so that
//   CUMEMTRACE_POOL_CONF=expandable_segments:false ctest -R Seeds
// shows what the bounds make of the old default.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>

#include "integration_support.h"
#include "workload_output.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

constexpr const char* kApp = CUMEMTRACE_APPS_DIR "/seeds_transformer";
// Issue 4: no out-of-memory while peak live stays under 90% of the device.
// Issue 18 tightens the rest, with no settings: peak reserved at most 1.05 x
// peak live (issue 4 allowed 1.15), and no out-of-memory at 97%.
constexpr double kReservedBound = 1.05;
constexpr double kLiveShareOfCapacity = 0.90;
constexpr double kTightLiveShareOfCapacity = 0.97;

// `cumemtrace replay TRACE [ARGS...] --format json` with the default pool (the
// environment's CUMEMTRACE_POOL_CONF where set).
json replay_default(const std::string& trace, std::vector<std::string> args = {}) {
  std::vector<std::string> argv = {CUMEMTRACE_CLI, "replay", trace, "--format", "json"};
  if (const char* conf = std::getenv("CUMEMTRACE_POOL_CONF")) argv.insert(argv.end(), {"--pool-conf", conf});
  argv.insert(argv.end(), args.begin(), args.end());
  return run_json(argv);
}

class SeedsWorkload : public ::testing::Test {
 protected:
  // The program under `cumemtrace run` with the pool out of the way, so the
  // trace holds its own cudaMalloc/cudaFree calls.
  AppOutput run_traced(const EnvChanges& env = {}) {
    EnvChanges all = {{"CUMEMTRACE_POOL", "passthrough"}};
    all.insert(all.end(), env.begin(), env.end());
    const CommandResult r = run_command({CUMEMTRACE_CLI, "run", "--output", trace_, "--", kApp}, sim_environment(all));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return parse_output(r);
  }
  void replay_without_oom(double share);

  TempDir dir_;
  std::string trace_ = dir_ / "seeds.jsonl";
};

TEST_F(SeedsWorkload, RunsTheSameWithAndWithoutThePreload) {
  const CommandResult plain = run_command({kApp}, sim_environment());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const AppOutput without = parse_output(plain);
  EXPECT_EQ(without.failed, 0u);
  EXPECT_EQ(without.steps, 96u);
  EXPECT_GT(without.peak_live, std::uint64_t{1} << 30);

  const AppOutput with = run_traced();
  EXPECT_EQ(with.peak_live, without.peak_live);
  EXPECT_EQ(with.failed, 0u);
  // The trace saw every allocation: its peak is the program's own.
  const json report = run_json({CUMEMTRACE_CLI, "report", trace_, "--format", "json"});
  EXPECT_EQ(report["peak_allocated"], with.peak_live);
  EXPECT_EQ(report["leaked_count"], 0);
}

TEST_F(SeedsWorkload, ThePoolReservesLittleMoreThanIsLive) {
  const AppOutput app = run_traced();
  ASSERT_GT(app.peak_live, 0u);
  const json ours = replay_default(trace_);
  const json torch = run_json({CUMEMTRACE_CLI, "replay", trace_, "--pool-conf", "pytorch", "--format", "json"});
  EXPECT_EQ(ours["peak_allocated"], app.peak_live);
  EXPECT_EQ(ours["ooms"], 0);
  const double ratio = ours["peak_reserved"].get<double>() / static_cast<double>(app.peak_live);
  const double torch_ratio = torch["peak_reserved"].get<double>() / static_cast<double>(app.peak_live);
  std::printf("seeds workload: peak live %llu B; peak reserved / peak live: %.4f (our default pool), %.4f "
              "(PyTorch's policy); min capacity / peak live: %.4f (ours), %.4f (PyTorch's)\n",
              static_cast<unsigned long long>(app.peak_live), ratio, torch_ratio,
              ours["min_capacity_over_peak_live"].get<double>(), torch["min_capacity_over_peak_live"].get<double>());
  RecordProperty("reserved_over_live", std::to_string(ratio));
  RecordProperty("pytorch_reserved_over_live", std::to_string(torch_ratio));
  EXPECT_LE(ratio, kReservedBound);
  EXPECT_LE(ours["peak_reserved"].get<double>(), torch["peak_reserved"].get<double>());
}

// The replay on a device of which peak live is `share`: no out-of-memory.
void SeedsWorkload::replay_without_oom(double share) {
  const AppOutput app = run_traced();
  ASSERT_GT(app.peak_live, 0u);
  const auto capacity = static_cast<std::uint64_t>(std::ceil(app.peak_live / share));
  const json ours = replay_default(trace_, {"--capacity", std::to_string(capacity)});
  EXPECT_EQ(ours["ooms"], 0) << "on a device of " << capacity << " bytes";
}

TEST_F(SeedsWorkload, NoOutOfMemoryWhileLiveStaysUnderNinetyPercent) { replay_without_oom(kLiveShareOfCapacity); }

TEST_F(SeedsWorkload, NoOutOfMemoryWhileLiveStaysUnderNinetySevenPercent) {
  replay_without_oom(kTightLiveShareOfCapacity);
}

// Under libcumemtrace.so's own pool (CUMEMTRACE_POOL unset: caching), the
// real thing: what the trace says the pool reserved.
TEST_F(SeedsWorkload, UnderThePreloadsPoolReservedStaysWithinTheBound) {
  const CommandResult r =
      run_command({CUMEMTRACE_CLI, "run", "--output", trace_, "--", kApp}, sim_environment({{"CUMEMTRACE_POOL", std::nullopt}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const AppOutput app = parse_output(r);
  const json report = run_json({CUMEMTRACE_CLI, "report", trace_, "--format", "json"});
  ASSERT_EQ(report["program"]["pool"], "caching");
  EXPECT_EQ(app.failed, 0u);
  EXPECT_EQ(report["peak_allocated"], app.peak_live);
  const double ratio = report["peak_reserved"].get<double>() / static_cast<double>(app.peak_live);
  std::printf("seeds workload under the preload: peak reserved / peak live %.4f\n", ratio);
  RecordProperty("preload_reserved_over_live", std::to_string(ratio));
  EXPECT_LE(ratio, kReservedBound);
}

// Issues 4 and 18 as a program: seeds_transformer on a simulated device just
// large enough that its peak of live bytes is `share` of it, under the
// preload's caching pool. The sim counts physical memory in 2 MiB pages
// mapped anywhere, as a real GPU's driver does (tests/sim/README.md), so a
// segment fails only when the device lacks the pages, not for want of a
// contiguous hole. `pool_conf` unset: the default pool (the environment's
// CUMEMTRACE_POOL_CONF, normally unset).
class SeedsOnAFullDevice : public SeedsWorkload {
 protected:
  void run_and_check(double share, const std::optional<std::string>& pool_conf) {
    const CommandResult plain = run_command({kApp}, sim_environment());
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const AppOutput without = parse_output(plain);
    ASSERT_GT(without.peak_live, 0u);
    const auto capacity = static_cast<std::uint64_t>(std::ceil(without.peak_live / share));
    EnvChanges env = {{"CUMEMTRACE_POOL", std::nullopt}, {"SIMCUDA_DEVICE_MEMORY", std::to_string(capacity)}};
    if (pool_conf) env.emplace_back("CUMEMTRACE_POOL_CONF", pool_conf);
    const CommandResult r = run_command({CUMEMTRACE_CLI, "run", "--output", trace_, "--", kApp}, sim_environment(env));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const AppOutput app = parse_output(r);
    EXPECT_EQ(app.failed, 0u) << "on a device of " << capacity << " bytes";
    EXPECT_EQ(app.peak_live, without.peak_live);
    EXPECT_EQ(app.steps, without.steps);

    std::size_t devices = 0, ooms = 0;
    for (const json& line : read_json_lines(trace_)) {
      if (line["ev"] == "oom") ++ooms;
      if (line["ev"] == "device") {
        ++devices;
        EXPECT_EQ(line["total"], capacity) << "the program ran on the device it was given";
      }
    }
    EXPECT_EQ(ooms, 0u) << "on a device of " << capacity << " bytes";
    EXPECT_EQ(devices, 1u);

    const json report = run_json({CUMEMTRACE_CLI, "report", trace_, "--format", "json"});
    ASSERT_EQ(report["program"]["pool"], "caching");
    EXPECT_EQ(report["peak_allocated"], app.peak_live);
    const double ratio = report["peak_reserved"].get<double>() / static_cast<double>(app.peak_live);
    const char* env_conf = std::getenv("CUMEMTRACE_POOL_CONF");
    const std::string shown_conf = pool_conf ? *pool_conf : env_conf ? env_conf : "default";
    std::printf("seeds workload at %.0f%% of a %llu-byte device (pool conf: %s): peak live %llu B, peak reserved "
                "%llu B, reserved / live %.4f, failed mallocs %llu\n",
                share * 100, static_cast<unsigned long long>(capacity), shown_conf.c_str(),
                static_cast<unsigned long long>(app.peak_live),
                static_cast<unsigned long long>(report["peak_reserved"].get<std::uint64_t>()), ratio,
                static_cast<unsigned long long>(app.failed));
    RecordProperty("reserved_over_live_at_" + std::to_string(std::lround(share * 100)) + "_percent",
                   std::to_string(ratio));
    EXPECT_LE(ratio, kReservedBound);
  }
};

class SeedsAtNinetyPercent : public SeedsOnAFullDevice {};

TEST_F(SeedsAtNinetyPercent, DefaultPoolHasNoOutOfMemoryAndStaysWithinTheBound) {
  run_and_check(kLiveShareOfCapacity, std::nullopt);
}

TEST_F(SeedsAtNinetyPercent, ExpandableSegmentsHaveNoOutOfMemoryAndStayWithinTheBound) {
  run_and_check(kLiveShareOfCapacity, "expandable_segments:true");
}

// Issue 18: no failed request even when peak live is 97% of the device.
class SeedsAtNinetySevenPercent : public SeedsOnAFullDevice {};

TEST_F(SeedsAtNinetySevenPercent, DefaultPoolHasNoOutOfMemoryAndStaysWithinTheBound) {
  run_and_check(kTightLiveShareOfCapacity, std::nullopt);
}

TEST_F(SeedsAtNinetySevenPercent, ExpandableSegmentsHaveNoOutOfMemoryAndStayWithinTheBound) {
  run_and_check(kTightLiveShareOfCapacity, "expandable_segments:true");
}

}  // namespace
