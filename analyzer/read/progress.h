// A progress line on stderr while a long trace is read: bytes read of the
// total, percent, events per second. Shown only when stderr is a terminal
// (a CI log or a redirected stderr gets nothing), only once reading has
// taken longer than a delay, redrawn at most a few times a second, and
// erased when reading ends, so a fast run never shows it.
//
// The clock and the output are injected, so the timing logic is tested
// without a terminal and without waiting.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace cumemtrace::analyzer::detail {

class ProgressMeter {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // Receives the text to write as is ("\r..." to draw, "\r\033[K" to erase).
  using Output = std::function<void(std::string_view)>;

  struct Timing {
    std::chrono::milliseconds delay{2000};    // nothing is shown before this
    std::chrono::milliseconds interval{250};  // between two redraws
  };

  // `total_bytes` 0: unknown (a pipe), then only bytes read are shown.
  ProgressMeter(std::string label, std::uint64_t total_bytes, Clock clock, Output output, Timing timing);
  ~ProgressMeter();
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  // Cheap enough to call every few thousand events: reads the clock once.
  void update(std::uint64_t bytes_read, std::uint64_t events);
  // Erases the line if it was shown. Idempotent; the destructor calls it.
  void finish();

  bool shown() const { return shown_; }

  // The line for these figures, without "\r" ("trace.jsonl: 1.20 GiB of
  // 4.00 GiB (30%), 5.1 M events/s").
  static std::string format_line(std::string_view label, std::uint64_t bytes_read, std::uint64_t total_bytes,
                                 std::uint64_t events, double seconds);

 private:
  std::string label_;
  std::uint64_t total_bytes_;
  Clock clock_;
  Output output_;
  Timing timing_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool shown_ = false;
  bool finished_ = false;
};

// A meter writing to stderr, or nullptr when stderr is not a terminal.
// CUMEMTRACE_PROGRESS_DELAY_MS overrides the delay (tests use 0).
std::unique_ptr<ProgressMeter> make_terminal_progress(std::string label, std::uint64_t total_bytes);

}  // namespace cumemtrace::analyzer::detail
