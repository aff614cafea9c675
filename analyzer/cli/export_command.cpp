// `cumemtrace export TRACE --format perfetto|csv`: the trace for other tools
// (ui.perfetto.dev, pandas, DuckDB); formats in analyzer/EXPORT_FORMATS.md.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "exit_codes.h"
#include "output_file.h"

namespace cumemtrace::cli {

CLI::App* add_export_command(CLI::App& app, ExportArgs& args) {
  CLI::App* command = app.add_subcommand(
      "export", "Convert a trace: perfetto (Chrome trace JSON for ui.perfetto.dev) or csv (one row per event)");
  command->add_option("trace", args.trace, "Trace file (.jsonl or .jsonl.zst; - for standard input)")
      ->required();
  command->add_option("--format", args.format, "Output format")
      ->check(CLI::IsMember({"perfetto", "csv"}))
      ->required();
  command->add_option("-o,--output", args.output, "Write to this file instead of stdout");
  return command;
}

int export_command(const ExportArgs& args) {
  using namespace cumemtrace::analyzer;
  try {
    TraceReader reader(args.trace);
    ExportSummary summary;
    const std::string error = write_streamed(args.output, [&](std::ostream& out) {
      summary = args.format == "csv" ? export_events_csv(reader, out) : export_perfetto(reader, out);
    });
    if (!error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
    spdlog::debug("{} records written", summary.records);
    if (summary.unmatched_pops > 0) {
      spdlog::warn("{} `pop` marks had no open range on their thread and were left out", summary.unmatched_pops);
    }
    if (reader.stats().truncated) {
      spdlog::warn("{}: the trace was cut short after line {}; exported what came before", reader.path(),
                   reader.stats().last_complete_line);
    }
    return kExitOk;
  } catch (const TraceError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

}  // namespace cumemtrace::cli
