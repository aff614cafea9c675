#include "trace/tick_clock.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

namespace cumemtrace::preload {

bool TickClock::tsc_is_the_system_clock() {
#if defined(__x86_64__)
  // Read once, when the writer is made (the library's constructor): plain
  // system calls, nothing that allocates.
  const int fd = ::open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char name[32] = {};
  const ssize_t n = ::read(fd, name, sizeof name - 1);
  ::close(fd);
  return n >= 3 && std::strncmp(name, "tsc", 3) == 0 && (n == 3 || name[3] == '\n');
#else
  return false;
#endif
}

std::uint64_t TickClock::monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

TickClock::Point TickClock::read_both() {
  Point p;
#if defined(__x86_64__)
  // The TSC read between two clock reads, paired with their midpoint: the
  // pair's error is half the time the three reads took. A thread preempted
  // between them (a loaded machine, a sanitizer's runtime) would pair the
  // TSC with a time up to half a time slice off, and every line of the
  // drain would carry that error; of a few tries, the tightest pair is
  // kept, as NTP keeps the sample with the least round-trip delay.
  std::uint64_t best_width = ~0ull;
  for (int attempt = 0; attempt < kReadBothAttempts; ++attempt) {
    const std::uint64_t before = monotonic_ns();
    const std::uint64_t tsc = __rdtsc();
    const std::uint64_t after = monotonic_ns();
    if (after - before < best_width) {
      best_width = after - before;
      p = {tsc, before + best_width / 2};
    }
    if (best_width <= kTightPairNs) break;
  }
#else
  p.ns = monotonic_ns();
#endif
  return p;
}

TickClock::TickClock(std::uint64_t start_ns, bool use_tsc) : start_ns_(start_ns), use_tsc_(use_tsc) {
  if (use_tsc_) anchor_ = current_ = read_both();
}

void TickClock::calibrate() {
  if (!use_tsc_) return;
  const Point now = read_both();
  if (now.tsc <= anchor_.tsc || now.ns <= anchor_.ns) return;
  const std::uint64_t span = now.ns - anchor_.ns;
  // A longer span measures the rate better; once a span of kRateSpanNs has
  // been had, the anchor moves on, so the rate follows what NTP does to
  // CLOCK_MONOTONIC, and a shorter span does not replace it.
  if (span >= rate_span_ns_ || span >= kRateSpanNs) {
    ns_per_tick_ = static_cast<double>(span) / static_cast<double>(now.tsc - anchor_.tsc);
    rate_span_ns_ = span;
  }
  current_ = now;
  if (span >= 2 * kRateSpanNs) anchor_ = now;
}

std::uint64_t TickClock::ticks_since_start_ns(std::uint64_t ticks) const {
  if (!use_tsc_) return monotonic_since_start_ns(ticks);
  return monotonic_since_start_ns(monotonic_at(reference(), ticks));
}

}  // namespace cumemtrace::preload
