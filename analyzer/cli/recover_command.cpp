// `cumemtrace recover TRACE…`: completes the traces of killed processes now,
// rather than when a command first reads them (killed_trace.h), and says what
// each trace is.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::cli {

CLI::App* add_recover_command(CLI::App& app, RecoverArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "recover",
      "Complete the trace of a process killed by SIGKILL or the OOM killer from the TRACE.pending file it left: "
      "every event recorded before the kill, then `end` with reason `killed` (report, check and diff do this "
      "on their own)");
  cmd->add_option("traces", args.traces, "Trace files")->required()->check(CLI::ExistingFile);
  return cmd;
}

int recover_command(const RecoverArgs& args) {
  using Status = analyzer::KilledTraceOutcome::Status;
  int exit_code = kExitOk;
  for (const std::string& path : args.traces) {
    const analyzer::KilledTraceOutcome r = analyzer::complete_killed_trace(path);
    switch (r.status) {
      case Status::completed:
        std::printf("%s: completed: its process was killed; %llu events recorded before the kill were added, "
                    "then `end` (reason killed)\n",
                    path.c_str(), static_cast<unsigned long long>(r.events));
        break;
      case Status::still_running:
        std::printf("%s: still being written: its process is running\n", path.c_str());
        break;
      case Status::nothing_to_do:
        std::printf("%s: nothing to recover\n", path.c_str());
        break;
      case Status::failed:
        std::fprintf(stderr, "cumemtrace recover: %s: %s\n", path.c_str(), r.message.c_str());
        exit_code = kExitUsage;
        break;
    }
  }
  return exit_code;
}

}  // namespace cumemtrace::cli
