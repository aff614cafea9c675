// Python frames (TRACE_FORMAT.md, "A Python frame") through every output:
// read and kept, JSON frames as the trace wrote them, the text report's
// folded stacks and --full-stacks, the HTML stack, check's globs, diff's
// labels, CSV and Perfetto (--symbolize: analyze/symbolizer_test.cpp).
#include <gtest/gtest.h>

#include <sstream>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/check.h"
#include "cumemtrace/analyzer/diff.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/report.h"
#include "render/html_page.h"

namespace cumemtrace::analyzer {
namespace {

using Json = nlohmann::ordered_json;
using testing::TempDir;

using testing::contains;

// Native → Python → native → Python, a Python line unknown, a run of
// libffi and CPython frames, a long template name.
const std::string kFrames =
    R"J([{"ip":"0x7f0000001000","fn":"device_alloc(unsigned long)","module":"/opt/ext/_ops.so","off":"0x1000"},)J"
    R"J({"ip":"0x7f0000002000","fn":"void ext::launch<ext::Kernel<float, 4> >(ext::Stream&, ext::Kernel<float, 4> const&, unsigned long, std::vector<long, std::allocator<long> > const&)","module":"/opt/ext/_ops.so","off":"0x2000"},)J"
    R"J({"ip":"0x7f0000003000","fn":"ffi_call","module":"/usr/lib/libffi.so.8","off":"0x3000"},)J"
    R"J({"ip":"0x7f0000004000","fn":"_PyObject_MakeTpCall","module":"/usr/lib/libpython3.12.so.1.0","off":"0x4000"},)J"
    R"J({"ip":"0x7f0000005000","fn":"_PyEval_EvalFrameDefault","module":"/usr/lib/libpython3.12.so.1.0","off":"0x5000"},)J"
    R"J({"py":true,"fn":"Trainer.train_step","file":"/work/train.py","line":42},)J"
    R"J({"ip":"0x7f0000006000","fn":"run_callback","module":"/opt/ext/_ops.so","off":"0x6000"},)J"
    R"J({"py":true,"fn":"<lambda>","file":"/work/hooks.py","line":null},)J"
    R"J({"py":true,"fn":"main","file":"/work/train.py","line":80}])J";

std::string write_trace(TempDir& tmp, const std::string& name = "py.jsonl") {
  const std::string path = tmp.path(name);
  testing::write_file(path, testing::join_lines({testing::header_line(),
                                                 R"J({"ev":"stack","id":3,"frames":)J" + kFrames + "}",
                                                 testing::alloc_line(1000, "0x100", 4096, 0, 3),
                                                 R"J({"ev":"oom","t":2000,"tid":1,"api":"cudaMalloc","dev":0,"size":1048576,"block":1048576,"allocated":4096,"reserved":4096,"cached_free":0,"largest_free":0,"device_free":0,"device_total":8192,"cause":"capacity","stack":3})J",
                                                 testing::end_line(3000)}));
  return path;
}

struct Read {
  std::string text;
  std::string text_full;
  Json json;
};

Read read(const std::string& path) {
  TraceReader reader(path);
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  ReportOptions full;
  full.full_stacks = true;
  return {render_text_report(reader, analysis), render_text_report(reader, analysis, full),
          render_json_report(reader, analysis)};
}

TEST(PythonFrames, TheReportsJsonFramesAreTheTracesFramesExactly) {
  TempDir tmp;
  const Read r = read(write_trace(tmp));
  EXPECT_EQ(r.json["bad_lines"], 0);
  ASSERT_EQ(r.json["leaks"].size(), 1u);
  EXPECT_EQ(r.json["leaks"][0]["frames"], Json::parse(kFrames)) << r.json["leaks"][0]["frames"].dump();
  EXPECT_EQ(r.json["leaks"][0]["functions"][5], "Trainer.train_step");
  EXPECT_EQ(r.json["leaks"][0]["label"], "device_alloc");
}

TEST(PythonFrames, TextShowsTheProgramsFramesAndFoldsTheFrameworks) {
  TempDir tmp;
  const Read r = read(write_trace(tmp));
  const std::string expected =
      "       #0 device_alloc(unsigned long) (/opt/ext/_ops.so+0x1000)\n"
      "       #1 ext::launch<\xE2\x80\xA6> (/opt/ext/_ops.so+0x2000)\n"
      "       \xE2\x80\xA6 3 frames in libffi, CPython\n"
      "       #5 Trainer.train_step at /work/train.py:42\n"
      "       #6 run_callback (/opt/ext/_ops.so+0x6000)\n"
      "       #7 <lambda> at /work/hooks.py\n"
      "       #8 main at /work/train.py:80\n";
  EXPECT_TRUE(contains(r.text, expected)) << r.text;
  // --full-stacks: every frame as recorded.
  EXPECT_TRUE(contains(r.text_full,
                       "       #1 void ext::launch<ext::Kernel<float, 4> >(ext::Stream&, ext::Kernel<float, 4> const&, "
                       "unsigned long, std::vector<long, std::allocator<long> > const&) (/opt/ext/_ops.so+0x2000)\n"
                       "       #2 ffi_call (/usr/lib/libffi.so.8+0x3000)\n"))
      << r.text_full;
  EXPECT_FALSE(contains(r.text_full, "frames in")) << r.text_full;
}

TEST(PythonFrames, TextLimitsTheProgramsFramesNotTheFoldedOnes) {
  TempDir tmp;
  const std::string path = tmp.path("deep.jsonl");
  // 2 native frames, then 30 framework frames, then 10 Python frames.
  std::string frames = R"J([{"ip":"0x1","fn":"alloc_here","module":"/bin/app","off":"0x1"})J";
  for (int i = 0; i < 30; ++i) frames += R"J(,{"ip":"0x2","fn":"_PyEval_EvalFrameDefault","module":"/lib/libpython3.12.so","off":"0x2"})J";
  for (int i = 0; i < 10; ++i) frames += R"J(,{"py":true,"fn":"f)J" + std::to_string(i) + R"J(","file":"/a.py","line":1})J";
  testing::write_file(path, testing::join_lines({testing::header_line(), R"J({"ev":"stack","id":1,"frames":)J" + frames + "]}",
                                                 testing::alloc_line(1, "0x1", 1, 0, 1), testing::end_line(2)}));
  const Read r = read(path);
  EXPECT_TRUE(contains(r.text, "       \xE2\x80\xA6 30 frames in CPython\n       #31 f0 at /a.py:1\n")) << r.text;
  EXPECT_TRUE(contains(r.text, "       #37 f6 at /a.py:1\n       ... 3 more frames\n")) << r.text;
}

TEST(PythonFrames, HtmlFoldsTheSameRunsIntoDetailsThatOpen) {
  std::string out;
  detail::render_stack(out, Json::parse(kFrames));
  EXPECT_TRUE(contains(out, "<li class=\"folded\"><details><summary>\xE2\x80\xA6 3 frames in libffi, CPython</summary>"))
      << out;
  EXPECT_TRUE(contains(out, "<code>Trainer.train_step</code> <span class=\"module\">/work/train.py:42</span>")) << out;
  EXPECT_TRUE(contains(out, "<code>&lt;lambda&gt;</code> <span class=\"module\">/work/hooks.py</span>")) << out;
  // The long name shortened; the folded frames as recorded.
  EXPECT_TRUE(contains(out, "<code>ext::launch&lt;\xE2\x80\xA6&gt;</code>")) << out;
  EXPECT_TRUE(contains(out, "<code>_PyObject_MakeTpCall</code>")) << out;
  std::string full;
  detail::render_stack(full, Json::parse(kFrames), true);
  EXPECT_FALSE(contains(full, "folded")) << full;
  EXPECT_TRUE(contains(full, "<code>void ext::launch&lt;ext::Kernel&lt;float, 4&gt; &gt;(")) << full;
}

TEST(PythonFrames, CheckGlobsMatchPythonNamesAndModuleGlobsTheirFiles) {
  TempDir tmp;
  Json leak = read(write_trace(tmp)).json["leaks"][0];
  // The only site: its label is its innermost frame, and the Python frames
  // are outer callers that a suppression does not reach.
  ASSERT_EQ(leak["label"], "device_alloc");
  EXPECT_TRUE(Suppressions::parse("device_alloc\n").suppresses(leak));
  EXPECT_FALSE(Suppressions::parse("Trainer.*\n").suppresses(leak));
  EXPECT_FALSE(Suppressions::parse("module:hooks.py\n").suppresses(leak));
  // A label that reaches them (other sites shared its first frames).
  leak["label"] = "device_alloc \xE2\x86\x90 Trainer.train_step (train.py:42) \xE2\x86\x90 <lambda> (hooks.py)";
  EXPECT_TRUE(Suppressions::parse("Trainer.*\n").suppresses(leak));
  EXPECT_TRUE(Suppressions::parse("module:hooks.py\n").suppresses(leak));
  EXPECT_TRUE(Suppressions::parse("module:/work/*.py\n").suppresses(leak));
  EXPECT_TRUE(Suppressions::parse("file:hooks.py\n").suppresses(leak));
  EXPECT_TRUE(Suppressions::parse("module:libffi.so.8\n").suppresses(leak)) << "a frame the label skips";
  EXPECT_FALSE(Suppressions::parse("module:other.py\n").suppresses(leak));
  EXPECT_FALSE(Suppressions::parse("Trainer.evaluate\n").suppresses(leak));
  EXPECT_FALSE(Suppressions::parse("main\n").suppresses(leak)) << "beyond the label";
  // A native frame's source file is not its module: native semantics stay.
  const Json native = Json::parse(R"({"frames":[{"ip":"0x1","fn":null,"module":"/bin/app","file":"/src/hooks.py"}]})");
  EXPECT_FALSE(Suppressions::parse("module:hooks.py\n").suppresses(native));
}

TEST(PythonFrames, DiffLabelsNamePythonFramesWithTheirFiles) {
  TempDir tmp;
  const Json base = read(write_trace(tmp)).json;
  Json next = base;
  next["leaks"][0]["bytes"] = 8192;
  // Two sites that part at a Python frame: the label shows the files.
  Json other = next["leaks"][0];
  other["frames"][5]["file"] = "/work/eval.py";
  other["frames"][5]["fn"] = "Trainer.evaluate";
  other["functions"][5] = "Trainer.evaluate";
  next["leaks"].push_back(other);
  const TraceDiff diff = diff_reports(base, next, "a", "b");
  ASSERT_EQ(diff.leaked_sites.size(), 2u);
  std::vector<std::string> labels = {diff.leaked_sites[0].label, diff.leaked_sites[1].label};
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels[0], "device_alloc \xE2\x86\x90 Trainer.evaluate (eval.py)");
  EXPECT_EQ(labels[1], "device_alloc \xE2\x86\x90 Trainer.train_step (train.py)");
}

TEST(PythonFrames, CsvAndPerfettoNameTheInnermostPythonLine) {
  TempDir tmp;
  const std::string path = write_trace(tmp);
  std::ostringstream csv;
  {
    TraceReader reader(path);
    export_events_csv(reader, csv);
  }
  std::istringstream lines(csv.str());
  std::string header, alloc;
  std::getline(lines, header);
  std::getline(lines, alloc);
  EXPECT_TRUE(header.ends_with(",inactive_split,python")) << header;
  EXPECT_TRUE(alloc.ends_with(",Trainer.train_step (/work/train.py:42)")) << alloc;
  EXPECT_TRUE(contains(alloc, ",device_alloc(unsigned long),")) << alloc;
  std::ostringstream perfetto;
  {
    TraceReader reader(path);
    export_perfetto(reader, perfetto);
  }
  EXPECT_TRUE(contains(perfetto.str(), R"J("function":"device_alloc(unsigned long)","python":"Trainer.train_step (/work/train.py:42)"})J"))
      << perfetto.str();
}

}  // namespace
}  // namespace cumemtrace::analyzer
