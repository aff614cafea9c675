// Golden tests of the HTML report's structure: the page of each checked-in
// trace, reduced to its outline (elements, their text, SVG element counts
// and labels; no coordinates), compared with golden/charts/expected/. Set
// CUMEMTRACE_UPDATE_GOLDEN=1 to rewrite the expected outlines after a
// deliberate change, then read the diff (golden/charts/regenerate.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "html_structure.h"
#include "test_support.h"

namespace cumemtrace::testing {
namespace {

// The page of `traces` (run in `dir`, so the page names them by their
// relative paths) against expected/<name>.html.outline.
void expect_outline(const std::string& name, const std::string& dir, const std::vector<std::string>& traces) {
  const std::string expected_path = std::string(CUMEMTRACE_GOLDEN_DIR) + "/charts/expected/" + name + ".html.outline";
  TempDir tmp;
  std::vector<std::string> argv{CUMEMTRACE_CLI, "report"};
  argv.insert(argv.end(), traces.begin(), traces.end());
  argv.insert(argv.end(), {"--format", "html", "-o", tmp.path("page.html")});
  const CommandResult r = run_command(argv, {}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string outline = html_outline(read_file(tmp.path("page.html")));
  if (const char* update = std::getenv("CUMEMTRACE_UPDATE_GOLDEN"); update != nullptr && std::string(update) == "1") {
    write_file(expected_path, outline);
    GTEST_SKIP() << "rewrote " << expected_path;
  }
  ASSERT_TRUE(file_exists(expected_path)) << expected_path;
  const std::string expected = read_file(expected_path);
  if (outline != expected) {
    const std::string actual_path = std::string(CUMEMTRACE_GOLDEN_ACTUAL_DIR) + "/" + name + ".html.outline";
    write_file(actual_path, outline);
    FAIL() << "the page's outline differs from " << expected_path << "\nsee: diff -u " << expected_path << " "
           << actual_path;
  }
}

class HtmlGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HtmlGolden, OutlineMatches) {
  expect_outline(GetParam(), std::string(CUMEMTRACE_GOLDEN_DIR) + "/charts/traces", {GetParam() + ".jsonl"});
}

// Several traces: the process table, the chart of every process, each report.
TEST(HtmlGoldenSeveral, TwoRanksOutlineMatches) {
  expect_outline("two_ranks", std::string(CUMEMTRACE_GOLDEN_DIR) + "/traces", {"job.rank0.jsonl", "job.rank1.jsonl"});
}

// Python frames: the program's frames shown, each run of PyTorch, CPython,
// libffi and libc frames folded into a <details> of its own.
TEST(HtmlGoldenPython, PythonFramesOutlineMatches) {
  expect_outline("python_frames", std::string(CUMEMTRACE_GOLDEN_DIR) + "/traces", {"python_frames.jsonl"});
}

// CUDA graph memory (issue 31): its own series in the memory chart, counted
// in reserved, and the Graphs section (each graph's memory, capture site,
// launches).
TEST(HtmlGoldenGraphs, GraphMemoryOutlineMatches) {
  expect_outline("graph_memory", std::string(CUMEMTRACE_GOLDEN_DIR) + "/traces", {"graph_memory.jsonl"});
}

INSTANTIATE_TEST_SUITE_P(Charts, HtmlGolden, ::testing::Values("charts_caching_oom", "charts_markup_names"));

}  // namespace
}  // namespace cumemtrace::testing
