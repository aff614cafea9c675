// The text and JSON reports built from a read trace.
#include <gtest/gtest.h>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/report.h"

namespace cumemtrace::analyzer {
namespace {

using testing::TempDir;

struct Rendered {
  std::string text;
  nlohmann::ordered_json json;
};

Rendered render(const std::string& path) {
  TraceReader reader(path);
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  return {render_text_report(reader, analysis), render_json_report(reader, analysis)};
}

TEST(Report, JsonHasTheDocumentedKeysWithExactValues) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"),
                      testing::join_lines({testing::header_line(),
                                           R"J({"ev":"stack","id":3,"frames":[{"ip":"0x10","fn":"leaky()","module":"/bin/app","off":"0x10"}]})J",
                                           testing::alloc_line(1000, "0x100", 3000, 0, 3),
                                           testing::alloc_line(2000, "0x200", 1 << 20, 1, 0),
                                           testing::free_line(3000, "0x200", 1 << 20, 1),
                                           testing::end_line(4000)}));
  const nlohmann::ordered_json j = render(tmp.path("t.jsonl")).json;
  EXPECT_EQ(j["peak_allocated"], 3000 + (1 << 20));
  EXPECT_EQ(j["peak_allocated_t"], 2000);
  EXPECT_EQ(j["peak_reserved"], 0);
  EXPECT_TRUE(j["peak_reserved_t"].is_null());
  EXPECT_EQ(j["allocs"], 2);
  EXPECT_EQ(j["frees"], 1);
  EXPECT_EQ(j["leaked_bytes"], 3000);
  EXPECT_EQ(j["leaked_count"], 1);
  EXPECT_EQ(j["truncated"], false);
  EXPECT_EQ(j["bad_lines"], 0);
  EXPECT_EQ(j["devices"]["1"]["peak_allocated"], 1 << 20);
  EXPECT_EQ(j["devices"]["0"]["leaked_bytes"], 3000);
  ASSERT_EQ(j["leaks"].size(), 1u);
  EXPECT_EQ(j["leaks"][0]["stack"], 3);
  EXPECT_EQ(j["leaks"][0]["examples"][0]["ptr"], "0x100");
  EXPECT_EQ(j["leaks"][0]["frames"][0]["fn"], "leaky()");
  EXPECT_EQ(j["program"]["argv"][1], "train.py");
}

TEST(Report, TextShowsPeaksLeaksAndTruncation) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"),
                      testing::join_lines({testing::header_line(), testing::alloc_line(1500000, "0x100", 1572864),
                                           "not json"}));
  const std::string text = render(tmp.path("t.jsonl")).text;
  EXPECT_NE(text.find("peak allocated:  1.50 MiB (1572864 bytes) at 0.001500 s"), std::string::npos) << text;
  EXPECT_NE(text.find("program:   python3 train.py"), std::string::npos) << text;
  EXPECT_NE(text.find("pool mode: caching"), std::string::npos) << text;
  EXPECT_NE(text.find("1.50 MiB (1572864 bytes) in 1 allocation with no stack captured"), std::string::npos) << text;
  EXPECT_NE(text.find("Bad lines: 1 (skipped)\n  line 3: invalid JSON"), std::string::npos) << text;
  EXPECT_NE(text.find("TRUNCATED: the trace was cut short after line 3"), std::string::npos) << text;
}

// PyTorch never frees its caching allocator's segments: the summary says
// which of the memory live at the end they are, and how to leave them out.
TEST(Report, TextSaysWhichLiveMemoryPyTorchsCacheHoldsAtTheEnd) {
  TempDir tmp;
  const std::string torch_stack =
      R"J({"ev":"stack","id":5,"frames":[{"ip":"0x10","fn":"cudaMalloc","module":"/t/lib/libcudart-a1b2.so.13","off":"0x10"},)J"
      R"J({"ip":"0x20","fn":null,"module":"/t/lib/libc10_cuda.so","off":"0x20"}]})J";
  const std::string app_stack =
      R"J({"ev":"stack","id":6,"frames":[{"ip":"0x30","fn":"keep()","module":"/bin/app","off":"0x30"}]})J";
  testing::write_file(tmp.path("t.jsonl"),
                      testing::join_lines({testing::header_line(), torch_stack, app_stack,
                                           testing::alloc_line(10, "0x200000", 2 << 20, 0, 5),
                                           testing::alloc_line(20, "0x800000", 1 << 20, 0, 6),
                                           testing::end_line(30)}));
  std::string text = render(tmp.path("t.jsonl")).text;
  EXPECT_NE(text.find("  leaked at end:   3.00 MiB in 2 allocations still live, from 2 call stacks; the most "
                      "(2.00 MiB) from cudaMalloc\n                   2.00 MiB of it held by PyTorch's caching "
                      "allocator (libc10_cuda.so), which frees its segments only by exiting; check --suppressions "
                      "with 'module:libc10_cuda.so' leaves them out\n"),
            std::string::npos)
      << text;

  testing::write_file(tmp.path("all.jsonl"),
                      testing::join_lines({testing::header_line(), torch_stack,
                                           testing::alloc_line(10, "0x200000", 2 << 20, 0, 5),
                                           testing::end_line(30)}));
  text = render(tmp.path("all.jsonl")).text;
  EXPECT_NE(text.find("\n                   all held by PyTorch's caching allocator"), std::string::npos) << text;

  // Nothing of PyTorch's: no such line.
  testing::write_file(tmp.path("app.jsonl"),
                      testing::join_lines({testing::header_line(), app_stack,
                                           testing::alloc_line(20, "0x800000", 1 << 20, 0, 6),
                                           testing::end_line(30)}));
  EXPECT_EQ(render(tmp.path("app.jsonl")).text.find("PyTorch"), std::string::npos);
}

