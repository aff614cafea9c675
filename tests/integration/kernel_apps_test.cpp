// Programs with kernels, compiled by nvcc (tests/apps/kernel_train.cu, issue
// 20 item 6), on the simulated device: linked to libcudart.so.13 (the sim's
// at run time) and to the sim's static runtime archive. Each runs bare (it
// checks its own return codes, last errors and symbol round trips) and under
// libcumemtrace.so, whose trace must match the manifest it wrote event by
// event: the kernels' module globals (__device__, __managed__) are the
// driver's memory and must not appear; the stream-ordered temporaries carry
// their streams; the leaked buffers are live at the end.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration_support.h"
#include "route_check.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {


class KernelApps : public ::testing::TestWithParam<std::string> {
 protected:
  CommandResult run(const std::string& app, EnvChanges env = {}) {
    return run_at_most({kApps + "/" + app, manifest_}, sim_environment(env), 120);
  }
  CommandResult traced(const std::string& app) {
    return run(app, {{"CUMEMTRACE_POOL", "passthrough"},
                     {"LD_PRELOAD", CUMEMTRACE_PRELOAD},
                     {"CUMEMTRACE_OUTPUT", trace_}});
  }

  TempDir dir_;
  const std::string trace_ = dir_ / "trace.jsonl";
  const std::string manifest_ = dir_ / "manifest.jsonl";
};

TEST_P(KernelApps, RunsOnTheSimWithoutCumemtrace) {
  const auto r = run(GetParam());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 3 weights/activations/gradients, 2 temporaries per step for 4 steps, 1 leak.
  int allocs = 0;
  for (const json& m : read_json_lines(manifest_)) allocs += m["ev"] == "alloc";
  EXPECT_EQ(allocs, 12);
}

TEST_P(KernelApps, TraceMatchesTheManifestExactly) {
  const auto r = traced(GetParam());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_json_lines(trace_);
  const auto done = read_json_lines(manifest_);
  EXPECT_EQ(compare_events(expected_events(done), memory_events(lines)), "");
  EXPECT_EQ(check_trace_frame(lines, done), "");
  EXPECT_EQ(check_address_order(lines), "");
}

INSTANTIATE_TEST_SUITE_P(Builds, KernelApps,
                         ::testing::Values("kernel_train_shared", "kernel_train_static"),
                         [](const auto& info) {
                           return info.param == "kernel_train_shared" ? std::string("CudartShared")
                                                                      : std::string("StaticRuntime");
                         });

}  // namespace
