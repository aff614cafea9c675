// `cumemtrace timeline TRACE`: allocated and reserved memory per device over
// time, as CSV or JSON (analyzer/EXPORT_FORMATS.md).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "cumemtrace/analyzer/timeline.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "exit_codes.h"
#include "output_file.h"

namespace cumemtrace::cli {

CLI::App* add_timeline_command(CLI::App& app, TimelineArgs& args) {
  CLI::App* timeline = app.add_subcommand("timeline", "Allocated and reserved memory per device over time");
  timeline->add_option("trace", args.trace, "Trace file (.jsonl or .jsonl.zst; - for standard input)")
      ->required();
  timeline->add_option("--format", args.format, "Output format")
      ->check(CLI::IsMember({"csv", "json"}))
      ->capture_default_str();
  timeline->add_option("--points", args.points,
                       "Resample into N time buckets, each keeping its highest allocated moment (and its "
                       "highest reserved one when that differs), so no peak is lost; default: every change")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}));
  timeline->add_option("-o,--output", args.output, "Write to this file instead of stdout");
  return timeline;
}

int timeline_command(const TimelineArgs& args) {
  using namespace cumemtrace::analyzer;
  try {
    TraceReader reader(args.trace);
    const TimelineFormat format = args.format == "json" ? TimelineFormat::json : TimelineFormat::csv;
    TimelineWriteSummary summary;
    const std::string error = write_streamed(
        args.output, [&](std::ostream& out) { summary = write_timeline(reader, format, args.points, out); });
    if (!error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
    spdlog::debug("{} samples written", summary.samples);
    if (summary.marks_omitted > 0 || summary.ooms_omitted > 0) {
      spdlog::warn("{} marks and {} OOMs past the first ones kept were left out", summary.marks_omitted,
                   summary.ooms_omitted);
    }
    if (reader.stats().truncated) {
      spdlog::warn("{}: the trace was cut short after line {}; the timeline stops there", reader.path(),
                   reader.stats().last_complete_line);
    }
    return kExitOk;
  } catch (const TraceError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

}  // namespace cumemtrace::cli
