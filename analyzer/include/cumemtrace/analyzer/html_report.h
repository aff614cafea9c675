// `cumemtrace report --format html`: one self-contained page (no network;
// inline CSS, SVG drawn here, and one inline script of ours, allowed by its
// SHA-256 in the page's Content-Security-Policy) with the report's figures,
// memory and fragmentation over time, segment maps at the allocated peak and
// at each OOM, tables of call sites, leaks, OOMs, growth and phases, and
// flame graphs (what was live at the peak, at the end, and everything ever
// allocated; the script draws them from a JSON block, zooms on a click and
// names a frame's bytes and share on hover).
//
//   Analysis analysis;
//   TimelineCollector timeline(html_timeline_options());
//   while (const TraceEvent* e = reader.next()) {
//     analysis.consume(*e);
//     timeline.consume(*e, analysis);
//   }
//   std::string page = render_html_report(render_json_report(reader, analysis), timeline, path,
//                                         false, html_flame_trees(analysis));
//
// The page renders the JSON report's keys (REPORT_FORMAT.md); keys a report
// lacks get a short note instead of their section. The segment maps need a
// second read of the trace (`trace_path`); for standard input ("-") the page
// says they are not available.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/flame.h"
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

// The flame graphs' frames narrower than this share of their graph's total
// are merged (build_flame_tree's min_fraction): about half a pixel of a
// graph as wide as the page, which keeps a trace of 10,000 distinct deep
// stacks a page of a few hundred kB.
inline constexpr double kHtmlFlameMinFraction = 1.0 / 2000;

// The page's three flame graphs: peak, leaks, allocated.
inline std::vector<FlameTree> html_flame_trees(const Analysis& analysis) {
  return {build_flame_tree(analysis, FlameWhat::peak, kHtmlFlameMinFraction),
          build_flame_tree(analysis, FlameWhat::leaks, kHtmlFlameMinFraction),
          build_flame_tree(analysis, FlameWhat::allocated, kHtmlFlameMinFraction)};
}

// Throws TraceError if the second read of `trace_path` fails. Stacks show
// the user's frames with the framework's folded beneath them, unless
// `full_stacks` (every frame as recorded). `flames` (html_flame_trees) are
// drawn as flame graphs; a view they lack, or all without them, gets a note.
std::string render_html_report(const nlohmann::ordered_json& report, const TimelineCollector& timeline,
                               const std::string& trace_path, bool full_stacks = false,
                               const std::vector<FlameTree>& flames = {});

// One trace of a page of several: its JSON report, its timeline (collected
// with html_timeline_options()), its file (read again for segment maps) and
// its flame graphs' trees (html_flame_trees).
struct HtmlTrace {
  nlohmann::ordered_json report;
  TimelineCollector timeline;
  std::string trace_path;
  std::vector<FlameTree> flames;
};

// `cumemtrace report A B ... --format html`: one page with the per-process
// table and totals (rows as labelled by label_processes), allocated memory of
// every process in one chart (one labelled series each, on a common clock
// when every trace has its start time), then each trace's own report.
// `traces` is in the order of `rows`. Throws TraceError as render_html_report.
std::string render_html_multi_report(const std::vector<ProcessRow>& rows, const std::vector<HtmlTrace>& traces,
                                     bool full_stacks = false);

}  // namespace cumemtrace::analyzer
