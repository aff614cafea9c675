// The subcommands of `cumemtrace`: each adds itself to the command line and
// runs from the values CLI11 parsed into its argument struct.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}

namespace cumemtrace::cli {

struct RunArgs {
  std::string output;                // CUMEMTRACE_OUTPUT template, passed on
  // Passed on as CUMEMTRACE_POOL, _POOL_CONF, _STACKS, _FLUSH_MS, _FORK.
  std::optional<std::string> pool, pool_conf, stacks, flush_ms, fork, python;
  bool free_stacks = false;  // CUMEMTRACE_FREE_STACKS=1
  bool torch_tensors = false;        // PYTORCH_NO_CUDA_MEMORY_CACHING=1
  std::vector<std::string> command;  // the program and its arguments
  std::optional<std::string> check;  // --check LIST, checked after the run ('' is a usage error)
  bool allow_incomplete = false;     // --check judges a cut or lossy trace too
  bool allow_unassessed = false;     // --check passes a growth limit where growth cannot be assessed
  std::string iteration_marker;      // --check: the mark that delimits iterations; empty: found by itself
  bool live = false;                 // --live: the live view (live_view.h) while the program runs
};
CLI::App* add_run_command(CLI::App& app, RunArgs& args);
int run_command(const RunArgs& args);

struct ReportArgs {
  std::vector<std::string> traces;  // several: one report with a per-process table
  std::string format = "text";
  std::string output;  // empty: standard output
  bool symbolize = false;  // file:line (and missing names) from the frames' object files
  bool full_stacks = false;  // every frame as recorded, none folded (text and HTML)
  // The allocator advice section (commands/advise.h): "auto" (a PyTorch or
  // passthrough trace of up to kAutoAdviceAllocations allocations), "on", "off".
  std::string advise = "auto";
  std::string iteration_marker;  // the mark that delimits iterations (growth.h); empty: found by itself
};
CLI::App* add_report_command(CLI::App& app, ReportArgs& args);
int report_command(const ReportArgs& args);

struct CheckArgs {
  std::vector<std::string> traces;
  // nullopt: no limit; an empty value is a bad limit, not none.
  std::optional<std::string> max_peak_allocated, max_peak_reserved, max_leaked_bytes, max_leaked_count, max_growth,
      max_fragmentation, max_ooms, max_reserved_ratio;
  std::string suppressions;
  std::string junit;
  bool symbolize = false;  // as report --symbolize: the failure lines name file:line
  bool allow_incomplete = false;  // judge a cut, lossy or killed trace rather than fail it
  bool allow_unassessed = false;  // pass --max-growth where growth cannot be assessed, saying so
  std::string iteration_marker;   // the mark that delimits iterations; empty: found by itself
};
CLI::App* add_check_command(CLI::App& app, CheckArgs& args);
int check_command(const CheckArgs& args);

struct RecoverArgs {
  std::vector<std::string> traces;
};
CLI::App* add_recover_command(CLI::App& app, RecoverArgs& args);
int recover_command(const RecoverArgs& args);

struct DiffArgs {
  std::string base;
  std::string next;
  std::string format = "text";
  std::string output;  // empty: standard output
  std::size_t sites = 10;
  // nullopt: no limit; an empty value is a bad limit, not none.
  std::optional<std::string> max_peak_increase, max_reserved_increase, max_leak_increase, max_growth_increase;
  bool allow_incomplete = false;  // judge a cut, lossy or killed trace rather than fail it
  bool allow_unassessed = false;  // judge --max-growth-increase where growth cannot be assessed
  std::string iteration_marker;   // the mark that delimits iterations in both traces; empty: found by itself
};
CLI::App* add_diff_command(CLI::App& app, DiffArgs& args);
int diff_command(const DiffArgs& args);

// `run --check LIST`: the list is parsed and the trace files already there
// are noted before the program starts; afterwards the traces the run wrote
// (its forked children's too) are checked like `check` does.
class RunCheck {
 public:
  // nullptr (the error logged) when LIST is not a valid check list.
  static std::unique_ptr<RunCheck> prepare(const std::string& list, const std::string& output_template,
                                           bool allow_incomplete = false, bool allow_unassessed = false,
                                           const std::string& iteration_marker = "");
  ~RunCheck();
  // The verdict's exit code: 0 all hold, 1 a check failed, 2 a trace unreadable.
  int check_new_traces();

 private:
  struct State;
  explicit RunCheck(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};
// --iteration-marker NAME, for report, check, diff and run: only the mark
// (or NVTX range) NAME delimits iterations, numbers folded (growth.h).
CLI::Option* add_iteration_marker_option(CLI::App& command, std::string& marker);

struct ImportTorchArgs {
  std::string snapshot;
  std::string output;
};
CLI::App* add_import_torch_command(CLI::App& app, ImportTorchArgs& args);
int import_torch_command(const ImportTorchArgs& args);

struct ReplayArgs {
  std::string trace;
  std::string pool_conf;  // empty: the pool's defaults; "pytorch": PyTorch's policy
  std::optional<std::string> capacity;  // nullopt: the trace's device total, else unlimited ('' is a usage error)
  std::string format = "text";
  std::string output;
};
CLI::App* add_replay_command(CLI::App& app, ReplayArgs& args);
int replay_command(const ReplayArgs& args);
struct AdviseArgs {
  std::string trace;
  std::optional<std::string> capacity;  // nullopt: the run's device ('' is a usage error)
  std::string format = "text";
  std::string output;
  unsigned jobs = 0;
};
CLI::App* add_advise_command(CLI::App& app, AdviseArgs& args);
int advise_command(const AdviseArgs& args);
struct TimelineArgs {
  std::string trace;
  std::string format = "csv";
  std::size_t points = 0;  // 0: every change
  std::string output;      // empty: standard output
};
CLI::App* add_timeline_command(CLI::App& app, TimelineArgs& args);
int timeline_command(const TimelineArgs& args);

struct TopArgs {
  std::string trace;
  double interval = 1.0;  // seconds between redraws
  bool stay = false;      // keep the view after the end line
  std::size_t top = 5;    // call sites shown
};
CLI::App* add_top_command(CLI::App& app, TopArgs& args);
int top_command(const TopArgs& args);

struct ExportArgs {
  std::string trace;
  std::string format;
  std::string output;  // empty: standard output
  std::string what;    // --format folded: peak, leaks or allocated; empty: not given (peak)
  std::string points;  // --format perfetto: N or all; empty: not given (kPerfettoDefaultPoints)
};
CLI::App* add_export_command(CLI::App& app, ExportArgs& args);
int export_command(const ExportArgs& args);

}  // namespace cumemtrace::cli
