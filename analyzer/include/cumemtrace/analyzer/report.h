// The `report` command's output, as text for people and as one JSON object
// for scripts. Both are built from a finished read (the reader's header and
// stats) and the analysis of its events.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "cumemtrace/analyzer/units.h"  // format_hex, which the reports print

namespace cumemtrace::analyzer {

// analyzer/REPORT_FORMAT.md's version: keys are only added within a version.
inline constexpr int kReportVersion = 1;

struct ReportOptions {
  std::size_t max_leak_groups = 10;  // text only: JSON lists every group
  std::size_t max_examples = 3;      // example pointers per leak group
  std::size_t max_frames = 8;        // the user's stack frames shown per call site (text)
  // Text and HTML: every frame of a stack as recorded, none folded nor
  // shortened (`report --full-stacks`).
  bool full_stacks = false;
  std::size_t max_top_sites = 5;     // text: call sites shown live at the peak
  std::size_t max_top_sites_json = 50;
  std::size_t max_growth = 10;       // text only: JSON lists every growth leak
  std::size_t max_phases = 10;       // text only: JSON lists every range
  std::size_t max_ooms = 10;         // text only
};

std::string render_text_report(const TraceReader& reader, const Analysis& analysis,
                               const ReportOptions& options = {});

nlohmann::ordered_json render_json_report(const TraceReader& reader, const Analysis& analysis,
                                          const ReportOptions& options = {});

}  // namespace cumemtrace::analyzer
