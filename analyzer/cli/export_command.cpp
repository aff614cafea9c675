// `cumemtrace export TRACE --format perfetto|csv|folded|torch-snapshot`: the
// trace for other tools (ui.perfetto.dev, pandas, DuckDB, flame graph
// viewers, PyTorch's memory_viz); formats in analyzer/EXPORT_FORMATS.md.
#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "exit_codes.h"
#include "output_file.h"

namespace cumemtrace::cli {

namespace {
// `--points N`: a bucket count as `timeline --points` takes it.
std::optional<std::size_t> parse_points(const std::string& value) {
  std::size_t n = 0;
  const char* end = value.data() + value.size();
  const auto [rest, error] = std::from_chars(value.data(), end, n);
  if (error != std::errc() || rest != end || n < 1 || n > 10000000) return std::nullopt;
  return n;
}
}  // namespace

CLI::App* add_export_command(CLI::App& app, ExportArgs& args) {
  CLI::App* command = app.add_subcommand(
      "export",
      "Convert a trace: perfetto (Chrome trace JSON for ui.perfetto.dev), csv (one row per event), folded "
      "(call stacks weighted by bytes, for flamegraph.pl, inferno and speedscope) or torch-snapshot (the pickle "
      "of torch.cuda.memory._dump_snapshot, for PyTorch's memory_viz at pytorch.org/memory_viz: segments and "
      "blocks at the end, every alloc, free and segment change with its call stack; an allocation in no segment "
      "of the trace gets one of its own)");
  command->add_option("trace", args.trace, "Trace file (.jsonl or .jsonl.zst; - for standard input)")
      ->required();
  command->add_option("--format", args.format, "Output format")
      ->check(CLI::IsMember({"perfetto", "csv", "folded", "torch-snapshot"}))
      ->required();
  command->add_option("-o,--output", args.output, "Write to this file instead of stdout");
  command
      ->add_option("--what", args.what,
                   "With --format folded, which bytes weigh each stack: peak (live at the allocated peak, the "
                   "default), leaks (live at the end) or allocated (every byte ever allocated)")
      ->check(CLI::IsMember({"peak", "leaks", "allocated"}));
  command
      ->add_option("--points", args.points,
                   "With --format perfetto, how many time buckets per device the memory counters keep: each "
                   "keeps its highest and lowest allocated and reserved moments, so peaks stay exact; all: "
                   "every change (as large as the trace). Default: " +
                       std::to_string(analyzer::kPerfettoDefaultPoints))
      ->type_name("N|all")
      ->check([](const std::string& value) -> std::string {
        return value == "all" || parse_points(value) ? "" : "N (1 to 10000000) or all";
      });
  return command;
}

int export_command(const ExportArgs& args) {
  using namespace cumemtrace::analyzer;
  if (!args.what.empty() && args.format != "folded") {
    spdlog::error("--what applies to --format folded only (it says which bytes weigh each stack)");
    return kExitUsage;
  }
  if (!args.points.empty() && args.format != "perfetto") {
    spdlog::error("--points applies to --format perfetto only (it says how finely its memory counters are kept)");
    return kExitUsage;
  }
  const std::size_t points =
      args.points.empty() ? kPerfettoDefaultPoints : args.points == "all" ? 0 : *parse_points(args.points);
  try {
    TraceReader reader(args.trace);
    ExportSummary summary;
    const std::string error = write_streamed(args.output, [&](std::ostream& out) {
      if (args.format == "torch-snapshot") {
        const TorchSnapshotSummary s = export_torch_snapshot(reader, out);
        summary.records = s.entries;
        spdlog::debug("{} entries on {} device(s), {} segments live at the end, {} stacks", s.entries, s.devices,
                     s.segments, s.stacks);
        if (s.own_segments > 0) {
          spdlog::info("{} allocations were in no segment of the trace: each has a segment of its own",
                       s.own_segments);
        }
        if (s.deferred_segment_frees > 0) {
          spdlog::warn("{} segments were freed with allocations live in them: each stays until its last one is "
                       "freed", s.deferred_segment_frees);
        }
        if (s.unknown_frees + s.unknown_segment_frees + s.skipped_events > 0) {
          spdlog::warn("left out: {} frees and {} segment_frees of nothing live, {} events of devices past 1023",
                       s.unknown_frees, s.unknown_segment_frees, s.skipped_events);
        }
      } else if (args.format == "folded") {
        summary = export_folded(reader, out, parse_flame_what(args.what).value_or(FlameWhat::peak));
      } else {
        summary = args.format == "csv" ? export_events_csv(reader, out) : export_perfetto(reader, out, points);
      }
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
  } catch (const std::runtime_error& e) {  // torch-snapshot's temporary files
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

}  // namespace cumemtrace::cli
