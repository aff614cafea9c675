// The HTML report: escaping, every key of the JSON report rendered (from a
// hand-written fixture with the keys REPORT_FORMAT.md adds), graceful notes
// when keys are missing, segment maps, and a bounded page on a big trace.
// The page in a real browser is tested in tests/integration (Chromium).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/html_report.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "render/html_escape.h"
#include "render/html_flame.h"
#include "render/html_page.h"
#include "analyze/segment_map.h"

namespace cumemtrace::analyzer {
namespace {

using detail::html;
using Json = nlohmann::ordered_json;

using testing::contains;

// Case-insensitive: the HTML parser does not care about case either.
bool contains_nocase(std::string haystack, std::string needle) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  return lower(haystack).find(lower(needle)) != std::string::npos;
}

TEST(HtmlEscape, MarkupAmpersandsAndQuotesBecomeReferences) {
  EXPECT_EQ(html("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
  EXPECT_EQ(html("\"><img src=x onerror='a'>"), "&quot;&gt;&lt;img src=x onerror=&#39;a&#39;&gt;");
  EXPECT_EQ(html("a & b ]]> c"), "a &amp; b ]]&gt; c");
  EXPECT_EQ(html("operator<<"), "operator&lt;&lt;");
}

TEST(HtmlEscape, BadUtf8AndControlCharactersBecomeReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(html("caf\xC3\xA9 \xE2\x98\x83 \xF0\x9F\x92\xA5"), "caf\xC3\xA9 \xE2\x98\x83 \xF0\x9F\x92\xA5");
  EXPECT_EQ(html("a\xFF" "b"), "a" + r + "b");
  EXPECT_EQ(html("\xC0\xAF"), r + r);          // overlong '/'
  EXPECT_EQ(html("\xED\xA0\x80"), r + r + r);  // a surrogate
  EXPECT_EQ(html("\xE2\x98"), r + r);          // cut short
  EXPECT_EQ(html(std::string_view("x\0y\x01\x7F\tz\n", 8)), "x" + r + "y" + r + r + "\tz\n");
  EXPECT_EQ(html("\xC2\x85"), r);  // a C1 control
}

// A report with every key REPORT_FORMAT.md lists, with markup wherever the
// trace supplies text.
Json full_fixture() {
  const Json frames = Json::array({Json{{"ip", "0x1"}, {"fn", "<script>alert(1)</script>"}, {"module", "/lib/<m>.so"}, {"off", "0x1"}},
                                   Json{{"ip", "0x2"}, {"fn", nullptr}, {"module", "/lib/x.so"}, {"off", "0x2"}},
                                   Json{{"ip", "0x3"}, {"fn", "main"}, {"module", "/bin/a"}, {"off", "0x3"}, {"file", "a&b.cpp"}, {"line", 7}}});
  return Json{
      {"trace", "run</title>.jsonl"},
      {"program", {{"argv", {"train", "\"><img src=x onerror=alert(2)>"}}, {"exe", "/bin/train"}, {"pid", 42}, {"ppid", 1},
                   {"host", "h&st"}, {"pool", "caching"}, {"start_unix_ns", 1}}},
      {"duration_t", 5000000000},
      {"report_version", 1},
      {"peak_allocated", 3221225472},
      {"peak_allocated_t", 1500000000},
      {"peak_allocated_phase", "epoch <1>/forward"},
      {"peak_reserved", 4294967296},
      {"peak_reserved_t", 1400000000},
      {"peak_reserved_phase", nullptr},
      {"allocs", 10}, {"frees", 8}, {"ooms", 1}, {"errors", 2},
      {"leaked_bytes", 2048}, {"leaked_count", 2},
      {"truncated", true}, {"truncated_after_line", 99}, {"bad_lines", 3},
      {"first_bad_lines", {{{"line", 5}, {"reason", "invalid JSON <here>"}}}},
      {"end", nullptr},
      {"devices", {{"0", {{"name", "<GPU>"}, {"total_bytes", 85899345920}, {"peak_allocated", 3221225472},
                          {"peak_allocated_t", 1500000000}, {"peak_reserved", 4294967296}, {"peak_reserved_t", 1400000000},
                          {"leaked_bytes", 2048}, {"ooms", 1}}}}},
      {"leaks", {{{"stack", 4}, {"bytes", 2048}, {"count", 2}, {"first_t", 10}, {"apis", {"cudaMalloc<x>"}}, {"frames", frames}}}},
      {"top_at_peak", {{{"stack", 4}, {"bytes", 2147483648}, {"count", 3}, {"functions", {"<script>alert(1)</script>", "main"}},
                        {"frames", frames}},
                       {{"stack", 0}, {"bytes", 1073741824}, {"count", 1}, {"functions", Json::array()}, {"frames", Json::array()}}}},
      {"phases", {{{"name", "forward"}, {"path", "epoch <1>/forward"}, {"start_t", 1000}, {"end_t", nullptr},
                   {"peak_allocated", 3221225472}, {"peak_reserved", 4294967296}, {"allocs", 4}, {"frees", 1}}}},
      {"iterations", {{"source", "marks"}, {"count", 12}, {"mark", "step & <go>"}}},
      {"growth", {{{"stack", 9}, {"functions", {"cache_grow<T>()"}}, {"frames", Json::array()}, {"bytes_per_iteration", 1048576},
                   {"iterations", 12}, {"first_live_bytes", 1048576}, {"last_live_bytes", 12582912}}}},
      {"growth_bytes_per_iteration", 1048576},
      {"fragmentation", {{"samples", 10}, {"at_peak_reserved", 0.25},
                         {"worst", {{"reserved_unused", {{"value", 0.31}, {"t", 123}, {"dev", 0}}},
                                    {"cached_free_scattered", {{"value", 0.92}, {"t", 456}, {"dev", 0}}},
                                    {"inactive_split_bytes", {{"value", 4194304}, {"t", 456}, {"dev", 0}}},
                                    {"rounding_waste", {{"value", 0.02}, {"t", 789}, {"dev", 0}}}}},
                         {"at_end", {{"reserved_unused", 0.1}, {"cached_free_scattered", 0.5}, {"inactive_split_bytes", 0},
                                     {"rounding_waste", 0.01}}}}},
      {"oom_events", {{{"t", 2000000000}, {"dev", 0}, {"api", "cudaMalloc"}, {"size", 2147483648}, {"block", 2147483648},
                       {"allocated", 3221225472}, {"reserved", 4294967296}, {"cached_free", 1073741824},
                       {"largest_free", 536870912}, {"device_free", 0}, {"device_total", 85899345920}, {"cause", "fragmentation"},
                       {"stack", 4}, {"functions", {"<script>alert(1)</script>"}}, {"frames", frames},
                       {"sentence", "needed 2.00 GiB; 1.00 GiB cached but the largest free block was 512 MiB: fragmentation <try it>"}}}},
      {"error_events", {{"double_free", 1}, {"unknown_pointer", 1}}},
      {"advice", {{"replayable", "yes"}, {"verdict", "avoid_oom"}, {"capacity_source", "the device's <total>"},
                  {"candidates", {{{"setting", "PyTorch defaults, as run"}, {"peak_reserved", 734003200},
                                   {"reserved_over_allocated", 1.5556}, {"failures_on_device", 1},
                                   {"min_capacity", 734003200}},
                                  {{"setting", "expandable_segments:True <x>"}, {"peak_reserved", 524288000},
                                   {"reserved_over_allocated", 1.1111}, {"failures_on_device", 0},
                                   {"min_capacity", 471859200}}}},
                  {"recommended", 1},
                  {"recommendation", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 'a<b>.py'"},
                  {"explanation", "It avoids the out-of-memory failure <here>."}}},
  };
}

TEST(HtmlPage, RendersEveryKeyOfTheReport) {
  const TimelineCollector timeline(html_timeline_options());
  const std::string page = detail::render_html_page(full_fixture(), timeline, {}, "");
  // The page's own frame.
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_TRUE(contains(page, "Content-Security-Policy\" content=\"default-src 'none'"));
  EXPECT_TRUE(contains(page, "</html>\n"));
  // Summary.
  EXPECT_TRUE(contains(page, "3.00 GiB (3221225472 bytes) at 1.500000 s in phase <code>epoch &lt;1&gt;/forward</code>"));
  EXPECT_TRUE(contains(page, "The trace was cut short after line 99"));
  EXPECT_TRUE(contains(page, "3 lines could not be read"));
  EXPECT_TRUE(contains(page, "largest growth per iteration</th><td>1.00 MiB"));
  EXPECT_TRUE(contains(page, "25.0% of reserved memory unused"));
  EXPECT_TRUE(contains(page, "2 (double_free 1, unknown_pointer 1)"));
  // Tables.
  EXPECT_TRUE(contains(page, "<section id=\"top-at-peak\">"));
  EXPECT_TRUE(contains(page, "<td class=\"num\">66.7%</td>"));  // 2 GiB of the 3 GiB peak
  EXPECT_TRUE(contains(page, "<code>(no stack)</code>"));
  EXPECT_TRUE(contains(page, "<summary><code>&lt;script&gt;alert(1)&lt;/script&gt;</code></summary>"));
  EXPECT_TRUE(contains(page, "<span class=\"module\">/bin/a+0x3 a&amp;b.cpp:7</span>"));
  EXPECT_TRUE(contains(page, "<code>(no name)</code>"));  // the frame without a name
  EXPECT_TRUE(contains(page, "<td>cudaMalloc&lt;x&gt;</td>"));
  EXPECT_TRUE(contains(page, "<td>epoch &lt;1&gt;/forward</td>"));
  EXPECT_TRUE(contains(page, "<td>(never ended)</td>"));
  EXPECT_TRUE(contains(page, "Iterations: 12, delimited by marks (<code>step &amp; &lt;go&gt;</code>)"));
  EXPECT_TRUE(contains(page, "<code>cache_grow&lt;T&gt;()</code>"));
  EXPECT_TRUE(contains(page, "<td class=\"num\">12.00 MiB</td>"));
  EXPECT_TRUE(contains(page, "<td class=\"num\">31.0%</td>"));  // worst reserved_unused
  EXPECT_TRUE(contains(page, "<td class=\"num\">4.00 MiB</td>"));  // inactive split bytes
  EXPECT_TRUE(contains(page, "<p class=\"sentence\">needed 2.00 GiB; 1.00 GiB cached but the largest free block was "
                             "512 MiB: fragmentation &lt;try it&gt;</p>"));
  EXPECT_TRUE(contains(page, "<td>&lt;GPU&gt;</td>"));
  EXPECT_TRUE(contains(page, "line 5: invalid JSON &lt;here&gt;"));
  // The advice: the line to paste, the table with the chosen row marked.
  EXPECT_TRUE(contains(page, "<section id=\"advice\"><h2>Allocator advice</h2>"));
  EXPECT_TRUE(contains(page, "Recommendation: <code>PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "
                             "&#39;a&lt;b&gt;.py&#39;</code>"));
  EXPECT_TRUE(contains(page, "<tr class=\"chosen\"><td>expandable_segments:True &lt;x&gt;</td><td class=\"num\">"
                             "500.00 MiB</td><td class=\"num\">1.111x</td><td class=\"num\">0</td>"));
  EXPECT_TRUE(contains(page, "<tr><td>PyTorch defaults, as run</td>"));
  EXPECT_TRUE(contains(page, "It avoids the out-of-memory failure &lt;here&gt;."));
  EXPECT_TRUE(contains(page, "Capacity: the device&#39;s &lt;total&gt;."));
  EXPECT_TRUE(contains(page, "host <code>h&amp;st</code>"));
  EXPECT_TRUE(contains(page, "<title>cumemtrace: run&lt;/title&gt;.jsonl</title>"));
  // Nothing from the fixture escaped its text: the one script is ours (the
  // flame graphs'; without their trees, no data block), last, and the CSP
  // allows it by its hash (checked against sha256sum in tests/integration).
  const std::string ours = "<script>" + std::string(detail::flame_script()) + "</script></body></html>\n";
  EXPECT_TRUE(page.ends_with(ours));
  EXPECT_FALSE(contains_nocase(page.substr(0, page.size() - ours.size()), "<script"));
  EXPECT_TRUE(contains(page, "; script-src " + detail::flame_script_csp_source() + "; base-uri"));
  EXPECT_TRUE(contains(page, "This page was written without the trace's call stacks, so it has no flame graphs."));
  EXPECT_FALSE(contains_nocase(page, "<img"));
  EXPECT_TRUE(contains(page, "train &quot;&gt;&lt;img src=x onerror=alert(2)&gt;</code>"));
  EXPECT_FALSE(contains(page, "This report has no"));  // every key was there
}

TEST(HtmlPage, SaysWhatIsMissingWhenTheReportLacksKeys) {
  testing::TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines({testing::header_line(), testing::alloc_line(10, "0x100", 2048),
                                                                 testing::end_line(20)}));
  TraceReader reader(tmp.path("t.jsonl"));
  Analysis analysis;
  TimelineCollector timeline(html_timeline_options());
  while (const TraceEvent* e = reader.next()) {
    analysis.consume(*e);
    timeline.consume(*e, analysis);
  }
  Json report = render_json_report(reader, analysis);
  for (const char* key : {"top_at_peak", "growth", "phases", "fragmentation", "oom_events"}) report.erase(key);
  const std::string page = render_html_report(report, timeline, tmp.path("t.jsonl"));
  for (const char* what : {"call sites at the peak (top_at_peak)", "growth leak analysis (growth)",
                           "phase list (phases)", "fragmentation metrics (fragmentation)"}) {
    EXPECT_TRUE(contains(page, std::string("This report has no ") + what)) << what;
  }
  EXPECT_TRUE(contains(page, "<svg"));
  EXPECT_TRUE(contains(page, "At the allocated peak, 10 ns"));
  EXPECT_TRUE(contains(page, "1 live block (2.00 KiB) lies in no segment"));
  EXPECT_TRUE(contains(page, "No allocation failed."));
  EXPECT_TRUE(contains(page, "No segments were recorded on this device"));  // no fragmentation chart of nothing

  // From standard input the trace cannot be read twice: no maps, and a note why.
  const std::string from_stdin = render_html_report(report, timeline, "-");
  EXPECT_TRUE(contains(from_stdin, "Segment maps need a second read of the trace"));
  EXPECT_FALSE(contains(from_stdin, "At the allocated peak"));
}

// Segment maps from hand-built events.
class SegmentMaps : public ::testing::Test {
 protected:
  void event(format::Event ev, std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0,
             std::uint64_t stack = 0) {
    TraceEvent e;
    e.ev = ev;
    e.t = t;
    e.ptr = ptr;
    e.size = size;
    e.dev = dev;
    e.stack = stack;
    e.api = "api";
    analysis.consume(e);
    collector->consume(e, analysis);
  }
  void stack(std::uint64_t id, const char* fn) {
    TraceEvent e;
    e.ev = format::Event::stack;
    e.id = id;
    e.frames.push_back(StackFrame{0x10, fn, true, "/bin/a", 0x10, {}, {}});
    analysis.consume(e);
  }
  Analysis analysis;
  std::unique_ptr<SegmentMapCollector> collector;
};

TEST_F(SegmentMaps, BlocksLandInTheSegmentThatContainsThemAndNeighboursMerge) {
  using format::Event;
  collector = std::make_unique<SegmentMapCollector>(SegmentMapOptions{.peak_allocated = 700});
  stack(1, "first(int)");
  stack(2, "second()");
  event(Event::segment_alloc, 1, 0x1000, 1000);
  event(Event::segment_alloc, 2, 0x9000, 500, 1);  // another device
  event(Event::alloc, 3, 0x1000, 100, 0, 1);
  event(Event::alloc, 4, 0x1064, 100, 0, 1);  // right after the first: one run
  event(Event::alloc, 5, 0x1200, 300, 0, 2);
  event(Event::alloc, 6, 0x9000, 100, 1, 2);
  EXPECT_FALSE(collector->done(0));
  event(Event::alloc, 7, 0x50000, 100, 0, 0);  // in no segment
  event(Event::free, 8, 0x1000, 100);
  event(Event::alloc, 9, 0x1000, 100, 0, 1);  // back to 700: not a new peak
  ASSERT_TRUE(collector->done(0));
  ASSERT_EQ(collector->snapshots().size(), 1u);
  const SegmentSnapshot& map = collector->snapshots()[0];
  EXPECT_EQ(map.moment, SegmentSnapshot::Moment::peak);
  EXPECT_EQ(map.t, 7u);
  EXPECT_EQ(map.allocated, 700u);
  EXPECT_EQ(map.reserved, 1500u);
  EXPECT_EQ(map.outside_blocks, 1u);
  EXPECT_EQ(map.outside_bytes, 100u);
  ASSERT_EQ(map.sites.size(), 3u);
  EXPECT_EQ(map.sites[0].label, "second");  // 400 bytes
  EXPECT_EQ(map.sites[0].count, 2u);
  EXPECT_EQ(map.sites[1].label, "first");  // 200
  EXPECT_EQ(map.sites[2].label, "(no stack captured)");  // 100
  ASSERT_EQ(map.segments.size(), 2u);
  const SegmentMapSegment& s0 = map.segments[0];
  EXPECT_EQ(s0.dev, 0);
  EXPECT_EQ(s0.used, 500u);
  EXPECT_EQ(s0.blocks, 3u);
  ASSERT_EQ(s0.runs.size(), 2u);
  EXPECT_EQ(s0.runs[0].begin, 0u);
  EXPECT_EQ(s0.runs[0].end, 200u);
  EXPECT_EQ(s0.runs[0].blocks, 2u);
  EXPECT_EQ(s0.runs[0].site, 1u);
  EXPECT_EQ(s0.runs[1].begin, 0x200u);
  EXPECT_EQ(s0.runs[1].site, 0u);
  EXPECT_EQ(map.segments[1].dev, 1);
  EXPECT_EQ(map.segments[1].used, 100u);
}

TEST_F(SegmentMaps, CrowdedSegmentsAreDrawnAsSlicesAndOomMapsShowTheirDevice) {
  using format::Event;
  collector = std::make_unique<SegmentMapCollector>(SegmentMapOptions{.max_ooms = 1, .max_segments = 2, .max_runs = 10});
  event(Event::segment_alloc, 1, 0x100000, 4000);
  event(Event::segment_alloc, 2, 0x200000, 10);  // the smallest: hidden past max_segments
  event(Event::segment_alloc, 3, 0x300000, 20);
  event(Event::segment_alloc, 4, 0x400000, 100, 1);  // another device: not in its OOM map
  std::uint64_t t = 10;
  for (std::uint64_t i = 0; i < 100; ++i) {  // alternating sites, with gaps: too many runs
    event(Event::alloc, t++, 0x100000 + i * 40, 30, 0, 1 + i % 2);
  }
  TraceEvent oom;
  oom.ev = Event::oom;
  oom.t = t;
  oom.dev = 0;
  analysis.consume(oom);
  collector->consume(oom, analysis);
  collector->consume(oom, analysis);  // a second OOM: past max_ooms, not mapped
  EXPECT_TRUE(collector->done(2));
  ASSERT_EQ(collector->snapshots().size(), 1u);
  const SegmentSnapshot& map = collector->snapshots()[0];
  EXPECT_EQ(map.moment, SegmentSnapshot::Moment::oom);
  EXPECT_EQ(map.dev, 0);
  EXPECT_EQ(map.reserved, 4030u);
  EXPECT_EQ(map.hidden_segments, 1u);
  EXPECT_EQ(map.hidden_segment_bytes, 10u);
  ASSERT_EQ(map.segments.size(), 2u);
  const SegmentMapSegment& crowded = map.segments[0];
  EXPECT_EQ(crowded.blocks, 100u);
  EXPECT_LE(crowded.runs.size(), 10u);
  std::uint64_t bytes = 0, blocks = 0;
  for (const SegmentMapRun& r : crowded.runs) {
    bytes += r.bytes;
    blocks += r.blocks;
    EXPECT_LE(r.end, crowded.size);
  }
  EXPECT_EQ(bytes, 3000u);  // every byte is still accounted
  EXPECT_EQ(blocks, 100u);
  EXPECT_TRUE(crowded.runs[0].mixed);
}

TEST(HtmlReport, StaysSmallOnABigTrace) {
  testing::TempDir tmp;
  std::mt19937 rng(7);
  std::string trace = testing::header_line() + "\n";
  trace += R"({"ev":"segment_alloc","t":1,"dev":0,"ptr":"0x10000000","size":1073741824,"api":"cuMemAlloc_v2"})" "\n";
  std::vector<std::string> live;
  std::uint64_t t = 10;
  for (int i = 0; i < 100000; ++i) {
    t += 1 + rng() % 100;
    if (!live.empty() && rng() % 2 == 0) {
      trace += testing::free_line(t, live.back().c_str(), 0) + "\n";
      live.pop_back();
    } else {
      char ptr[32];
      std::snprintf(ptr, sizeof ptr, "0x%x", 0x10000000 + (i % 100000) * 4096);
      trace += testing::alloc_line(t, ptr, 1 + rng() % 4096, 0, 1 + i % 50) + "\n";
      live.emplace_back(ptr);
    }
    if (i % 100 == 0) {
      trace += R"({"ev":"mark","t":)" + std::to_string(t) + R"(,"tid":7,"name":"step","kind":"instant"})" "\n";
    }
  }
  trace += testing::end_line(t + 1) + "\n";
  testing::write_file(tmp.path("big.jsonl"), trace);
  TraceReader reader(tmp.path("big.jsonl"));
  Analysis analysis;
  TimelineCollector timeline(html_timeline_options());
  while (const TraceEvent* e = reader.next()) {
    analysis.consume(*e);
    timeline.consume(*e, analysis);
  }
  const std::string page = render_html_report(render_json_report(reader, analysis), timeline, tmp.path("big.jsonl"),
                                              false, html_flame_trees(analysis));
  EXPECT_LT(page.size(), 600u * 1024) << "the page grew with the trace";
  EXPECT_TRUE(contains(page, "<script type=\"application/json\" class=\"flamedata\">"));
  EXPECT_TRUE(contains(page, "At the allocated peak"));
  EXPECT_TRUE(contains(page, "<svg"));
}

}  // namespace
}  // namespace cumemtrace::analyzer
