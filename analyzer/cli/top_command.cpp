// `cumemtrace top TRACE`: a live view of a trace while it is being written.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>

#include "commands.h"
#include "exit_codes.h"
#include "live_view.h"

namespace cumemtrace::cli {

namespace {

LiveControl* g_top_control = nullptr;
volatile sig_atomic_t g_top_signal = 0;

void top_on_signal(int signal) {
  g_top_signal = signal;
  if (g_top_control != nullptr) g_top_control->stop.store(true);
}

}  // namespace

CLI::App* add_top_command(CLI::App& app, TopArgs& args) {
  CLI::App* top = app.add_subcommand(
      "top",
      "Follow a trace while it is being written (as tail -f) and show, about once a second: allocated, "
      "reserved and peak memory per device with a sparkline, the call sites with the most memory live now, "
      "growth leaks so far, out-of-memory failures and errors");
  top->footer(
      "Waits for a trace that does not exist yet, and for the rest of a line still being written. Without a "
      "terminal on standard output it prints one summary line per interval instead of the view.\n"
      "Exit: 0 after the trace's end line; 4 when the process that writes it (the header's pid, on this host) "
      "is gone without writing one (if it was killed, `cumemtrace recover TRACE` completes the trace); 2 for a "
      "file that is not a trace; 128+N when stopped by signal N (Ctrl-C: 130).");
  top->add_option("trace", args.trace, "The trace (.jsonl or .jsonl.zst) being written")->required();
  top->add_option("--interval", args.interval, "Seconds between redraws (default 1)")
      ->check(CLI::Range(0.05, 3600.0))
      ->type_name("SECONDS");
  top->add_flag("--stay", args.stay,
                "After the end line (or the writer's end), keep the view up until Ctrl-C instead of exiting");
  top->add_option("--top", args.top, "Call sites shown (default 5)")->check(CLI::Range(1, 1000))->type_name("N");
  return top;
}

int top_command(const TopArgs& args) {
  LiveOptions options;
  options.interval = std::chrono::milliseconds(static_cast<long>(std::lround(args.interval * 1000.0)));
  options.poll = std::min(options.poll, options.interval);
  options.top = args.top;
  options.stay = args.stay;
  options.fd = STDOUT_FILENO;
  options.output = is_live_terminal(STDOUT_FILENO) ? LiveOutput::full_screen : LiveOutput::lines;

  LiveControl control;
  const std::string path = args.trace;
  control.locate = [path]() -> std::optional<std::string> {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    return path;
  };
  control.waiting_for = path + " to be created";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    spdlog::error("{}: not a regular file (top follows a trace file as it grows)", path);
    return kExitUsage;
  }

  // Ctrl-C and friends end the view, which then gives the terminal back.
  g_top_control = &control;
  struct sigaction action {};
  action.sa_handler = top_on_signal;
  sigemptyset(&action.sa_mask);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(signal, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed pipe: the write fails, the view ends at the next signal or end
  const LiveOutcome outcome = follow_live(options, control);
  g_top_control = nullptr;

  switch (outcome.how) {
    case LiveOutcome::How::end_line:
      return kExitOk;
    case LiveOutcome::How::writer_gone:
      spdlog::warn("{}: the writing process is gone and the trace has no end line; if it was killed, "
                   "`cumemtrace recover {}` completes it",
                   path, path);
      return kExitWriterGone;
    case LiveOutcome::How::unreadable:
      spdlog::error("{}", outcome.message);
      return kExitUsage;
    case LiveOutcome::How::stopped:
    case LiveOutcome::How::no_trace:
      break;
  }
  return 128 + (g_top_signal != 0 ? g_top_signal : SIGINT);
}

}  // namespace cumemtrace::cli
