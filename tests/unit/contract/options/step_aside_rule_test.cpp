// Which callers the caching pool leaves to the driver
// (options/step_aside_rule.h).
#include "options/step_aside_rule.h"

#include <gtest/gtest.h>

using cumemtrace::contract::step_aside_setting_problem;
using cumemtrace::contract::steps_aside_for;

TEST(StepAsideRule, AutoNamesTheFrameworksCachingAllocators) {
  for (const char* path : {"/opt/conda/lib/python3.11/site-packages/torch/lib/libc10_cuda.so",
                           "/usr/lib/python3/dist-packages/cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so",
                           "/venv/lib/python3.12/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so",
                           "/venv/lib/librmm.so", "/venv/site-packages/jaxlib/xla_extension.so",
                           "/venv/site-packages/tensorflow/libtensorflow_framework.so.2"}) {
    EXPECT_TRUE(steps_aside_for("auto", path, false)) << path;
  }
  for (const char* path : {"/usr/bin/python3.11", "/work/app/train", "/opt/conda/lib/libnccl.so.2",
                           "/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so", ""}) {
    EXPECT_FALSE(steps_aside_for("auto", path, false)) << path;
  }
  EXPECT_FALSE(steps_aside_for("auto", nullptr, false));
}

TEST(StepAsideRule, PyTorchWithoutItsCacheKeepsThePool) {
  const char* c10 = "/site-packages/torch/lib/libc10_cuda.so";
  EXPECT_FALSE(steps_aside_for("auto", c10, true));
  // CuPy is still a cache of its own.
  EXPECT_TRUE(steps_aside_for("auto", "/site-packages/cupy/cuda/memory.so", true));
  // An explicit pattern means what it says.
  EXPECT_TRUE(steps_aside_for("*/libc10_cuda.so", c10, true));
}

TEST(StepAsideRule, PatternsReplaceTheListAndOffTurnsItOff) {
  EXPECT_TRUE(steps_aside_for("*/libmyalloc.so*,*/other/*", "/x/libmyalloc.so.1", false));
  EXPECT_TRUE(steps_aside_for("*/libmyalloc.so*,*/other/*", "/a/other/b.so", false));
  EXPECT_FALSE(steps_aside_for("*/libmyalloc.so*", "/site-packages/torch/lib/libc10_cuda.so", false));
  EXPECT_FALSE(steps_aside_for("off", "/site-packages/torch/lib/libc10_cuda.so", false));
}

TEST(StepAsideRule, SettingsThatCanMatchNothingAreRefused) {
  EXPECT_TRUE(step_aside_setting_problem("auto").empty());
  EXPECT_TRUE(step_aside_setting_problem("off").empty());
  EXPECT_TRUE(step_aside_setting_problem("*/libx.so,/abs/path/liby.so").empty());
  for (const char* bad : {"", ",,", "libc10_cuda.so", "*/ok.so,typo"}) {
    EXPECT_FALSE(step_aside_setting_problem(bad).empty()) << "'" << bad << "'";
  }
}
