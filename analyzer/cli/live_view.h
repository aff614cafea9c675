// The live view's terminal side, shared by `cumemtrace top` and
// `cumemtrace run --live`: follows a trace while it is written
// (read/following_source.h), feeds an Analysis as lines arrive, and draws
// render/live_view.h's frames about once per interval.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <thread>

namespace cumemtrace::cli {

enum class LiveOutput {
  full_screen,   // top on a terminal: the alternate screen, redrawn whole; the last frame printed on leaving
  bottom_panel,  // run --live on a terminal: a fixed panel at the bottom, the program's output scrolling above
  lines,         // no terminal: one summary line per interval
};

struct LiveOptions {
  std::chrono::milliseconds interval{1000};
  std::size_t top = 5;     // call sites shown
  bool stay = false;       // after the end line (or the writer's end), stay until stopped
  LiveOutput output = LiveOutput::lines;
  int fd = 1;              // where the view goes
  std::string line_prefix;  // before each summary line ("cumemtrace: " on run's stderr)
  std::size_t panel_rows = 12;  // bottom_panel's height (less on a small terminal)
  // How often the file is polled at its end: a sleep, never a spin.
  std::chrono::milliseconds poll{100};
  // The writer counts as gone once it has written nothing for this long
  // and its pid (the header's, on this host) no longer runs.
  std::chrono::milliseconds writer_gone_after{1000};
};

// Set from outside (a signal handler, run's main thread).
struct LiveControl {
  std::atomic<bool> stop{false};            // leave now (Ctrl-C)
  std::atomic<bool> program_ended{false};   // run: the program exited; read what is left, then leave
  // The trace's path once it exists (top: the file is there; run: the
  // program created it); nullopt: not yet.
  std::function<std::optional<std::string>()> locate;
  std::string waiting_for;  // what the view names while locate() has nothing
};

struct LiveOutcome {
  enum class How {
    end_line,     // the trace's `end` line was read
    writer_gone,  // no end line, and the writing process is gone
    stopped,      // LiveControl::stop (or the program ended) first
    no_trace,     // the program ended before it created a trace
    unreadable,   // not a trace, or it shrank: `message` says why
  } how = How::stopped;
  std::string message;
};

// Follows until the end line, the writer's end, or `control` says so;
// restores the terminal before it returns (whatever happens).
LiveOutcome follow_live(const LiveOptions& options, LiveControl& control);

// Whether `fd` is a terminal the view can draw on (TERM is not "dumb").
bool is_live_terminal(int fd);

}  // namespace cumemtrace::cli

namespace cumemtrace::cli {

// `run --live`: the view in a thread of its own while the launcher waits
// for the program (the launcher's blocked signals stay blocked in it, so
// they keep reaching the waiting thread).
class LiveRun {
 public:
  LiveRun(LiveOptions options, std::function<std::optional<std::string>()> locate, std::string waiting_for);
  ~LiveRun();
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;
  // The program ended: the view reads what is left, draws its last frame,
  // gives the terminal back, and the thread ends.
  void program_ended();

 private:
  LiveOptions options_;
  LiveControl control_;
  std::thread thread_;
};

}  // namespace cumemtrace::cli
