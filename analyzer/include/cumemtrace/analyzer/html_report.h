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

// Throws TraceError if the second read of `trace_path` fails.
std::string render_html_report(const nlohmann::ordered_json& report, const TimelineCollector& timeline,
                               const std::string& trace_path);

}  // namespace cumemtrace::analyzer
