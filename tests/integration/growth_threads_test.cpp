// Growth verdicts of programs whose threads run loops at once (issue 32):
// `cumemtrace run --check growth<=1KiB` gives the same verdict on every run,
// however the threads interleaved; a program without a loop fails the
// growth limit as unassessed, and passes it with --allow-unassessed, saying so.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {


struct Verdict {
  CommandResult run;  // `run --check`
  json report;        // report --format json of its trace
};

Verdict run_with_growth_check(const std::vector<std::string>& program, const std::vector<std::string>& options = {}) {
  TempDir dir;
  std::vector<std::string> argv = {CUMEMTRACE_CLI, "run", "--output", dir / "t.jsonl", "--check", "growth<=1KiB"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.emplace_back("--");
  argv.insert(argv.end(), program.begin(), program.end());
  Verdict v;
  v.run = run_at_most(argv, sim_environment(), 60);
  const CommandResult report = run_at_most({CUMEMTRACE_CLI, "report", "--format", "json", dir / "t.jsonl"}, {}, 60);
  EXPECT_EQ(report.exit_code, 0) << report.err;
  v.report = json::parse(report.out, nullptr, false);
  return v;
}

// Each run: the check fails on the fastest thread's 2 KiB per step, every
// thread's iterations from its own allocations.
void expect_same_leak_every_run(const std::vector<std::string>& program, std::uint64_t threads) {
  for (int run = 0; run < 3; ++run) {
    const Verdict v = run_with_growth_check(program);
    EXPECT_EQ(v.run.exit_code, 1) << "run " << run << ": " << v.run.err;
    EXPECT_NE(v.run.err.find("growth per iteration 2.00 KiB > 1.00 KiB"), std::string::npos) << v.run.err;
    const json& growth = v.report["growth"];
    ASSERT_EQ(growth.size(), 1u) << "run " << run << ": " << v.report["iterations"];
    EXPECT_EQ(growth[0]["bytes_per_iteration"], 2048) << "run " << run;
    EXPECT_EQ(growth[0]["threads"], threads) << "run " << run;
    ASSERT_EQ(v.report["iterations"]["threads"].size(), threads) << "run " << run;
    for (const json& t : v.report["iterations"]["threads"]) EXPECT_EQ(t["source"], "period") << t;
  }
}

TEST(GrowthThreads, EightNativeThreadsGiveTheSameVerdictEveryRun) {
  expect_same_leak_every_run({kApps + "/growth_threads"}, 8);
}

TEST(GrowthThreads, TwoPythonThreadsGiveTheSameVerdictEveryRun) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "python3 cannot load the ThreadSanitizer build's simulated CUDA";
#endif
  expect_same_leak_every_run({CUMEMTRACE_PYTHON3, CUMEMTRACE_PYTHON_APPS_DIR "/two_thread_leak.py"}, 2);
}

TEST(GrowthThreads, AProgramWithoutALoopFailsAGrowthLimitUnlessAllowed) {
  const Verdict strict = run_with_growth_check({kApps + "/growth_threads", "once"});
  EXPECT_EQ(strict.run.exit_code, 1) << strict.run.err;
  EXPECT_NE(strict.run.err.find("check failed: growth per iteration not assessed: no iterations found"),
            std::string::npos)
      << strict.run.err;
  EXPECT_NE(strict.run.err.find("--allow-unassessed"), std::string::npos) << strict.run.err;
  EXPECT_EQ(strict.report["iterations"]["source"], "none");

  const Verdict allowed = run_with_growth_check({kApps + "/growth_threads", "once"}, {"--allow-unassessed"});
  EXPECT_EQ(allowed.run.exit_code, 0) << allowed.run.err;
  EXPECT_NE(allowed.run.out.find("ok    growth per iteration not assessed"), std::string::npos) << allowed.run.out;
  EXPECT_NE(allowed.run.out.find("passed by --allow-unassessed"), std::string::npos) << allowed.run.out;
}

// --iteration-marker NAME: only that mark delimits iterations. The program
// marks nothing, so its period (which found the leak above) no longer
// counts: run --check, check, diff and report each say that the mark is
// missing and what to do.
TEST(GrowthThreads, AMissingIterationMarkerLeavesGrowthUnassessedEverywhere) {
  TempDir dir;
  const std::string trace = dir / "t.jsonl";
  const CommandResult run = run_at_most({CUMEMTRACE_CLI, "run", "--output", trace, "--check", "growth<=1KiB",
                                         "--iteration-marker", "train_step", "--", kApps + "/growth_threads"},
                                        sim_environment(), 60);
  const std::string missing =
      "growth per iteration not assessed: no mark or NVTX range named 'train_step' (--iteration-marker); ";
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find(missing), std::string::npos) << run.err;

  const CommandResult check = run_at_most(
      {CUMEMTRACE_CLI, "check", "--max-growth", "1KiB", "--iteration-marker", "train_step", trace}, {}, 60);
  EXPECT_EQ(check.exit_code, 1) << check.err;
  EXPECT_NE(check.err.find(missing), std::string::npos) << check.err;
  EXPECT_NE(check.err.find("--iteration-marker NAME"), std::string::npos) << check.err;  // the hint
  // Without it the period is found, and the leak with it.
  const CommandResult by_period = run_at_most({CUMEMTRACE_CLI, "check", "--max-growth", "1KiB", trace}, {}, 60);
  EXPECT_NE(by_period.err.find("growth per iteration 2.00 KiB > 1.00 KiB"), std::string::npos) << by_period.err;

  const CommandResult diff = run_at_most({CUMEMTRACE_CLI, "diff", trace, trace, "--max-growth-increase", "0",
                                          "--iteration-marker", "train_step"},
                                         {}, 60);
  EXPECT_EQ(diff.exit_code, 1) << diff.err;
  EXPECT_NE((diff.out + diff.err).find("no mark or NVTX range named 'train_step'"), std::string::npos)
      << diff.out << diff.err;

  const CommandResult text = run_at_most({CUMEMTRACE_CLI, "report", "--iteration-marker", "train_step", trace}, {}, 60);
  EXPECT_NE(text.out.find("growth leaks:    not assessed: no mark or NVTX range named 'train_step'"),
            std::string::npos)
      << text.out;
  const CommandResult report = run_at_most(
      {CUMEMTRACE_CLI, "report", "--format", "json", "--iteration-marker", "train_step", trace}, {}, 60);
  const json j = json::parse(report.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << report.out << report.err;
  EXPECT_EQ(j["iterations"]["source"], "none");
  EXPECT_EQ(j["iterations"]["marker"], "train_step");
  EXPECT_EQ(j["iterations"]["marker_count"], 0);

  // Usage errors: an empty name, and run without --check (nothing would use it).
  EXPECT_EQ(run_at_most({CUMEMTRACE_CLI, "check", "--max-growth", "1KiB", "--iteration-marker", "", trace}, {}, 60)
                .exit_code,
            2);
  EXPECT_EQ(run_at_most({CUMEMTRACE_CLI, "run", "--iteration-marker", "step", "--", "true"}, sim_environment(), 60)
                .exit_code,
            2);
}

}  // namespace
