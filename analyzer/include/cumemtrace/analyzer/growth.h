// Growth leaks: call sites whose live bytes rise from one iteration to the
// next. See analyzer/REPORT_FORMAT.md ("Iterations and growth leaks") for the
// rules in words; in short:
//
// Iterations. A mark name repeats when, with its digit runs folded ("step 41"
// and "step 42" are both "step #"), it is pushed (or marked instant) at least
// 3 times; the most frequent such name delimits iterations (ties: the name
// seen first, usually the outer range). Without one, the period is detected
// in the sequence of allocations: each allocation is a symbol (its stack and
// size, or its stack alone when sizes vary); the smallest period P >= 2 for
// which at least 90% of a suffix of at least 3P allocations repeats the
// symbol P earlier, and which frees memory (at least one free per period), is
// the loop; each allocation of a symbol that occurs once per period marks an
// iteration boundary (else every P-th allocation).
//
// Growth. Each site's live bytes are sampled at every boundary. From the
// first boundary where they changed, a site is a growth leak when it rose in
// at least 3 steps, its net rise is at least three quarters of everything it
// rose by (so a site that goes up and down is not, however often it rises),
// and it kept rising: in at least half of the steps, or (a leak every k-th
// iteration) with rises spread over at least half of the steps and going on
// until the end (the flat stretch after the last rise at most twice the mean
// gap between rises; a cache that fills during warm-up and then stays is
// not a leak). The rate is the net rise per iteration.
//
// Cost. Sampling is lazy: a boundary only bumps a generation number; a site
// catches up on the boundaries it missed (its value was constant over them)
// the next time it changes, or at the end. Per event that is one comparison;
// per site and iteration candidate a few counters (no history). Detecting a
// period needs the first allocations: at most kDetectionWindow of them (and
// their frees) are buffered, then replayed once a period is found.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/analyzer/call_sites.h"

namespace cumemtrace::analyzer {

struct IterationInfo {
  enum class Source { none, marks, period };
  Source source = Source::none;
  std::string mark;                 // the folded mark name ("step #") when source == marks
  std::uint64_t count = 0;          // iteration boundaries seen
  std::uint64_t period_allocs = 0;  // allocations per iteration when source == period
};

std::string_view name(IterationInfo::Source source);

// "epoch 3/step 41" -> "epoch #/step #": each run of digits becomes '#'.
std::string fold_numbers(std::string_view name);

struct GrowthLeak {
  std::uint64_t stack = 0;
  std::uint64_t bytes_per_iteration = 0;  // net rise / iterations, rounded
  std::uint64_t iterations = 0;           // steps from the first change to the last boundary
  std::uint64_t first_live_bytes = 0;     // at the boundary before the first change
  std::uint64_t last_live_bytes = 0;      // at the last boundary
  std::uint64_t rising_iterations = 0;    // steps in which the site rose
  std::uint64_t first_iteration = 0;      // boundary index (from 0) where growth started
};

struct GrowthResult {
  IterationInfo iterations;
  std::vector<GrowthLeak> leaks;  // largest rate first
};

// The statistics of one site's samples, for one way of delimiting iterations.
// A site's series is updated once per iteration in which it changes, at a
// random index: what each sample updates lies in the first cache line, the
// fields set once after it.
struct alignas(64) GrowthSeries {
  std::uint64_t seen = 0;   // boundaries accounted for
  std::uint64_t last = 0;   // value at the last sample
  std::uint64_t steps = 0;  // steps since the first change (> 0 once started)
  std::uint64_t ups = 0;
  std::uint64_t downs = 0;
  std::uint64_t up_total = 0;
  std::uint64_t down_total = 0;
  std::uint64_t last_rise = 0;   // boundary index of the last and first rise
  std::uint64_t first_rise = 0;
  std::uint64_t start_boundary = 0;  // the boundary before the first change
  std::uint64_t baseline = 0;        // value before the first change
  bool started = false;              // the value changed at some boundary

  // `k` more boundaries passed while the site held `value`.
  void sample(std::uint64_t value, std::uint64_t k);
  bool is_growth_leak() const;
};

class GrowthTracker {
 public:
  static constexpr std::size_t kMaxMarkNames = 8;
  static constexpr std::size_t kDetectionWindow = 65536;  // allocations
  static constexpr std::size_t kMaxDetectionWindows = 4;
  static constexpr std::uint64_t kMinMarkOccurrences = 3;
  // How much more frequent than a counting mark name another must be to
  // delimit iterations in its place (chosen_mark()).
  static constexpr std::uint64_t kFarMoreFrequent = 8;

  GrowthTracker();

