// The subcommands of `cumemtrace`: each adds itself to the command line and
// runs from the values CLI11 parsed into its argument struct.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace cumemtrace::cli {

struct RunArgs {
  std::string output;                // CUMEMTRACE_OUTPUT template, passed on
  // Passed on as CUMEMTRACE_POOL, _POOL_CONF, _STACKS, _FLUSH_MS, _FORK.
  std::optional<std::string> pool, pool_conf, stacks, flush_ms, fork;
  bool torch_tensors = false;        // PYTORCH_NO_CUDA_MEMORY_CACHING=1
  std::vector<std::string> command;  // the program and its arguments
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

}  // namespace cumemtrace::cli
