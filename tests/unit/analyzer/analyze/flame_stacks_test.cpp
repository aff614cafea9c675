// Stacks weighted by bytes (flame.h): the three questions on a hand-made
// trace whose figures are worked out below, frame names, pruning, speed on
// 10,000 stacks of 60 frames, and `export --format folded` against the
// report's own figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer_test_support.h"
#include "event_feeder.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/flame.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer {
namespace {

// The trace of every test below (stacks innermost first):
//   stack 1: alloc_a <- helper <- main
//   stack 2: alloc_b <- helper <- main
//   stack 3: alloc_c <- main
//   stack 0 (none) and stack 9 (used, never defined): "[no stack]"
//
//   t1 +100 s1   t2 +200 s2   t3 +50 s0   t4 -200 (s2)
//   t5 +300 s3 -> 450, the peak: s3 300, s1 100, s0 50
//   t6 -300 (s3)  t7 +40 s9   t8 +60 s1
//   live at the end: s1 160 (2), s0 50, s9 40 = 250
//   allocated: s1 160 (2), s2 200, s0 50, s3 300, s9 40 = 750
void feed_small_trace(Analysis& analysis) {
  testing::EventFeeder feed(analysis);
  feed.stack(1, {"alloc_a", "helper", "main"});
  feed.stack(2, {"alloc_b", "helper", "main"});
  feed.stack(3, {"alloc_c", "main"});
  feed.alloc(1, 0x100, 100, 1);
  feed.alloc(2, 0x200, 200, 2);
  feed.alloc(3, 0x300, 50, 0);
  feed.free(4, 0x200);
  feed.alloc(5, 0x400, 300, 3);
  feed.free(6, 0x400);
  feed.alloc(7, 0x500, 40, 9);
  feed.alloc(8, 0x600, 60, 1);
}

using Figures = std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>>;  // stack -> bytes, count

Figures figures(const std::vector<WeightedStack>& stacks) {
  Figures out;
  for (const WeightedStack& s : stacks) out[s.stack] = {s.bytes, s.count};
  return out;
}

// "main;helper;alloc_a" -> bytes and count of that node.
std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> paths(const FlameTree& tree) {
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> out;
  std::vector<std::string> path(tree.nodes.size());
  for (std::size_t i = 1; i < tree.nodes.size(); ++i) {
    const FlameTree::Node& n = tree.nodes[i];
    const std::string& name = tree.names[n.name];
    path[i] = n.parent == 0 ? name : path[n.parent] + ";" + name;
    out[path[i]] = {n.bytes, n.count};
  }
  return out;
}

// Parents before children, the root its own parent named "all", inclusive
// figures that add up, and each subtree a contiguous run (depth first).
void expect_well_formed(const FlameTree& tree) {
  ASSERT_FALSE(tree.nodes.empty());
  EXPECT_EQ(tree.names[tree.nodes[0].name], "all");
  EXPECT_EQ(tree.nodes[0].parent, 0u);
  EXPECT_EQ(tree.total_bytes, tree.nodes[0].bytes);
  std::vector<std::uint64_t> children_bytes(tree.nodes.size(), 0);
  for (std::size_t i = 1; i < tree.nodes.size(); ++i) {
    ASSERT_LT(tree.nodes[i].parent, i);
    ASSERT_LT(tree.nodes[i].name, tree.names.size());
    children_bytes[tree.nodes[i].parent] += tree.nodes[i].bytes;
    // Depth first: the parent is the previous node or one of its ancestors.
    std::size_t up = i - 1;
    while (up != 0 && up != tree.nodes[i].parent) up = tree.nodes[up].parent;
    EXPECT_EQ(up, tree.nodes[i].parent) << "node " << i << " does not follow its parent's subtree";
  }
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) EXPECT_GE(tree.nodes[i].bytes, children_bytes[i]);
}

TEST(FlameStacks, WhatNamesRoundTrip) {
  for (FlameWhat what : {FlameWhat::peak, FlameWhat::leaks, FlameWhat::allocated}) {
    EXPECT_EQ(parse_flame_what(flame_what_name(what)), what);
  }
  EXPECT_EQ(flame_what_name(FlameWhat::leaks), "leaks");
  EXPECT_FALSE(parse_flame_what("live"));
  EXPECT_FALSE(parse_flame_what(""));
}