  // A `mark` event; pushes and instants of a tracked name are boundaries.
  void on_mark(std::string_view name, std::string_view kind);

  // Before an allocation is applied (it may be a boundary of the period).
  // `sites`: their live bytes now, from which a full window is replayed.
  void before_alloc(const SiteTable& sites, std::uint64_t stack, std::uint64_t size) {
    if (detecting_ && window_allocs_.size() >= kDetectionWindow) end_window(sites);
    if (detecting_) {
      window_allocs_.push_back(WindowAlloc{stack, size});
    } else if (period_active_ && is_period_boundary(stack, size)) {
      ++boundaries_[kPeriod];
      ++generation_;
    }
  }

  // Before site `site` (`s` still holds its live bytes before the change)
  // changes by `delta` bytes; `is_alloc`: the change is the allocation
  // before_alloc was just called for. Inline test, rare out-of-line work.
  void before_change(std::uint32_t site, CallSite& s, std::int64_t delta, bool is_alloc) {
    if (s.growth_generation != generation_ || detecting_) on_change(site, s, delta, is_alloc);
  }

  // How iterations were delimited and the growth leaks, as of now. Does not
  // change the tracker (the end of a short trace is handled on a copy).
  GrowthResult result(const SiteTable& sites) const;

 private:
  static constexpr std::size_t kPeriod = kMaxMarkNames;  // candidate index of the period
  static constexpr std::size_t kCandidates = kMaxMarkNames + 1;

  struct WindowAlloc {
    std::uint64_t stack;
    std::uint64_t size;
  };
  struct WindowChange {
    std::uint32_t site;
    bool is_alloc;
    std::int64_t delta;
  };
  struct Period {
    std::uint64_t length = 0;  // allocations; 0: none found
    bool by_stack_only = false;
    bool has_delimiter = false;
    std::uint64_t delimiter = 0;  // symbol of the once-per-period allocation
  };

  static std::uint64_t symbol(std::uint64_t stack, std::uint64_t size, bool by_stack_only);
  bool is_period_boundary(std::uint64_t stack, std::uint64_t size) {
    const std::uint64_t n = period_alloc_index_++;
    if (period_.has_delimiter) return symbol(stack, size, period_.by_stack_only) == period_.delimiter;
    return n % period_.length == 0;
  }
  void on_change(std::uint32_t site, CallSite& s, std::int64_t delta, bool is_alloc);
  // Samples `site`, which held `live_bytes`, at the boundaries of `candidate` it missed.
  void catch_up(std::size_t candidate, std::uint32_t site, std::uint64_t live_bytes);
  void stop_detecting();
  // The window is full: look for a period; without one, try the next window.
  void end_window(const SiteTable& sites);
  Period detect_period() const;
  // Runs the window's changes through `series` (the period's), starting
  // from each site's live bytes before the window; returns the boundaries.
  std::uint64_t replay_window(const Period& period, const SiteTable& sites,
                              std::vector<GrowthSeries>& series) const;
  // The tracked mark name that delimits iterations, or -1. Among the names
  // seen often enough: the most frequent one whose numbers count up ("step
  // 7", "step 8", ...), unless a name whose numbers repeat ("layer 0" ..
  // "layer 31" again and again) or that has none is kFarMoreFrequent times
  // as frequent; then the most frequent of those; names of C++ functions
  // (a library's ranges, such as CUB's "cub::DeviceRadixSort::SortPairs",
  // seen in a real PyTorch run between its "sample N" marks) only when there
  // is nothing else. Ties go to the first seen.
  int chosen_mark() const;

  std::uint32_t generation_ = 1;  // sites start at 0, so each catches up at its first change
  std::array<std::uint64_t, kCandidates> boundaries_{};
  std::array<std::vector<GrowthSeries>, kCandidates> series_;
  std::array<std::string, kMaxMarkNames> mark_names_;
  std::array<std::uint64_t, kMaxMarkNames> mark_counts_{};
  // The numbers in each name's last occurrence, and whether every occurrence
  // so far had numbers greater (compared in order) than the one before.
  std::array<std::vector<std::uint64_t>, kMaxMarkNames> mark_numbers_;
  std::array<bool, kMaxMarkNames> mark_counts_up_{};
  std::vector<std::uint64_t> numbers_;  // scratch
  std::size_t mark_name_count_ = 0;
  std::string folded_;  // scratch

  bool detecting_ = true;
  std::size_t windows_tried_ = 0;
  std::vector<WindowAlloc> window_allocs_;
  std::vector<WindowChange> window_changes_;
  bool period_active_ = false;
  Period period_;
  std::uint64_t period_alloc_index_ = 0;
};

}  // namespace cumemtrace::analyzer
