// `cumemtrace check TRACE... --max-...`: limits for CI, exit 1 when one is
// exceeded; and `run --check LIST`, which checks the traces a run wrote.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <optional>

#include "commands.h"
#include "cumemtrace/analyzer/check.h"
#include "cumemtrace/analyzer/process_rank.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "exit_codes.h"
#include "load_report.h"
#include "output_file.h"

namespace cumemtrace::cli {

// What `check` and `run --check` were asked (outside the anonymous namespace:
// RunCheck::State holds one).
struct CheckRequest {
  std::vector<analyzer::Check> checks;
  analyzer::Suppressions suppressions;
  std::string junit_path;
  bool symbolize = false;
  bool allow_incomplete = false;
  bool allow_unassessed = false;  // a growth limit passes, saying so, where growth cannot be assessed
  std::string iteration_marker;   // --iteration-marker; empty: iterations found by themselves
};

namespace {

using analyzer::Check;
using analyzer::CheckResult;
using analyzer::Comparison;
using analyzer::Metric;
using analyzer::TraceVerdict;

struct LimitOption {
  const char* flag;
  Metric metric;
  std::optional<std::string> CheckArgs::*value;
  const char* help;
};

constexpr LimitOption kLimitOptions[] = {
    {"--max-peak-allocated", Metric::peak_allocated, &CheckArgs::max_peak_allocated,
     "Highest allowed peak of allocated memory (SIZE: bytes, 512MiB, 2GiB, 1.5GB)"},
    {"--max-peak-reserved", Metric::peak_reserved, &CheckArgs::max_peak_reserved,
     "Highest allowed peak of reserved memory (SIZE)"},
    {"--max-leaked-bytes", Metric::leaked_bytes, &CheckArgs::max_leaked_bytes,
     "Most memory allowed to be still allocated at the end (SIZE)"},
    {"--max-leaked-count", Metric::leaked_count, &CheckArgs::max_leaked_count,
     "Most allocations allowed to be still live at the end (N)"},
    {"--max-growth", Metric::growth, &CheckArgs::max_growth,
     "Largest allowed growth leak, in bytes per iteration (SIZE)"},
    {"--max-fragmentation", Metric::fragmentation, &CheckArgs::max_fragmentation,
     "Highest allowed fragmentation when reserved memory peaked, 1 - allocated/reserved (0.25 or 25%)"},
    {"--max-ooms", Metric::ooms, &CheckArgs::max_ooms, "Most out-of-memory failures allowed (N)"},
    {"--max-reserved-ratio", Metric::reserved_ratio, &CheckArgs::max_reserved_ratio,
     "Highest allowed peak reserved / peak allocated, all devices together (R > 0: 1.25); a trace that allocated "
     "nothing passes, its ratio undefined"},
};

// One warning per suppression line that matched nothing in any trace:
// a stale line, or a typo that silently checks nothing.
void warn_unused_suppressions(const analyzer::Suppressions& suppressions, const std::vector<bool>& used) {
  const std::string source = suppressions.source().empty() ? std::string("--suppressions") : suppressions.source();
  for (std::size_t i = 0; i < used.size(); ++i) {
    if (used[i]) continue;
    const analyzer::Suppressions::Pattern& p = suppressions.patterns()[i];
    spdlog::warn("warning: suppression '{}' ({}:{}) matched no leak and no growing site", p.written, source, p.line);
  }
}

// Checks every trace; prints a verdict per check on stdout and one line per
// violation on stderr. Returns the exit code.
int check_traces(const std::vector<std::string>& traces, const CheckRequest& request) {
  std::vector<TraceVerdict> verdicts;
  std::vector<bool> used(request.suppressions.patterns().size(), false);
  bool unreadable = false;
  bool failed = false;
  std::string out;
  for (const std::string& trace : traces) {
    TraceVerdict verdict;
    // The trace as every line about it names it: with its rank, when its
    // header, name or command line tells (the traces of a job's ranks).
    verdict.trace = analyzer::trace_with_rank(trace, analyzer::rank_from_file_name(trace));
    std::vector<std::string> suppressed;  // after the verdicts, which they explain
    const std::size_t title_at = out.size();
    try {
      const nlohmann::ordered_json report = load_json_report(trace, request.symbolize, request.iteration_marker);
      verdict.trace = analyzer::trace_with_rank(trace, analyzer::rank_of_report(report));
      // A cut, lossy or killed trace gives no verdict unless asked to: its
      // leaks may be frees it lost, its peaks may be missing (DESIGN.md).
      if (const std::string incomplete = analyzer::incomplete_reason(report); !incomplete.empty()) {
        if (request.allow_incomplete) {
          verdict.notes.push_back("incomplete trace, judged anyway (--allow-incomplete): " + incomplete);
        } else {
          verdict.incomplete = "incomplete trace: " + incomplete + "; " + std::string(analyzer::kAllowIncompleteHint);
        }
      }
      if (verdict.incomplete.empty()) {
        verdict.results =
            analyzer::evaluate_checks(report, request.checks, request.suppressions, request.allow_unassessed);
        // How much each suppression took away, so a too-broad one shows in CI logs.
        for (const analyzer::SuppressionUse& use : analyzer::suppression_uses(report, request.suppressions)) {
          if (!use.matched()) continue;
          used[use.pattern] = true;
          suppressed.push_back(analyzer::describe_use(use, request.suppressions));
        }
      }
    } catch (const analyzer::TraceError& e) {
      spdlog::error("{}", e.what());
      verdict.read_error = e.what();
      unreadable = true;
      out += "  ERROR cannot read the trace\n";
    }
    out.insert(title_at, "check " + verdict.trace + "\n");
    for (const std::string& note : verdict.notes) out += "  note: " + note + "\n";
    if (!verdict.incomplete.empty()) {
      out += "  FAIL  " + verdict.incomplete + "\n";
      spdlog::error("check failed: {} (trace {})", verdict.incomplete, verdict.trace);
      failed = true;
    }
    for (const CheckResult& r : verdict.results) {
      const char* tag = r.status == CheckResult::Status::pass ? "ok  " : "FAIL";
      out += std::string("  ") + tag + "  " + r.message + "\n";
      if (!r.passed()) {
        spdlog::error("check failed: {} (trace {})", r.message, verdict.trace);
        failed = true;
      }
    }
    for (std::string& line : suppressed) {
      out += "  note: " + line + "\n";
      verdict.notes.push_back(std::move(line));
    }
    verdicts.push_back(std::move(verdict));
  }
  if (std::string error = write_output("", out); !error.empty()) spdlog::error("{}", error);
  // Only when every trace was judged: an unread or unjudged trace proves nothing unused.
  if (std::all_of(verdicts.begin(), verdicts.end(),
                  [](const TraceVerdict& v) { return v.read_error.empty() && v.incomplete.empty(); })) {
    warn_unused_suppressions(request.suppressions, used);
  }
  if (!request.junit_path.empty()) {
    if (std::string error = write_output(request.junit_path, analyzer::junit_xml(verdicts)); !error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
  }
  if (unreadable) return kExitUsage;
  return failed ? kExitCheckFailed : kExitOk;
}

}  // namespace

CLI::App* add_check_command(CLI::App& app, CheckArgs& args) {
  CLI::App* check = app.add_subcommand(
      "check", "Check traces against limits, for CI: exit 1 with one line per limit exceeded, 0 when all hold");
  check->add_option("traces", args.traces, "Trace files (.jsonl or .jsonl.zst)")->required();
  for (const LimitOption& option : kLimitOptions) check->add_option(option.flag, args.*option.value, option.help);
  check->add_option("--suppressions", args.suppressions,
                    "Known leaks, one pattern per line (* matches anything, # comments): a function as the "
                    "site's label shows it or its full name, module:PATTERN for an object file "
                    "(module:libc10_cuda.so), file:PATTERN for a source file; matched against the frames the "
                    "site's label spans, never its outer callers. Each line's share is printed; a line that "
                    "matched nothing is warned about");
  check->add_option("--junit", args.junit, "Also write the verdicts as JUnit XML to this file");
  check->add_flag("--allow-incomplete", args.allow_incomplete,
                  "Judge a trace that was cut short, lost events or was completed after a kill (by default "
                  "such a trace fails: its leaks and peaks are not a finished run's)");
  check->add_flag("--allow-unassessed", args.allow_unassessed,
                  "Pass --max-growth where growth cannot be assessed (no repeating mark and no period in any "
                  "thread's allocations), saying so (by default such a trace fails the growth limit)");
  check->add_flag("--symbolize", args.symbolize,
                  "Name the call sites in failure lines by file:line from the object files' debug information "
                  "(as report --symbolize)");
  add_iteration_marker_option(*check, args.iteration_marker);
  return check;
}

int check_command(const CheckArgs& args) {
  try {
    std::vector<Check> checks;
    for (const LimitOption& option : kLimitOptions) {
      const std::optional<std::string>& value = args.*option.value;
      if (value) checks.push_back(analyzer::make_check(option.metric, Comparison::at_most, *value, option.flag));
    }
    if (checks.empty()) {
      spdlog::error("check: no limit given (--max-peak-allocated, --max-leaked-bytes, ...; see check --help)");
      return kExitUsage;
    }
    CheckRequest request;
    request.checks = std::move(checks);
    request.suppressions =
        args.suppressions.empty() ? analyzer::Suppressions{} : analyzer::Suppressions::load(args.suppressions);
    request.junit_path = args.junit;
    request.symbolize = args.symbolize;
    request.allow_incomplete = args.allow_incomplete;
    request.allow_unassessed = args.allow_unassessed;
    request.iteration_marker = args.iteration_marker;
    if (args.symbolize && !symbolize_is_available()) return kExitUsage;
    return check_traces(args.traces, request);
  } catch (const analyzer::CheckError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

CLI::Option* add_iteration_marker_option(CLI::App& command, std::string& marker) {
  return command
      .add_option("--iteration-marker", marker,
                  "The mark or NVTX range that starts each iteration (a training step), for growth leaks: only "
                  "it delimits iterations, its numbers matching any ('step' and 'step 1' name 'step 41'); by "
                  "default the most frequent repeating mark, else a period in each thread's allocations")
      ->type_name("NAME")
      ->check([](const std::string& name) { return name.empty() ? std::string("a mark name, not empty") : ""; });
}

struct RunCheck::State {
  CheckRequest request;
  std::string pattern;
  TraceFileStamps before;
};

std::unique_ptr<RunCheck> RunCheck::prepare(const std::string& list, const std::string& output_template,
                                           bool allow_incomplete, bool allow_unassessed,
                                           const std::string& iteration_marker) {
  auto state = std::make_unique<State>();
  state->request.iteration_marker = iteration_marker;
  state->request.allow_incomplete = allow_incomplete;
  state->request.allow_unassessed = allow_unassessed;
  try {
    state->request.checks = analyzer::parse_check_list(list);
  } catch (const analyzer::CheckError& e) {
    spdlog::error("{}", e.what());
    return nullptr;
  }
  state->pattern = trace_file_pattern(output_template);
  state->before = trace_file_stamps(state->pattern);
  return std::unique_ptr<RunCheck>(new RunCheck(std::move(state)));
}

RunCheck::RunCheck(std::unique_ptr<State> state) : state_(std::move(state)) {}
RunCheck::~RunCheck() = default;

int RunCheck::check_new_traces() {
  const std::vector<std::string> traces = changed_trace_files(state_->before, trace_file_stamps(state_->pattern));
  if (traces.empty()) {
    // Nothing measured is not a pass: the limits were asked for.
    spdlog::error("check failed: no trace was written (the program made no device allocation that cumemtrace saw)");
    return kExitCheckFailed;
  }
  return check_traces(traces, state_->request);
}

}  // namespace cumemtrace::cli