TEST(FlameStacks, PeakLeaksAndAllocatedWeighTheRightBytes) {
  Analysis analysis;
  feed_small_trace(analysis);
  EXPECT_EQ(figures(weighted_stacks(analysis, FlameWhat::peak)),
            (Figures{{3, {300, 1}}, {1, {100, 1}}, {0, {50, 1}}}));
  EXPECT_EQ(figures(weighted_stacks(analysis, FlameWhat::leaks)),
            (Figures{{1, {160, 2}}, {0, {50, 1}}, {9, {40, 1}}}));
  EXPECT_EQ(figures(weighted_stacks(analysis, FlameWhat::allocated)),
            (Figures{{1, {160, 2}}, {2, {200, 1}}, {0, {50, 1}}, {3, {300, 1}}, {9, {40, 1}}}));
  // Most bytes first.
  const std::vector<WeightedStack> allocated = weighted_stacks(analysis, FlameWhat::allocated);
  ASSERT_EQ(allocated.size(), 5u);
  EXPECT_EQ(allocated[0].stack, 3u);
  EXPECT_EQ(allocated[1].stack, 2u);
  EXPECT_EQ(allocated[4].stack, 9u);
}

TEST(FlameStacks, TreesMergeFramesFromTheOutermostAndTotalTheReportsFigures) {
  Analysis analysis;
  feed_small_trace(analysis);

  const FlameTree peak = build_flame_tree(analysis, FlameWhat::peak);
  expect_well_formed(peak);
  EXPECT_EQ(peak.total_bytes, analysis.total().allocated.peak);
  EXPECT_EQ(peak.total_bytes, 450u);
  EXPECT_EQ(peak.stacks, 3u);
  EXPECT_EQ(peak.pruned_nodes, 0u);
  EXPECT_EQ(paths(peak), (std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>{
                             {"main", {400, 2}},
                             {"main;alloc_c", {300, 1}},
                             {"main;helper", {100, 1}},
                             {"main;helper;alloc_a", {100, 1}},
                             {"[no stack]", {50, 1}}}));

  const FlameTree leaks = build_flame_tree(analysis, FlameWhat::leaks);
  expect_well_formed(leaks);
  EXPECT_EQ(leaks.total_bytes, analysis.total().allocated.current);
  EXPECT_EQ(leaks.nodes[0].count, analysis.total().live_allocations);
  // Stack 0 and stack 9 (never defined) are one "[no stack]" frame.
  EXPECT_EQ(paths(leaks), (std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>{
                              {"main", {160, 2}},
                              {"main;helper", {160, 2}},
                              {"main;helper;alloc_a", {160, 2}},
                              {"[no stack]", {90, 2}}}));

  const FlameTree allocated = build_flame_tree(analysis, FlameWhat::allocated);
  expect_well_formed(allocated);
  EXPECT_EQ(allocated.total_bytes, 750u);
  EXPECT_EQ(allocated.nodes[0].count, analysis.total().allocs);
  EXPECT_EQ(paths(allocated), (std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>{
                                  {"main", {660, 4}},
                                  {"main;helper", {360, 3}},
                                  {"main;helper;alloc_b", {200, 1}},
                                  {"main;helper;alloc_a", {160, 2}},
                                  {"main;alloc_c", {300, 1}},
                                  {"[no stack]", {90, 2}}}));
  // Children by bytes, most first: helper (360) before alloc_c (300).
  ASSERT_GE(allocated.nodes.size(), 3u);
  EXPECT_EQ(allocated.names[allocated.nodes[1].name], "main");
  EXPECT_EQ(allocated.names[allocated.nodes[2].name], "helper");
  EXPECT_EQ(allocated.nodes[1].kind, FlameFrameKind::native);
}

