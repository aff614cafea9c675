// The subcommands of `cumemtrace`: each adds itself to the command line and
// runs from the values CLI11 parsed into its argument struct.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace cumemtrace::cli {

struct RunArgs {
  std::string output;                // CUMEMTRACE_OUTPUT template, passed on
  std::vector<std::string> command;  // the program and its arguments
  std::string check;                 // --check LIST, checked after the run
};
CLI::App* add_run_command(CLI::App& app, RunArgs& args);
int run_command(const RunArgs& args);

struct ReportArgs {
  std::string trace;
  std::string format = "text";
  std::string output;  // empty: standard output
};
CLI::App* add_report_command(CLI::App& app, ReportArgs& args);
int report_command(const ReportArgs& args);

struct CheckArgs {
  std::vector<std::string> traces;
  std::string max_peak_allocated, max_peak_reserved, max_leaked_bytes, max_leaked_count, max_growth,
      max_fragmentation, max_ooms;  // empty: no limit
  std::string suppressions;
  std::string junit;
};
CLI::App* add_check_command(CLI::App& app, CheckArgs& args);
int check_command(const CheckArgs& args);

struct DiffArgs {
  std::string base;
  std::string next;
  std::string format = "text";
  std::string output;  // empty: standard output
  std::size_t sites = 10;
  std::string max_peak_increase, max_reserved_increase, max_leak_increase, max_growth_increase;  // empty: none
};
CLI::App* add_diff_command(CLI::App& app, DiffArgs& args);
int diff_command(const DiffArgs& args);

// `run --check LIST`: the list is parsed and the trace files already there
// are noted before the program starts; afterwards the traces the run wrote
// (its forked children's too) are checked like `check` does.
class RunCheck {
 public:
  // nullptr (the error logged) when LIST is not a valid check list.
  static std::unique_ptr<RunCheck> prepare(const std::string& list, const std::string& output_template);
  ~RunCheck();
  // The verdict's exit code: 0 all hold, 1 a check failed, 2 a trace unreadable.
  int check_new_traces();

 private:
  struct State;
  explicit RunCheck(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cumemtrace::cli
