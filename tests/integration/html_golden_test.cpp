// Golden tests of the HTML report's structure: the page of each checked-in
// trace, reduced to its outline (elements, their text, SVG element counts
// and labels; no coordinates), compared with golden/charts/expected/. Set
// CUMEMTRACE_UPDATE_GOLDEN=1 to rewrite the expected outlines after a
// deliberate change, then read the diff (golden/charts/regenerate.sh).
#include <gtest/gtest.h>

#include <cstdlib>

#include "html_structure.h"
#include "test_support.h"

namespace cumemtrace::testing {
namespace {

class HtmlGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HtmlGolden, OutlineMatches) {
  const std::string dir = std::string(CUMEMTRACE_GOLDEN_DIR) + "/charts/";
  const std::string expected_path = dir + "expected/" + GetParam() + ".html.outline";
  TempDir tmp;
  // Run where the trace is, so the page names it by its relative path.
  const CommandResult r = run_command(
      {CUMEMTRACE_CLI, "report", GetParam() + ".jsonl", "--format", "html", "-o", tmp.path("page.html")}, {},
      dir + "traces");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string outline = html_outline(read_file(tmp.path("page.html")));
  if (const char* update = std::getenv("CUMEMTRACE_UPDATE_GOLDEN"); update != nullptr && std::string(update) == "1") {
    write_file(expected_path, outline);
    GTEST_SKIP() << "rewrote " << expected_path;
  }
  ASSERT_TRUE(file_exists(expected_path)) << expected_path;
  const std::string expected = read_file(expected_path);
  if (outline != expected) {
    const std::string actual_path = std::string(CUMEMTRACE_GOLDEN_ACTUAL_DIR) + "/" + GetParam() + ".html.outline";
    write_file(actual_path, outline);
    FAIL() << "the page's outline differs from " << expected_path << "\nsee: diff -u " << expected_path << " "
           << actual_path;
  }
}

INSTANTIATE_TEST_SUITE_P(Charts, HtmlGolden, ::testing::Values("charts_caching_oom", "charts_markup_names"));

}  // namespace
}  // namespace cumemtrace::testing
