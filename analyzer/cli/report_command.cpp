// `cumemtrace report TRACE`: peaks, counts and what was left live at the end.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>

#include "commands.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "exit_codes.h"
#include "output_file.h"

namespace cumemtrace::cli {

CLI::App* add_report_command(CLI::App& app, ReportArgs& args) {
  CLI::App* report = app.add_subcommand("report", "Summarise a trace: peaks, counts, leaks");
  report->add_option("trace", args.trace, "Trace file (.jsonl or .jsonl.zst; - for standard input)")
      ->required();
  report->add_option("--format", args.format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  report->add_option("-o,--output", args.output, "Write the report to this file instead of stdout");
  return report;
}

int report_command(const ReportArgs& args) {
  using namespace cumemtrace::analyzer;
  try {
    const auto start = std::chrono::steady_clock::now();
    ReaderOptions options;
    options.progress = true;
    TraceReader reader(args.trace, options);
    Analysis analysis;
    std::uint64_t events = 0;
    while (const TraceEvent* event = reader.next()) {
      analysis.consume(*event);
      ++events;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const ReaderStats& stats = reader.stats();
    spdlog::debug("read {} lines ({} bytes, {} events) in {:.3f} s: {:.2f} million events/s", stats.lines,
                  stats.bytes, events, seconds, seconds > 0 ? events / seconds / 1e6 : 0.0);
    spdlog::debug("{} bad lines, {} unknown events, {} unknown fields, truncated: {}", stats.bad_lines,
                  stats.unknown_events, stats.unknown_fields, stats.truncated);

    std::string text;
    if (args.format == "json") {
      // Strings from a trace are valid UTF-8, but the path comes from the
      // command line: replace rather than fail on a bad byte.
      text = render_json_report(reader, analysis).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      text += '\n';
    } else {
      text = render_text_report(reader, analysis);
    }
    if (std::string error = write_output(args.output, text); !error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
    return kExitOk;
  } catch (const TraceError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

}  // namespace cumemtrace::cli