// A trace with marks, a stack, a pool sample, an OOM and an error event.
std::string rich_trace() {
  return testing::join_lines(
      {testing::header_line(),
       R"J({"ev":"stack","id":3,"frames":[{"ip":"0x10","fn":"grow()","module":"/bin/app","off":"0x10"},{"ip":"0x20","fn":null,"module":"/bin/app"}]})J",
       R"J({"ev":"segment_alloc","t":10,"dev":0,"ptr":"0x100000","size":4096,"api":"cuMemAlloc_v2"})J",
       R"J({"ev":"mark","t":20,"tid":7,"name":"step 1","kind":"push"})J", testing::alloc_line(30, "0x100000", 1000, 0, 3),
       R"J({"ev":"mark","t":40,"tid":7,"name":"step 1","kind":"pop"})J",
       R"J({"ev":"pool","t":50,"dev":0,"allocated":1000,"reserved":4096,"cached_free":3096,"largest_free":1024,"free_blocks":2,"inactive_split":0})J",
       R"J({"ev":"oom","t":60,"tid":7,"api":"cudaMalloc","dev":0,"size":3000,"block":3072,"allocated":1000,"reserved":4096,"cached_free":3096,"largest_free":1024,"device_free":0,"device_total":4096,"cause":"fragmentation","stack":3})J",
       R"J({"ev":"error","t":70,"tid":7,"api":"cudaFree","ptr":"0xdead","what":"double_free","stack":0})J",
       testing::end_line(80)});
}

TEST(Report, JsonHasTheKeysOfReportFormat) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), rich_trace());
  const nlohmann::ordered_json j = render(tmp.path("t.jsonl")).json;
  EXPECT_EQ(j["report_version"], 1);
  EXPECT_EQ(j["peak_allocated_phase"], "step 1");
  EXPECT_TRUE(j["peak_reserved_phase"].is_null());
  EXPECT_EQ(j["devices"]["0"]["peak_allocated_phase"], "step 1");
  ASSERT_EQ(j["top_at_peak"].size(), 1u);
  EXPECT_EQ(j["top_at_peak"][0]["bytes"], 1000);
  EXPECT_EQ(j["top_at_peak"][0]["functions"], nlohmann::ordered_json({"grow()"}));
  EXPECT_EQ(j["top_at_peak"][0]["frames"].size(), 2u);
  EXPECT_EQ(j["leaks"][0]["functions"], nlohmann::ordered_json({"grow()"}));
  ASSERT_EQ(j["phases"].size(), 1u);
  EXPECT_EQ(j["phases"][0]["path"], "step 1");
  EXPECT_EQ(j["phases"][0]["end_t"], 40);
  EXPECT_EQ(j["phases"][0]["peak_allocated"], 1000);
  EXPECT_EQ(j["iterations"]["source"], "none");
  EXPECT_TRUE(j["growth"].is_array());
  EXPECT_EQ(j["growth_bytes_per_iteration"], 0);
  EXPECT_DOUBLE_EQ(j["fragmentation"]["at_peak_reserved"].get<double>(), 0.755859);  // 1 - 1000/4096
  EXPECT_EQ(j["fragmentation"]["samples"], 2);
  EXPECT_EQ(j["fragmentation"]["worst"]["cached_free_scattered"]["bytes"], 2072);
  EXPECT_TRUE(j["fragmentation"]["worst"]["inactive_split_bytes"].is_null());
  ASSERT_EQ(j["oom_events"].size(), 1u);
  EXPECT_EQ(j["oom_events"][0]["cause"], "fragmentation");
  EXPECT_EQ(j["oom_events"][0]["phase"], nullptr);
  EXPECT_EQ(j["oom_events"][0]["functions"], nlohmann::ordered_json({"grow()"}));
  EXPECT_EQ(j["oom_events"][0]["label"], "grow");
  EXPECT_EQ(j["oom_events"][0]["sentence"].get<std::string>().rfind("needed 2.93 KiB (rounded to 3.00 KiB) on device 0", 0), 0u);
  EXPECT_EQ(j["error_events"]["double_free"], 1);
}

