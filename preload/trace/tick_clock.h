// The clock of event timestamps (`t`, TRACE_FORMAT.md: nanoseconds since the
// trace started, monotonic).
//
// Reading CLOCK_MONOTONIC through the vDSO costs ~23 ns on our machines
// (a fenced TSC read under the kernel's seqlock, then the conversion), a
// quarter of all an intercepted call costs us with stacks (perf,
// bench_malloc_free). Where the kernel itself keeps time with the TSC
// (clocksource "tsc": constant, nonstop and synchronised across CPUs, or the
// kernel would have switched away from it), the recording thread reads only
// the TSC (~10 ns), and the writer thread, which formats the line, turns the
// count into CLOCK_MONOTONIC nanoseconds: at every drain it reads both
// clocks (calibrate: the tightest of a few tries) and maps ticks through
// that latest pair at the rate measured over at least the last second (or
// since the start, early on). The lines of a drain were recorded just
// before it, so a drain's timestamps are off by the clocks' own read jitter
// (tens of ns) plus the rate's error over that short span, and the writer
// keeps `t` from ever decreasing. Elsewhere the recording thread reads
// CLOCK_MONOTONIC, as before.
// Only alloc and free lines (TraceWriter::emit_compact) are stamped this
// way; the rarer lines keep CLOCK_MONOTONIC itself, which what the library
// times by that clock relies on (the pool's sample interval).
//
// ticks() is called on every recorded event; calibrate() and
// ticks_since_start_ns() only by whoever formats lines, under the writer's output
// lock. All three are async-signal-safe (the fatal-signal flush formats).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "pending/tick_reference.h"

namespace cumemtrace::preload {

class TickClock {
 public:
  // The process's choice: the TSC when the kernel's clocksource is "tsc".
  static bool tsc_is_the_system_clock();

  // `use_tsc` false: ticks are CLOCK_MONOTONIC nanoseconds.
  TickClock(std::uint64_t start_ns, bool use_tsc);

  bool counts_tsc() const { return use_tsc_; }
  std::uint64_t start_ns() const { return start_ns_; }

  // The latest calibration, also for a process that formats these ticks
  // after this one died (contract: pending/pending_log.h): ticks map to
  // CLOCK_MONOTONIC as ns + (ticks - tsc) * ns_per_tick.
  using Reference = contract::pending::TickReference;
  Reference reference() const { return {current_.tsc, current_.ns, ns_per_tick_}; }
  static std::uint64_t monotonic_at(const Reference& ref, std::uint64_t ticks) {
    return contract::pending::monotonic_at(ref, ticks);
  }

  std::uint64_t ticks() const {
#if defined(__x86_64__)
    if (use_tsc_) return __rdtsc();
#endif
    return monotonic_ns();
  }

  // Reads both clocks: the reference for the lines formatted next.
  void calibrate();

  // Nanoseconds since the start for a ticks() value (0 for one before it).
  std::uint64_t ticks_since_start_ns(std::uint64_t ticks) const;
  // The same for a monotonic_ns() value.
  std::uint64_t monotonic_since_start_ns(std::uint64_t monotonic) const {
    return monotonic > start_ns_ ? monotonic - start_ns_ : 0;
  }

  static std::uint64_t monotonic_ns();

 private:
  struct Point {
    std::uint64_t tsc = 0;
    std::uint64_t ns = 0;
  };
  static Point read_both();

  // The rate is measured over at least this span once the trace is older.
  static constexpr std::uint64_t kRateSpanNs = 1'000'000'000;
  // read_both(): tries at most, and a pair tight enough to stop at (two
  // vDSO reads take ~50 ns undisturbed).
  static constexpr int kReadBothAttempts = 5;
  static constexpr std::uint64_t kTightPairNs = 200;

  const std::uint64_t start_ns_;
  const bool use_tsc_;
  Point anchor_;   // where the rate's span starts
  Point current_;  // the latest pair: ticks map through it
  double ns_per_tick_ = 0;
  std::uint64_t rate_span_ns_ = 0;  // the span ns_per_tick_ was measured over
};

}  // namespace cumemtrace::preload