TEST(FlameStacks, NarrowFramesMergeIntoOneChildPerParent) {
  Analysis analysis;
  feed_small_trace(analysis);
  // 750 in all; 25% is 187.5: [no stack] (90) and alloc_a (160) go.
  const FlameTree quarter = build_flame_tree(analysis, FlameWhat::allocated, 0.25);
  expect_well_formed(quarter);
  EXPECT_EQ(quarter.total_bytes, 750u);
  EXPECT_EQ(quarter.pruned_nodes, 2u);
  EXPECT_EQ(paths(quarter), (std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>{
                                {"main", {660, 4}},
                                {"main;helper", {360, 3}},
                                {"main;helper;alloc_b", {200, 1}},
                                {"main;helper;(1 narrower frame)", {160, 2}},
                                {"main;alloc_c", {300, 1}},
                                {"(1 narrower frame)", {90, 2}}}));
  // The merged node comes last among its siblings.
  EXPECT_EQ(quarter.names[quarter.nodes.back().name], "(1 narrower frame)");
  EXPECT_EQ(quarter.nodes.back().parent, 0u);
  EXPECT_EQ(quarter.nodes.back().kind, FlameFrameKind::unknown);

  // 50% (375): helper (360, with its 2 children) and alloc_c (300) merge
  // under main; their names are no longer in the tree.
  const FlameTree half = build_flame_tree(analysis, FlameWhat::allocated, 0.5);
  expect_well_formed(half);
  EXPECT_EQ(half.pruned_nodes, 5u);
  EXPECT_EQ(paths(half), (std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>{
                             {"main", {660, 4}},
                             {"main;(2 narrower frames)", {660, 4}},
                             {"(1 narrower frame)", {90, 2}}}));
  for (const std::string& name : half.names) EXPECT_NE(name, "helper");
}

// Frames as a trace's reader hands them over, with strings kept alive.
class StackBuilder {
 public:
  StackBuilder& native(std::string fn, std::string module, std::uint64_t off) {
    StackFrame f;
    f.ip = 0x7f0000000000 + off;
    f.fn = keep(std::move(fn));
    f.has_fn = !f.fn.empty();
    f.module = keep(std::move(module));
    f.off = off;
    frames_.push_back(f);
    return *this;
  }
  StackBuilder& python(std::string fn, std::string file, std::optional<std::uint64_t> line) {
    StackFrame f;
    f.py = true;
    f.fn = keep(std::move(fn));
    f.has_fn = true;
    f.file = keep(std::move(file));
    f.line = line;
    frames_.push_back(f);
    return *this;
  }
  void add_to(Analysis& analysis, std::uint64_t id) {
    TraceEvent e;
    e.ev = format::Event::stack;
    e.id = id;
    e.frames = frames_;
    analysis.consume(e);
  }

 private:
  std::string_view keep(std::string s) { return strings_.emplace_back(std::move(s)); }
  std::deque<std::string> strings_;
  std::vector<StackFrame> frames_;
};

TEST(FlameStacks, FramesAreNamedAsTheReportNamesThem) {
  OwnedFrame py;
  py.py = true;
  py.fn = "Trainer.train_step";
  py.file = "/work/train.py";
  py.line = 42;
  EXPECT_EQ(flame_frame_name(py), "Trainer.train_step (train.py:42)");
  py.line.reset();
  EXPECT_EQ(flame_frame_name(py), "Trainer.train_step (train.py)");
  py.fn.reset();
  EXPECT_EQ(flame_frame_name(py), "?? (train.py)");

  OwnedFrame native;
  native.ip = 0x7f00001234;
  native.fn = "load_weights(Model&)";
  native.module = "/opt/app/bin/train";
  native.off = 0x1234;
  EXPECT_EQ(flame_frame_name(native), "load_weights(Model&)");
  // Over 100 characters: as readable_function_name shortens it.
  native.fn = "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, "
              "c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)";
  EXPECT_EQ(flame_frame_name(native), "at::detail::_empty_generic<\xE2\x80\xA6>");
  native.fn.reset();
  EXPECT_EQ(flame_frame_name(native), "train+0x1234");
  native.off.reset();
  EXPECT_EQ(flame_frame_name(native), "train+0x7f00001234");
  native.module.clear();
  EXPECT_EQ(flame_frame_name(native), "0x7f00001234");

  // The folded format's separators never appear in a name.
  OwnedFrame odd;
  odd.fn = "f;g\nh\r";
  odd.module = "/a;b/lib.so";
  EXPECT_EQ(flame_frame_name(odd), "f,g h ");
  odd.fn.reset();
  odd.off = 16;
  EXPECT_EQ(flame_frame_name(odd), "lib.so+0x10");
}

