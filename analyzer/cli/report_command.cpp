// `cumemtrace report TRACE...`: peaks and the phases they fell in, what was
// live at the peak, leaks and growth leaks, fragmentation, out-of-memory
// failures; with several traces, a per-process table and totals first.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <optional>

#include "commands.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/html_report.h"
#include "cumemtrace/analyzer/multi_report.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/symbolizer.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "commands/advise.h"
#include "exit_codes.h"
#include "load_report.h"
#include "output_file.h"

namespace cumemtrace::cli {

namespace {

using analyzer::Analysis;
using analyzer::TraceReader;
using Json = nlohmann::ordered_json;

// `--advise auto` replays a trace of up to this many allocations: a few
// seconds at most (each setting is replayed about 15 times; a snapshot of
// 7,095 takes 0.4 s). A larger trace costs `report` only the first this
// many allocations' bookkeeping (3 M events: about 3% more CPU, 4 MB more).
constexpr std::uint64_t kAutoAdviceAllocations = 50000;

// The advice section, or nothing: for `auto`, a PyTorch trace (replayable or
// not: a run of PyTorch's own allocator is told what to record instead) or a
// passthrough trace a pool could change; for `on`, any trace.
std::optional<analyzer::Advice> advice_for(const analyzer::ReplayTrace& trace, const std::string& mode,
                                           std::string& skipped) {
  using namespace analyzer;
  if (mode == "off") return std::nullopt;
  const bool torch = advice_flavor(trace) == AdviceFlavor::torch;
  if (mode == "auto" && !torch && trace.pool_mode != "passthrough") return std::nullopt;
  if (mode == "auto" && trace.allocs > kAutoAdviceAllocations) {
    skipped = "Not replayed here: " + std::to_string(trace.allocs) + " allocations take a while; run `cumemtrace advise " +
              trace.path + "` (or report --advise on).";
    return std::nullopt;
  }
  Advice advice = advise(trace, AdviseOptions{});
  if (mode == "auto" && advice.replayable == Replayable::empty) return std::nullopt;
  return advice;
}

struct OneReport {
  Json json;
  std::string text;
  std::optional<analyzer::TimelineCollector> timeline;  // for a page of several traces
  std::vector<analyzer::FlameTree> flames;               // likewise
};

// Reads and analyses one trace; the reader and the analysis (the live set)
// are released before the next trace is read.
// `format` is text, json or html; the JSON report is also built when
// `with_json` (the multi-trace table is made from it) and for HTML (the page
// renders it). With `several`, an HTML report keeps the timeline for the
// page of all traces instead of rendering a page of its own.
OneReport report_one(const std::string& path, const ReportArgs& args, bool with_json, bool several = false) {
  const std::string& format = args.format;
  const bool want_json = with_json || format != "text";
  const auto start = std::chrono::steady_clock::now();
  analyzer::ReaderOptions options;
  options.progress = true;  // on a terminal, for a long read
  TraceReader reader(path, options);
  Analysis analysis;
  if (!args.iteration_marker.empty()) analysis.set_iteration_marker(args.iteration_marker);
  std::optional<analyzer::FrameSymbolizer> symbolizer;
  if (args.symbolize) analysis.set_symbolizer(&symbolizer.emplace());
  std::optional<analyzer::TimelineCollector> timeline;  // the HTML page's charts
  if (format == "html") timeline.emplace(analyzer::html_timeline_options());
  std::optional<analyzer::ReplayTraceBuilder> replay_trace;  // for the advice
  if (args.advise != "off") replay_trace.emplace(path);
  if (replay_trace && args.advise == "auto") replay_trace->set_allocation_limit(kAutoAdviceAllocations);
  std::uint64_t events = 0;
  while (const analyzer::TraceEvent* event = reader.next()) {
    analysis.consume(*event);
    if (timeline) timeline->consume(*event, analysis);
    if (replay_trace) replay_trace->consume(*event);
    ++events;
  }
  if (symbolizer) log_symbolization(path, symbolizer->counts());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const analyzer::ReaderStats& stats = reader.stats();
  spdlog::debug("{}: read {} lines ({} bytes, {} events) in {:.3f} s: {:.2f} million events/s", path, stats.lines,
                stats.bytes, events, seconds, seconds > 0 ? events / seconds / 1e6 : 0.0);
  spdlog::debug("{} of {} lines decoded through a known line shape, the others by simdjson", stats.lines_by_shape,
                stats.lines);
  spdlog::debug("{} bad lines, {} unknown events, {} unknown fields, truncated: {}", stats.bad_lines,
                stats.unknown_events, stats.unknown_fields, stats.truncated);
  OneReport report;
  analyzer::ReportOptions report_options;
  report_options.full_stacks = args.full_stacks;
  std::optional<analyzer::Advice> advice;
  std::string advice_skipped;
  if (replay_trace) {
    const analyzer::ReplayTrace trace =
        replay_trace->finish(reader, analysis.total().reserved.peak, analysis.total().allocated.peak);
    replay_trace.reset();
    advice = advice_for(trace, args.advise, advice_skipped);
  }
  if (want_json) {
    report.json = analyzer::render_json_report(reader, analysis, report_options);
    if (advice) report.json["advice"] = analyzer::advice_json(*advice);
    else if (!advice_skipped.empty()) report.json["advice"] = Json{{"skipped", advice_skipped}};
  }
  if (format == "text") {
    report.text = analyzer::render_text_report(reader, analysis, report_options);
    if (advice) report.text += "\n" + analyzer::render_advice_text(*advice);
    else if (!advice_skipped.empty()) report.text += "\nAllocator advice\n  " + advice_skipped + "\n";
  }
  if (format == "html") {
    // The flame graphs need the analysis, released once this trace is done.
    std::vector<analyzer::FlameTree> flames = analyzer::html_flame_trees(analysis);
    if (several) {
      report.timeline = std::move(timeline);
      report.flames = std::move(flames);
    } else {
      report.text = analyzer::render_html_report(report.json, *timeline, path, args.full_stacks, flames);
    }
  }
  return report;
}

std::string dump(const Json& j) {
  // Strings from a trace are valid UTF-8, but the path comes from the
  // command line: replace rather than fail on a bad byte.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace

CLI::App* add_report_command(CLI::App& app, ReportArgs& args) {
  CLI::App* report = app.add_subcommand(
      "report", "Summarise traces: peaks and their phases, what was live at the peak, leaks, growth, "
                "fragmentation, out-of-memory failures");
  report
      ->add_option("trace", args.traces,
                   "Trace files (.jsonl or .jsonl.zst; - for standard input); several give one report with a "
                   "per-process table (ranks, children)")
      ->required();
  report->add_option("--format", args.format,
                     "Output format; html is one self-contained page with charts, segment maps and flame graphs "
                     "(live at the peak, leaks, everything allocated)")
      ->check(CLI::IsMember({"text", "json", "html"}))
      ->capture_default_str();
  report->add_option("-o,--output", args.output, "Write the report to this file instead of stdout");
  report->add_flag("--symbolize", args.symbolize,
                   "Name frames by file:line (and functions the trace left unnamed) from their object files' debug "
                   "information; files modified since the run are left as recorded");
  report->add_option("--advise", args.advise,
                     "The allocator advice section (cumemtrace advise): auto = for a PyTorch or passthrough trace of "
                     "up to 50,000 allocations; on = always; off = never")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  report->add_flag("--full-stacks", args.full_stacks,
                   "Print every stack frame as recorded; by default the program's own frames (Python lines, native "
                   "code outside frameworks) are shown and runs of PyTorch, CPython, CUDA and C library frames folded");
  add_iteration_marker_option(*report, args.iteration_marker);
  return report;
}

int report_command(const ReportArgs& args) {
  using namespace cumemtrace::analyzer;
  if (std::count(args.traces.begin(), args.traces.end(), "-") > 1) {
    spdlog::error("standard input (-) can be read only once");
    return kExitUsage;
  }
  if (args.symbolize && !symbolize_is_available()) return kExitUsage;
  const bool json = args.format == "json";
  const bool several = args.traces.size() > 1;
  try {
    std::string text;
    if (!several) {
      OneReport one = report_one(args.traces.front(), args, false);
      text = json ? dump(one.json) : std::move(one.text);
    } else {
      std::vector<Json> reports;
      std::vector<std::string> texts;
      std::vector<HtmlTrace> pages;
      std::vector<ProcessRow> rows;
      for (const std::string& path : args.traces) {
        OneReport one = report_one(path, args, true, true);  // the table comes from the JSON
        rows.push_back(process_row(one.json));
        if (one.timeline) {
          pages.push_back(HtmlTrace{std::move(one.json), std::move(*one.timeline), path, std::move(one.flames)});
        } else {
          reports.push_back(std::move(one.json));
          texts.push_back(std::move(one.text));
        }
      }
      label_processes(rows);
      if (args.format == "html") text = render_html_multi_report(rows, pages, args.full_stacks);
      else if (json) text = dump(render_json_multi(rows, std::move(reports)));
      else text = render_text_multi(rows, texts);
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