TEST(Report, AnImportedSnapshotIsNamedAsSuchWithoutAProcess) {
  TempDir tmp;
  testing::write_file(
      tmp.path("t.jsonl"),
      testing::join_lines(
          {R"J({"ev":"header","format":"cumemtrace","version":1,"pid":0,"ppid":0,"host":"","exe":"","argv":[],)J"
           R"J("start_unix_ns":0,"pool":"caching","config":{"source":"torch_snapshot","snapshot":"/x/s.pickle"}})J",
           R"J({"ev":"device","t":0,"dev":0,"name":"CUDA device 0 (PyTorch snapshot)","total":0})J",
           testing::alloc_line(1000, "0x100", 4096), testing::end_line(2000)}));
  const std::string text = render(tmp.path("t.jsonl")).text;
  EXPECT_NE(text.find("  program:   (a PyTorch memory snapshot: /x/s.pickle)\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("pid:"), std::string::npos) << text;  // no "pid 0 (parent 0)"
  EXPECT_NE(text.find("Device 0: CUDA device 0 (PyTorch snapshot)\n"), std::string::npos) << text;  // no ", 0 B"
}

TEST(Report, TextAnswersInASummaryBeforeTheDetails) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), rich_trace());
  const std::string text = render(tmp.path("t.jsonl")).text;
  const std::size_t summary = text.find("Summary\n");
  ASSERT_NE(summary, std::string::npos) << text;
  EXPECT_LT(summary, text.find("Total, all devices"));
  EXPECT_NE(text.find("  peak allocated:  1000 B at 0.000000 s in phase 'step 1'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  live at peak:    1000 B (100.0%) from grow\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  out of memory:   1 failure; the first needed"), std::string::npos) << text;
  EXPECT_NE(text.find("  API misuse:      1 double_free\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Out of memory: 1 failure\n  1. needed"), std::string::npos) << text;
}

TEST(Report, SeveralTracesGiveOneReportWithAProcessTable) {
  TempDir tmp;
  testing::write_file(tmp.path("job.rank0.jsonl"), rich_trace());
  testing::write_file(tmp.path("job.rank1.jsonl"), testing::join_lines({testing::header_line(), testing::end_line(5)}));
  const testing::CommandResult json = testing::run_command(
      {testing::cli_path(), "report", tmp.path("job.rank0.jsonl"), tmp.path("job.rank1.jsonl"), "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(json.out);
  ASSERT_EQ(j["traces"].size(), 2u);
  EXPECT_EQ(j["processes"][1]["rank"], 1);
  EXPECT_EQ(j["totals"]["peak_allocated"], 1000);
  EXPECT_EQ(j["totals"]["ooms"], 1);
  const testing::CommandResult text =
      testing::run_command({testing::cli_path(), "report", tmp.path("job.rank0.jsonl"), tmp.path("job.rank1.jsonl")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("cumemtrace report: 2 traces\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(rank 1) ========"), std::string::npos) << text.out;

  const testing::CommandResult twice = testing::run_command({testing::cli_path(), "report", "-", "-"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("standard input (-) can be read only once"), std::string::npos) << twice.err;
  const testing::CommandResult missing =
      testing::run_command({testing::cli_path(), "report", tmp.path("job.rank0.jsonl"), tmp.path("nope.jsonl")});
  EXPECT_EQ(missing.exit_code, 2);
}

TEST(Report, CompleteTraceIsNotMarkedTruncated) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines({testing::header_line(), testing::end_line(1)}));
  const Rendered r = render(tmp.path("t.jsonl"));
  EXPECT_EQ(r.text.find("TRUNCATED"), std::string::npos);
  EXPECT_NE(r.text.find("Live at end: nothing"), std::string::npos);
  EXPECT_TRUE(r.json["truncated_after_line"].is_null());
}

}  // namespace
}  // namespace cumemtrace::analyzer