TEST(FlameStacks, KindsSayWhoseCodeAFrameIs) {
  Analysis analysis;
  StackBuilder()
      .native("c10::cuda::CUDACachingAllocator::malloc(int)", "/venv/torch/lib/libc10_cuda.so", 0x10)
      .native("device_alloc", "/work/ext/_ops.so", 0x20)
      .python("Model.forward", "/work/model.py", 7)
      .native("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.12.so.1.0", 0x30)
      .add_to(analysis, 4);
  testing::EventFeeder feed(analysis);
  feed.alloc(1, 0x100, 64, 4);
  const FlameTree tree = build_flame_tree(analysis, FlameWhat::leaks);
  expect_well_formed(tree);
  std::map<std::string, FlameFrameKind> kinds;
  for (std::size_t i = 1; i < tree.nodes.size(); ++i) kinds[tree.names[tree.nodes[i].name]] = tree.nodes[i].kind;
  EXPECT_EQ(kinds, (std::map<std::string, FlameFrameKind>{
                       {"_PyEval_EvalFrameDefault", FlameFrameKind::framework},
                       {"Model.forward (model.py:7)", FlameFrameKind::python},
                       {"device_alloc", FlameFrameKind::native},
                       {"c10::cuda::CUDACachingAllocator::malloc(int)", FlameFrameKind::framework}}));
  // Outermost first: the interpreter, then Python, then native code.
  EXPECT_EQ(tree.names[tree.nodes[1].name], "_PyEval_EvalFrameDefault");
  EXPECT_EQ(tree.nodes[0].kind, FlameFrameKind::unknown);
}

// 10,000 distinct stacks of 60 frames, sharing their outer frames as real
// programs do: a quadratic merge would take many minutes, this takes half a
// second a tree on a busy 2-core machine (the bound leaves room for the
// sanitizer builds, several times slower).
TEST(FlameStacks, TenThousandStacksOfSixtyFramesBuildFast) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  constexpr int kStacks = 10000, kFrames = 60;
  for (int s = 1; s <= kStacks; ++s) {
    std::vector<std::string> functions;  // outermost first here
    for (int depth = 0; depth < kFrames; ++depth) {
      // Outer frames are shared by many stacks (fewer the deeper): the
      // stacks part early and every path is distinct, the worst case for
      // the tree's size. Names come from a program's few thousand functions.
      const int function = depth < 40 ? depth * 100 + s % (depth + 2) : 5000 + (s + depth) % 997;
      functions.push_back("at::native::kernel_" + std::to_string(function) +
                          "<float, int>(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, "
                          "std::optional<c10::MemoryFormat>)");
    }
    std::reverse(functions.begin(), functions.end());  // innermost first
    feed.stack(static_cast<std::uint64_t>(s), std::move(functions));
    feed.alloc(static_cast<std::uint64_t>(s), 0x1000 * static_cast<std::uint64_t>(s), static_cast<std::uint64_t>(s),
               static_cast<std::uint64_t>(s));
  }
  const auto start = std::chrono::steady_clock::now();
  const FlameTree tree = build_flame_tree(analysis, FlameWhat::leaks);
  const FlameTree pruned = build_flame_tree(analysis, FlameWhat::leaks, 0.001);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0);
  std::cout << "two trees of 10000 stacks x 60 frames: " << seconds << " s, " << tree.nodes.size() << " nodes, "
            << pruned.nodes.size() << " after pruning at 0.1%\n";
  EXPECT_EQ(tree.stacks, static_cast<std::uint64_t>(kStacks));
  EXPECT_EQ(tree.total_bytes, analysis.total().allocated.current);
  EXPECT_EQ(pruned.total_bytes, tree.total_bytes);
  // Every frame is either kept or counted as pruned; merged nodes are new.
  std::size_t merged = 0;
  for (const FlameTree::Node& n : pruned.nodes) merged += pruned.names[n.name].starts_with("(") ? 1 : 0;
  EXPECT_GT(merged, 0u);
  EXPECT_EQ(pruned.nodes.size() - merged + pruned.pruned_nodes, tree.nodes.size());
  EXPECT_LT(pruned.nodes.size(), tree.nodes.size() / 10);
  expect_well_formed(pruned);
}

// ---- `cumemtrace export --format folded` on the golden traces -------------

std::uint64_t folded_total(const std::string& text, std::size_t* lines = nullptr) {
  std::istringstream in(text);
  std::string line;
  std::uint64_t total = 0;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    const std::size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    total += std::stoull(line.substr(space + 1));
    ++n;
  }
  if (lines != nullptr) *lines = n;
  return total;
}

