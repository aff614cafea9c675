#include "read/progress.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "cumemtrace/analyzer/units.h"

namespace cumemtrace::analyzer::detail {

namespace {

// Carriage return, then erase to the end of the line (ECMA-48 EL): the line
// is redrawn in place, and a shorter line leaves nothing of a longer one.
constexpr std::string_view kClearLine = "\r\033[K";
// Beyond this the line could wrap on a narrow terminal, and a wrapped line
// cannot be erased with a carriage return.
constexpr std::size_t kMaxLabel = 32;

std::string short_label(std::string_view label) {
  if (const auto slash = label.find_last_of('/'); slash != std::string_view::npos && slash + 1 < label.size()) {
    label.remove_prefix(slash + 1);
  }
  if (label.size() <= kMaxLabel) return std::string(label);
  return "..." + std::string(label.substr(label.size() - (kMaxLabel - 3)));
}

void write_stderr(std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // progress is best effort
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

ProgressMeter::ProgressMeter(std::string label, std::uint64_t total_bytes, Clock clock, Output output,
                             Timing timing)
    : label_(short_label(label)),
      total_bytes_(total_bytes),
      clock_(std::move(clock)),
      output_(std::move(output)),
      timing_(timing),
      start_(clock_()),
      last_draw_(start_) {}

ProgressMeter::~ProgressMeter() { finish(); }

void ProgressMeter::update(std::uint64_t bytes_read, std::uint64_t events) {
  if (finished_) return;
  const auto now = clock_();
  if (now - start_ < timing_.delay) return;
  if (shown_ && now - last_draw_ < timing_.interval) return;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  std::string text(kClearLine);
  text += format_line(label_, bytes_read, total_bytes_, events, seconds);
  output_(text);
  shown_ = true;
  last_draw_ = now;
}

void ProgressMeter::finish() {
  if (finished_) return;
  finished_ = true;
  if (shown_) output_(kClearLine);
}

std::string ProgressMeter::format_line(std::string_view label, std::uint64_t bytes_read, std::uint64_t total_bytes,
                                       std::uint64_t events, double seconds) {
  std::string line = "cumemtrace: reading " + std::string(label) + ": " + format_bytes(bytes_read);
  if (total_bytes > 0) {
    const double fraction = static_cast<double>(bytes_read) / static_cast<double>(total_bytes);
    char percent[16];
    std::snprintf(percent, sizeof percent, " (%.0f%%)", 100.0 * (fraction < 1.0 ? fraction : 1.0));
    line += " of " + format_bytes(total_bytes) + percent;
  }
  if (seconds > 0) {
    char rate[48];
    std::snprintf(rate, sizeof rate, ", %.1f M events/s", static_cast<double>(events) / seconds / 1e6);
    line += rate;
  }
  return line;
}

std::unique_ptr<ProgressMeter> make_terminal_progress(std::string label, std::uint64_t total_bytes) {
  if (::isatty(STDERR_FILENO) != 1) return nullptr;
  ProgressMeter::Timing timing;
  if (const char* delay = std::getenv("CUMEMTRACE_PROGRESS_DELAY_MS"); delay != nullptr && *delay != '\0') {
    char* end = nullptr;
    const long ms = std::strtol(delay, &end, 10);
    if (*end == '\0' && ms >= 0) timing.delay = std::chrono::milliseconds(ms);
  }
  return std::make_unique<ProgressMeter>(std::move(label), total_bytes, [] { return std::chrono::steady_clock::now(); },
                                         write_stderr, timing);
}

}  // namespace cumemtrace::analyzer::detail
