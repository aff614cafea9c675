// cumemtrace: the command line. Exit codes are in exit_codes.h.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <new>

#include "commands.h"
#include "exit_codes.h"

namespace {

// Diagnostics go to stderr as "cumemtrace: message", one line each.
void set_up_logging() {
  auto logger = spdlog::stderr_logger_st("cumemtrace");
  logger->set_pattern("cumemtrace: %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::info);
}

int main_checked(int argc, char** argv) {
  using namespace cumemtrace::cli;
  CLI::App app{"cumemtrace: a CUDA device-memory profiler. Run a program under it, then read the trace.",
               "cumemtrace"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags are accepted after the subcommand too
  app.set_version_flag("--version", CUMEMTRACE_VERSION);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Print diagnostics (timings, reader statistics) on stderr");

  RunArgs run_args;
  CLI::App* run = add_run_command(app, run_args);
  ReportArgs report_args;
  CLI::App* report = add_report_command(app, report_args);
  CheckArgs check_args;
  CLI::App* check = add_check_command(app, check_args);
  DiffArgs diff_args;
  CLI::App* diff = add_diff_command(app, diff_args);
  ImportTorchArgs import_torch_args;
  CLI::App* import_torch = add_import_torch_command(app, import_torch_args);
  ReplayArgs replay_args;
  CLI::App* replay = add_replay_command(app, replay_args);
  AdviseArgs advise_args;
  CLI::App* advise = add_advise_command(app, advise_args);
  TimelineArgs timeline_args;
  CLI::App* timeline = add_timeline_command(app, timeline_args);
  ExportArgs export_args;
  CLI::App* export_cli = add_export_command(app, export_args);
  RecoverArgs recover_args;
  CLI::App* recover = add_recover_command(app, recover_args);
  TopArgs top_args;
  CLI::App* top = add_top_command(app, top_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2, whatever CLI11's own code.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (verbose) spdlog::set_level(spdlog::level::debug);
  if (run->parsed()) return run_command(run_args);
  if (report->parsed()) return report_command(report_args);
  if (check->parsed()) return check_command(check_args);
  if (diff->parsed()) return diff_command(diff_args);
  if (import_torch->parsed()) return import_torch_command(import_torch_args);
  if (replay->parsed()) return replay_command(replay_args);
  if (advise->parsed()) return advise_command(advise_args);
  if (timeline->parsed()) return timeline_command(timeline_args);
  if (export_cli->parsed()) return export_command(export_args);
  if (recover->parsed()) return recover_command(recover_args);
  if (top->parsed()) return top_command(top_args);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    set_up_logging();
    return main_checked(argc, argv);
  } catch (const std::bad_alloc&) {
    spdlog::error("out of memory");
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
  return cumemtrace::cli::kExitUsage;
}
