// The HTML report's flame graphs in a real browser (ctest clients.*): the
// reports of three golden traces and of a generated one with a thousand
// narrow frames side by side, checked by tests/js/flame_check.mjs in
// headless Chromium through playwright-core: the page's one script runs
// under its CSP without a console message, draws frames as wide as their
// bytes, names bytes and share on hover, zooms on a click and back, says
// when a view is empty, draws runs of narrow frames as one bar each, and
// shows names holding markup as text. Skips when node, tests/js/node_modules,
// Chromium or python3 is missing, except under CI=true (scripts/setup.sh
// installs them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "test_support.h"

namespace cumemtrace::testing {
namespace {

const std::string kGolden = CUMEMTRACE_GOLDEN_DIR;

std::string on_path(const std::vector<std::string>& names) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    for (const std::string& name : names) {
      if (const std::string candidate = dir + "/" + name; ::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

// CUMEMTRACE_CHROMIUM, the one CMake found, or chromium on PATH; "" if none.
std::string chromium() {
  if (const char* env = std::getenv("CUMEMTRACE_CHROMIUM"); env != nullptr && *env != '\0') return env;
  if (std::string configured = CUMEMTRACE_CHROMIUM_PATH; !configured.empty() && ::access(configured.c_str(), X_OK) == 0) {
    return configured;
  }
  return on_path({"chromium", "chromium-browser"});
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// Empty when all is there, else what is missing.
std::string missing_tools(std::string& node, std::string& python) {
  node = on_path({"node", "nodejs"});
  if (node.empty()) return "node is not installed";
  python = on_path({"python3"});
  if (python.empty()) return "python3 is not installed";
  if (!file_exists(std::string(CUMEMTRACE_JS_DIR) + "/node_modules/playwright-core/package.json")) {
    return "tests/js/node_modules has no playwright-core (npm ci in tests/js)";
  }
  if (chromium().empty()) return "chromium is not installed";
  return "";
}

std::string html_report(const std::vector<std::string>& traces, const TempDir& tmp, const std::string& name) {
  std::vector<std::string> argv{CUMEMTRACE_CLI, "report"};
  argv.insert(argv.end(), traces.begin(), traces.end());
  argv.insert(argv.end(), {"--format", "html", "-o", tmp.path(name)});
  const CommandResult r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return tmp.path(name);
}

TEST(HtmlFlameGraphs, DrawHoverZoomMergeNarrowFramesAndShowMarkupAsTextInChromium) {
  std::string node, python;
  if (const std::string missing = missing_tools(node, python); !missing.empty()) {
    if (in_ci()) FAIL() << missing << " (CI=true: scripts/setup.sh installs it)";
    GTEST_SKIP() << missing << " (scripts/setup.sh installs it)";
  }
  TempDir tmp;
  const std::string python_page = html_report({kGolden + "/traces/python_frames.jsonl"}, tmp, "python.html");
  const std::string markup = html_report({kGolden + "/charts/traces/charts_markup_names.jsonl"}, tmp, "markup.html");
  const std::string ranks =
      html_report({kGolden + "/traces/job.rank0.jsonl", kGolden + "/traces/job.rank1.jsonl"}, tmp, "ranks.html");
  const CommandResult made = run_command({python, CUMEMTRACE_DEEP_STACKS_TOOL, tmp.path("deep.jsonl"), "--stacks",
                                          "1000", "--depth", "16"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string deep = html_report({tmp.path("deep.jsonl")}, tmp, "deep.html");
  for (const std::string& page : {python_page, markup, ranks, deep}) ASSERT_TRUE(file_exists(page)) << page;
  const CommandResult r =
      run_command({"timeout", "60", node, std::string(CUMEMTRACE_JS_DIR) + "/flame_check.mjs", "--python", python_page,
                   "--markup", markup, "--ranks", ranks, "--deep", deep},
                  {{"CUMEMTRACE_CHROMIUM", chromium()}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("flame graphs: all checks passed"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cumemtrace::testing
