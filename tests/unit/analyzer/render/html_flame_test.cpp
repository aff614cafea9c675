// The HTML report's flame graphs section from hand-built trees: the data
// block holds each view's nodes with one table of names, nothing in a name
// can end the block, empty and missing views say so in words, and the
// page's script is the embedded file with a well-formed CSP source. The
// script in a browser: tests/js/flame_check.mjs (ctest clients.*).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/flame.h"
#include "analyzer_test_support.h"
#include "render/html_flame.h"

namespace cumemtrace::analyzer {
namespace {

using Node = FlameTree::Node;
using detail::render_flame_section;

using testing::contains;

// all -> main -> {load (python), step (python) -> kernel (native)}, the
// bytes of each node inclusive.
FlameTree peak_tree() {
  FlameTree t;
  t.what = FlameWhat::peak;
  t.names = {"all", "main", "load (model.py:3)", "step (train.py:9)", "kernel"};
  t.nodes = {Node{0, 0, 300, 3, FlameFrameKind::unknown}, Node{1, 0, 300, 3, FlameFrameKind::framework},
             Node{2, 1, 200, 1, FlameFrameKind::python}, Node{3, 1, 100, 2, FlameFrameKind::python},
             Node{4, 3, 100, 2, FlameFrameKind::native}};
  t.total_bytes = 300;
  t.stacks = 2;
  return t;
}

FlameTree tree_of(FlameWhat what, std::vector<std::string> names, std::vector<Node> nodes) {
  FlameTree t;
  t.what = what;
  t.names = std::move(names);
  t.nodes = std::move(nodes);
  t.total_bytes = t.nodes.empty() ? 0 : t.nodes[0].bytes;
  t.stacks = 1;
  return t;
}

FlameTree empty_tree(FlameWhat what) { return tree_of(what, {"all"}, {Node{0, 0, 0, 0, FlameFrameKind::unknown}}); }

// The text of the section's data block, as the script reads it.
std::string data_block(const std::string& section) {
  const std::string open = "<script type=\"application/json\" class=\"flamedata\">";
  const std::size_t start = section.find(open);
  if (start == std::string::npos) return "";
  const std::size_t end = section.find("</script>", start);
  return section.substr(start + open.size(), end - start - open.size());
}

// The block of one view: from its heading to the next view's.
std::string view_block(const std::string& section, std::string_view heading) {
  const std::size_t start = section.find(std::string("<h3>") + std::string(heading) + "</h3>");
  if (start == std::string::npos) return "";
  const std::size_t end = section.find("<div class=\"flameview\">", start);
  return section.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

TEST(HtmlFlame, DataHoldsEveryViewsNodesWithOneTableOfNames) {
  FlameTree leaks = tree_of(FlameWhat::leaks, {"all", "main", "step (train.py:9)"},
                            {Node{0, 0, 100, 2, FlameFrameKind::unknown}, Node{1, 0, 100, 2, FlameFrameKind::framework},
                             Node{2, 1, 100, 2, FlameFrameKind::python}});
  FlameTree allocated = peak_tree();
  allocated.what = FlameWhat::allocated;
  allocated.nodes[0].bytes = allocated.total_bytes = 900;
  std::string section;
  render_flame_section(section, {allocated, peak_tree(), leaks});  // any order: each view by its `what`
  const nlohmann::json data = nlohmann::json::parse(data_block(section));
  EXPECT_EQ(data["names"], nlohmann::json({"all", "main", "load (model.py:3)", "step (train.py:9)", "kernel"}));
  ASSERT_EQ(data["views"].size(), 3u);
  const nlohmann::json& peak = data["views"][0];
  EXPECT_EQ(peak["what"], "peak");
  EXPECT_EQ(peak["total"], 300);
  // Depth first, each frame's depth; bytes and allocations 0 where they
  // equal the caller's.
  EXPECT_EQ(peak["n"], nlohmann::json({0, 1, 2, 3, 4}));
  EXPECT_EQ(peak["d"], nlohmann::json({0, 1, 2, 2, 3}));
  EXPECT_EQ(peak["b"], nlohmann::json({300, 0, 200, 100, 0}));
  EXPECT_EQ(peak["c"], nlohmann::json({3, 0, 1, 2, 0}));
  EXPECT_EQ(peak["k"], "ufppn");
  EXPECT_EQ(peak["label"], "what was live at the peak");
  // The leaks' own name indices map into the shared table.
  EXPECT_EQ(data["views"][1]["what"], "leaks");
  EXPECT_EQ(data["views"][1]["n"], nlohmann::json({0, 1, 3}));
  EXPECT_EQ(data["views"][1]["b"], nlohmann::json({100, 0, 0}));
  EXPECT_EQ(data["views"][1]["k"], "ufp");
  EXPECT_EQ(data["views"][2]["what"], "allocated");
  EXPECT_EQ(data["views"][2]["total"], 900);
  // One block per view in the order of the data, each with a box to draw in.
  EXPECT_LT(section.find("<h3>Live at the allocated peak</h3>"), section.find("<h3>Live at the end (leaks)</h3>"));
  EXPECT_LT(section.find("<h3>Live at the end (leaks)</h3>"), section.find("<h3>Everything allocated</h3>"));
  for (const char* heading : {"Live at the allocated peak", "Live at the end (leaks)", "Everything allocated"}) {
    EXPECT_TRUE(contains(view_block(section, heading), "<div class=\"flamegraph\"></div>")) << heading;
  }
  EXPECT_TRUE(contains(section, "<p>300 B live at the allocated peak (all devices together), from 2 call stacks.</p>"));
  EXPECT_TRUE(contains(section, "<p>100 B still live at the end, from 1 call stack.</p>"));
  // The legend's colours are the frames' (the style sheet's .fk-* rules).
  EXPECT_TRUE(contains(section, "<span class=\"swatch\" style=\"background:#7cc87a\"></span>Python"));
  EXPECT_TRUE(contains(std::string(detail::flame_style()), ".fk-python{fill:#7cc87a}"));
}

// Nodes in any order build_flame_tree may give (parents first): the data
// lists each caller's callees right after it, in the tree's order.
TEST(HtmlFlame, DataIsDepthFirstWhateverTheTreesOrder) {
  // all -> {a -> {c, d}, b -> e}, stored breadth first.
  FlameTree tree = tree_of(FlameWhat::peak, {"all", "a", "b", "c", "d", "e"},
                           {Node{0, 0, 100, 10, FlameFrameKind::unknown}, Node{1, 0, 60, 6, FlameFrameKind::python},
                            Node{2, 0, 40, 4, FlameFrameKind::native}, Node{3, 1, 50, 5, FlameFrameKind::python},
                            Node{4, 1, 10, 1, FlameFrameKind::framework}, Node{5, 2, 40, 4, FlameFrameKind::native}});
  const nlohmann::json view = nlohmann::json::parse(detail::flame_data_json({tree}))["views"][0];
  const nlohmann::json names = nlohmann::json::parse(detail::flame_data_json({tree}))["names"];
  std::vector<std::string> order;
  for (const auto& n : view["n"]) order.push_back(names[n.get<std::size_t>()]);
  EXPECT_EQ(order, (std::vector<std::string>{"all", "a", "c", "d", "b", "e"}));
  EXPECT_EQ(view["d"], nlohmann::json({0, 1, 2, 2, 1, 2}));
  EXPECT_EQ(view["b"], nlohmann::json({100, 60, 50, 10, 40, 0}));
  EXPECT_EQ(view["c"], nlohmann::json({10, 6, 5, 1, 4, 0}));
  EXPECT_EQ(view["k"], "uppfnn");
}

TEST(HtmlFlame, NamesWithMarkupOrBadBytesCannotLeaveTheDataBlock) {
  const std::vector<std::string> names = {"all", "</script><img src=x onerror=alert(1)>", "<!-- x", "a&b>c",
                                          "bad \xFF byte", "quote \" and \\ and \u2028"};
  std::vector<Node> nodes{Node{0, 0, 60, 5, FlameFrameKind::unknown}};
  for (std::uint32_t i = 1; i < names.size(); ++i) nodes.push_back(Node{i, 0, 12, 1, FlameFrameKind::native});
  std::string section;
  render_flame_section(section, {tree_of(FlameWhat::peak, names, nodes)});
  const std::string block = data_block(section);
  EXPECT_EQ(block.find('<'), std::string::npos) << block;
  EXPECT_EQ(block.find('>'), std::string::npos);
  EXPECT_EQ(block.find('&'), std::string::npos);
  EXPECT_TRUE(contains(block, "\\u003c/script\\u003e\\u003cimg src=x onerror=alert(1)\\u003e"));
  // The block ends at our </script>, not at one from a name; the names read back as they were.
  EXPECT_TRUE(contains(section, block + "</script><div class=\"flameview\">"));
  const nlohmann::json data = nlohmann::json::parse(block);
  EXPECT_EQ(data["names"][1], names[1]);
  EXPECT_EQ(data["names"][2], names[2]);
  EXPECT_EQ(data["names"][3], names[3]);
  EXPECT_EQ(data["names"][4], "bad \xEF\xBF\xBD byte");  // U+FFFD, as everywhere on the page
  EXPECT_EQ(data["names"][5], names[5]);
}

TEST(HtmlFlame, EmptyAndMissingViewsSayWhyInWords) {
  std::string section;
  render_flame_section(section, {peak_tree(), empty_tree(FlameWhat::leaks)});
  const std::string leaks = view_block(section, "Live at the end (leaks)");
  EXPECT_TRUE(contains(leaks, "<p>Nothing was live at the end: no leaks.</p>")) << leaks;
  EXPECT_FALSE(contains(leaks, "flamegraph"));
  const std::string allocated = view_block(section, "Everything allocated");
  EXPECT_TRUE(contains(allocated, "Not available in this page.")) << allocated;
  EXPECT_FALSE(contains(allocated, "flamegraph"));
  EXPECT_TRUE(nlohmann::json::parse(data_block(section))["views"][2].is_null());

  std::string nothing;
  render_flame_section(nothing, {empty_tree(FlameWhat::peak), empty_tree(FlameWhat::leaks),
                                 empty_tree(FlameWhat::allocated)});
  EXPECT_TRUE(contains(nothing, "Nothing was allocated, so there is no peak to show."));
  EXPECT_TRUE(contains(nothing, "<p>Nothing was allocated.</p>"));
  EXPECT_FALSE(contains(nothing, "flamegraph"));

  std::string none;
  render_flame_section(none, {});
  EXPECT_TRUE(contains(none, "so it has no flame graphs.</p></section>"));
  EXPECT_EQ(data_block(none), "");
}

TEST(HtmlFlame, PrunedFramesAreCounted) {
  FlameTree tree = peak_tree();
  tree.pruned_nodes = 1234;
  std::string section;
  render_flame_section(section, {tree});
  EXPECT_TRUE(contains(section, "1234 frames too narrow to see are merged into \xE2\x80\x9C(n narrower frames)"));
}

TEST(HtmlFlame, DataStaysCompactForManyFrames) {
  // 60 frames deep, 1000 wide: about 30 bytes a frame, names told once.
  std::vector<std::string> names{"all"};
  for (int i = 0; i < 60; ++i) names.push_back("frame_" + std::to_string(i) + " (module.py:" + std::to_string(i) + ")");
  std::vector<Node> nodes{Node{0, 0, 60000000, 60000, FlameFrameKind::unknown}};
  for (std::uint32_t w = 0; w < 1000; ++w) {
    std::uint32_t parent = 0;
    for (std::uint32_t d = 1; d <= 60; ++d) {
      nodes.push_back(Node{d, parent, 60000, 60, FlameFrameKind::python});
      parent = static_cast<std::uint32_t>(nodes.size() - 1);
    }
  }
  const std::string json = detail::flame_data_json({tree_of(FlameWhat::peak, names, nodes)});
  EXPECT_LT(json.size(), nodes.size() * 32) << json.size() << " bytes for " << nodes.size() << " frames";
  EXPECT_GT(json.size(), nodes.size() * 10);
}

TEST(HtmlFlame, TheScriptIsEmbeddedWithABase64Sha256Source) {
  const std::string_view script = detail::flame_script();
  EXPECT_GT(script.size(), 1000u);
  EXPECT_TRUE(script.starts_with("// The flame graphs of cumemtrace's HTML report"));
  EXPECT_TRUE(script.ends_with("})();\n"));
  EXPECT_EQ(script.find("</script"), std::string_view::npos);
  EXPECT_EQ(script.find("innerHTML"), std::string_view::npos);
  EXPECT_TRUE(std::regex_match(detail::flame_script_csp_source(), std::regex("'sha256-[A-Za-z0-9+/]{43}='")))
      << detail::flame_script_csp_source();
}

}  // namespace
}  // namespace cumemtrace::analyzer