TEST(FoldedExport, TotalsAreTheReportsPeakLeakedAndAllocatedBytes) {
  for (const char* trace : {"python_frames.jsonl", "normal_leak.jsonl", "training_loop.jsonl", "two_devices.jsonl"}) {
    SCOPED_TRACE(trace);
    const std::string path = std::string(CUMEMTRACE_GOLDEN_TRACES) + "/" + trace;
    const testing::CommandResult report = testing::run_command({testing::cli_path(), "report", path, "--format", "json"});
    ASSERT_EQ(report.exit_code, 0) << report.err;
    const nlohmann::json total = nlohmann::json::parse(report.out);
    for (const auto& [what, key] : {std::pair{"peak", "peak_allocated"}, std::pair{"leaks", "leaked_bytes"}}) {
      const testing::CommandResult folded =
          testing::run_command({testing::cli_path(), "export", path, "--format", "folded", "--what", what});
      ASSERT_EQ(folded.exit_code, 0) << folded.err;
      EXPECT_EQ(folded_total(folded.out), total.at(key).get<std::uint64_t>()) << what;
    }
    // The default is peak.
    const testing::CommandResult plain = testing::run_command({testing::cli_path(), "export", path, "--format", "folded"});
    EXPECT_EQ(folded_total(plain.out), total.at("peak_allocated").get<std::uint64_t>());

    // allocated: the sum of the trace's alloc sizes, read here with a JSON parser.
    std::uint64_t allocated = 0;
    std::istringstream lines(testing::read_file(path));
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
      if (!e.is_discarded() && e.is_object() && e.value("ev", "") == "alloc" && e.contains("size") &&
          e["size"].is_number_unsigned()) {
        allocated += e["size"].get<std::uint64_t>();
      }
    }
    const testing::CommandResult all =
        testing::run_command({testing::cli_path(), "export", path, "--format", "folded", "--what", "allocated"});
    ASSERT_EQ(all.exit_code, 0) << all.err;
    EXPECT_EQ(folded_total(all.out), allocated);
  }
}

// A stack that ends where another goes on weighs its own bytes only, and
// stacks that name the same frames (another offset in one function; no
// frames at all) are one line.
TEST(FoldedExport, LinesAreTheBytesOfStacksThatEndThere) {
  const auto frame = [](const char* fn, const char* off) {
    return std::string(R"({"ip":"0x7f00000)") + off + R"(","fn":")" + fn + R"(","module":"/bin/app","off":"0x)" + off +
           R"("})";
  };
  testing::TempDir tmp;
  testing::write_file(
      tmp.path("t.jsonl"),
      testing::join_lines({testing::header_line(),
                           R"({"ev":"stack","id":1,"frames":[)" + frame("inner", "10") + "," + frame("outer", "20") + "]}",
                           R"({"ev":"stack","id":2,"frames":[)" + frame("outer", "24") + "]}",
                           R"({"ev":"stack","id":3,"frames":[)" + frame("inner", "99") + "," + frame("outer", "20") + "]}",
                           testing::alloc_line(1, "0x1000", 100, 0, 1), testing::alloc_line(2, "0x2000", 30, 0, 2),
                           testing::alloc_line(3, "0x3000", 5, 0, 3), testing::alloc_line(4, "0x4000", 7, 0, 0),
                           testing::alloc_line(5, "0x5000", 11, 0, 42), testing::end_line(6)}));
  for (const auto& [what, expected] : {std::pair{FlameWhat::leaks, "outer;inner 105\nouter 30\n[no stack] 18\n"},
                                       std::pair{FlameWhat::peak, "outer;inner 105\nouter 30\n[no stack] 18\n"}}) {
    TraceReader reader(tmp.path("t.jsonl"));
    std::ostringstream out;
    const ExportSummary summary = export_folded(reader, out, what);
    EXPECT_EQ(out.str(), expected);
    EXPECT_EQ(summary.records, 3u);
  }
}

TEST(FoldedExport, WhatWithAnotherFormatIsAUsageError) {
  const std::string path = std::string(CUMEMTRACE_GOLDEN_TRACES) + "/normal_leak.jsonl";
  const testing::CommandResult csv =
      testing::run_command({testing::cli_path(), "export", path, "--format", "csv", "--what", "leaks"});
  EXPECT_EQ(csv.exit_code, 2);
  EXPECT_EQ(csv.out, "");
  EXPECT_NE(csv.err.find("--what applies to --format folded only"), std::string::npos) << csv.err;
  const testing::CommandResult bad =
      testing::run_command({testing::cli_path(), "export", path, "--format", "folded", "--what", "live"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(bad.out, "");
}

}  // namespace
}  // namespace cumemtrace::analyzer
