// The subcommands of `cumemtrace`: each adds itself to the command line and
// runs from the values CLI11 parsed into its argument struct.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace cumemtrace::cli {

struct RunArgs {
  std::string output;                // CUMEMTRACE_OUTPUT template, passed on
  std::vector<std::string> command;  // the program and its arguments
};
CLI::App* add_run_command(CLI::App& app, RunArgs& args);
int run_command(const RunArgs& args);

struct ReportArgs {
  std::vector<std::string> traces;  // several: one report with a per-process table
  std::string format = "text";
  std::string output;  // empty: standard output
};
CLI::App* add_report_command(CLI::App& app, ReportArgs& args);
int report_command(const ReportArgs& args);

}  // namespace cumemtrace::cli
