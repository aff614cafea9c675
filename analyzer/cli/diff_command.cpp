// `cumemtrace diff BASE NEW`: what changed between two runs; with limits,
// exit 1 on a regression (one line each), for CI.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "cumemtrace/analyzer/diff.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "cumemtrace/analyzer/units.h"
#include "exit_codes.h"
#include "load_report.h"
#include "output_file.h"

namespace cumemtrace::cli {

namespace {

struct BadLimit {
  std::string message;
};

// A limit not given is none; one given empty (an unset shell variable) is a
// bad limit, never a silent "no limit".
std::optional<double> percent_option(const std::optional<std::string>& text, const char* option) {
  if (!text) return std::nullopt;
  const std::optional<double> percent = analyzer::parse_percent(*text);
  if (!percent) throw BadLimit{std::string(option) + ": '" + *text + "' is not a percentage (10 or 10%)"};
  return percent;
}

std::optional<std::uint64_t> size_option(const std::optional<std::string>& text, const char* option) {
  if (!text) return std::nullopt;
  const std::optional<std::uint64_t> bytes = analyzer::parse_size(*text);
  if (!bytes) {
    throw BadLimit{std::string(option) + ": '" + *text + "' is not a size (bytes, or with a unit: 512MiB, 2GiB)"};
  }
  return bytes;
}

}  // namespace

CLI::App* add_diff_command(CLI::App& app, DiffArgs& args) {
  CLI::App* diff = app.add_subcommand(
      "diff", "Compare two traces: peaks, leaks, growth and call sites; with limits, exit 1 on a regression");
  diff->add_option("base", args.base, "The reference trace")->required();
  diff->add_option("new", args.next, "The trace to compare with it")->required();
  diff->add_option("--format", args.format, "Output format")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  diff->add_option("-o,--output", args.output, "Write the comparison to this file instead of stdout");
  diff->add_option("--sites", args.sites, "Changed call sites shown per list")->capture_default_str();
  diff->add_option("--max-peak-increase", args.max_peak_increase,
                   "Regression if peak allocated grows by more than this percentage (PCT: 10 or 10%)");
  diff->add_option("--max-reserved-increase", args.max_reserved_increase,
                   "Regression if peak reserved grows by more than this percentage (PCT)");
  diff->add_option("--max-leak-increase", args.max_leak_increase,
                   "Regression if leaked memory grows by more than this (SIZE: bytes, 512MiB, 2GiB)");
  diff->add_option("--max-growth-increase", args.max_growth_increase,
                   "Regression if the largest growth leak per iteration grows by more than this (SIZE)");
  diff->add_flag("--allow-incomplete", args.allow_incomplete,
                 "With limits: judge traces that were cut short, lost events or were completed after a kill "
                 "(by default such a trace is a failure, exit 1)");
  diff->add_flag("--allow-unassessed", args.allow_unassessed,
                 "With --max-growth-increase: compare where a trace's growth could not be assessed (no repeating "
                 "mark, no period in any thread's allocations) as 0 per iteration (by default a failure, exit 1)");
  add_iteration_marker_option(*diff, args.iteration_marker);
  return diff;
}

int diff_command(const DiffArgs& args) {
  using namespace cumemtrace::analyzer;
  DiffLimits limits;
  try {
    limits.max_peak_increase_percent = percent_option(args.max_peak_increase, "--max-peak-increase");
    limits.max_reserved_increase_percent = percent_option(args.max_reserved_increase, "--max-reserved-increase");
    limits.max_leak_increase = size_option(args.max_leak_increase, "--max-leak-increase");
    limits.max_growth_increase = size_option(args.max_growth_increase, "--max-growth-increase");
    limits.allow_incomplete = args.allow_incomplete;
    limits.allow_unassessed = args.allow_unassessed;
  } catch (const BadLimit& e) {
    spdlog::error("{}", e.message);
    return kExitUsage;
  }
  try {
    const TraceDiff diff =
        diff_reports(load_json_report(args.base, false, args.iteration_marker),
                     load_json_report(args.next, false, args.iteration_marker), args.base, args.next, args.sites);
    const std::vector<std::string> regressions = find_regressions(diff, limits);
    // An incomplete trace, not allowed: the lines say why nothing was compared.
    const bool unjudged = limits.any() && !limits.allow_incomplete &&
                          (!diff.base_incomplete.empty() || !diff.next_incomplete.empty());
    std::string text;
    if (args.format == "json") {
      text = render_diff_json(diff, regressions).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    } else {
      text = render_diff_text(diff);
      // The verdict belongs in the comparison too, not only on stderr (-o FILE keeps it).
      if (limits.any() && regressions.empty()) text += "\nLimits: every one held.\n";
      if (!regressions.empty()) {
        text += unjudged ? "\nNot judged:\n" : "\nRegressions (over the limits):\n";
        for (const std::string& regression : regressions) text += "  " + regression + "\n";
      }
    }
    if (std::string error = write_output(args.output, text); !error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
    for (const std::string& regression : regressions) {
      spdlog::error("{}: {}", unjudged ? "diff failed" : "regression", regression);
    }
    return regressions.empty() ? kExitOk : kExitCheckFailed;
  } catch (const TraceError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

}  // namespace cumemtrace::cli
