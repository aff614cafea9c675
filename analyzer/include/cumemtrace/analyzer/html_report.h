// `cumemtrace report --format html`: one self-contained page (no network,
// no script; inline CSS and SVG drawn here) with the report's figures,
// memory and fragmentation over time, segment maps at the allocated peak and
// at each OOM, and tables of call sites, leaks, OOMs, growth and phases.
//
//   Analysis analysis;
//   TimelineCollector timeline(html_timeline_options());
//   while (const TraceEvent* e = reader.next()) {
//     analysis.consume(*e);
//     timeline.consume(*e, analysis);
//   }
//   std::string page = render_html_report(render_json_report(reader, analysis), timeline, path);
//
// The page renders the JSON report's keys (REPORT_FORMAT.md); keys a report
// lacks get a short note instead of their section. The segment maps need a
// second read of the trace (`trace_path`); for standard input ("-") the page
// says they are not available.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/multi_report.h"
#include "cumemtrace/analyzer/timeline.h"

namespace cumemtrace::analyzer {

// About 2000 points per device at most: fine curves, a page of a few hundred kB.
inline constexpr std::size_t kHtmlTimelineBuckets = 1000;

inline TimelineOptions html_timeline_options() {
  TimelineOptions options;
  options.buckets = kHtmlTimelineBuckets;
  options.max_marks = 20000;
  options.max_ooms = 1000;
  return options;
}

// Throws TraceError if the second read of `trace_path` fails. Stacks show
// the user's frames with the framework's folded beneath them, unless
// `full_stacks` (every frame as recorded).
std::string render_html_report(const nlohmann::ordered_json& report, const TimelineCollector& timeline,
                               const std::string& trace_path, bool full_stacks = false);

// One trace of a page of several: its JSON report, its timeline (collected
// with html_timeline_options()) and its file (read again for segment maps).
struct HtmlTrace {
  nlohmann::ordered_json report;
  TimelineCollector timeline;
  std::string trace_path;
};

// `cumemtrace report A B ... --format html`: one page with the per-process
// table and totals (rows as labelled by label_processes), allocated memory of
// every process in one chart (one labelled series each, on a common clock
// when every trace has its start time), then each trace's own report.
// `traces` is in the order of `rows`. Throws TraceError as render_html_report.
std::string render_html_multi_report(const std::vector<ProcessRow>& rows, const std::vector<HtmlTrace>& traces,
                                     bool full_stacks = false);

}  // namespace cumemtrace::analyzer
