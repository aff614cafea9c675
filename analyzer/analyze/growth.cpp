#include "cumemtrace/analyzer/growth.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <tuple>

namespace cumemtrace::analyzer {

namespace {
// A periodic suffix must repeat this share of its symbols one period back.
constexpr std::uint64_t kMatchPercent = 90;
// The quick test of a candidate period P looks at the last 3P allocations
// (the least a periodic suffix spans), at least kMinTailCheck and at most
// kMaxTailCheck of them: the loop runs until the window's end.
constexpr std::size_t kMinTailCheck = 32;
constexpr std::size_t kMaxTailCheck = 256;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Iteration marks usually carry their number: "step 41" -> "step #".
void fold_digits(std::string_view name, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!is_digit(name[i])) out += name[i];
    else if (i == 0 || !is_digit(name[i - 1])) out += '#';
  }
}

// The numbers in a mark's name, in order ("epoch 2 step 17" -> 2, 17);
// saturating, so an absurdly long digit run cannot overflow.
void numbers_in(std::string_view name, std::vector<std::uint64_t>& out) {
  out.clear();
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!is_digit(name[i])) continue;
    if (i == 0 || !is_digit(name[i - 1])) out.push_back(0);
    std::uint64_t& n = out.back();
    const auto digit = static_cast<std::uint64_t>(name[i] - '0');
    n = n > (UINT64_MAX - digit) / 10 ? UINT64_MAX : n * 10 + digit;
  }
}

bool enough_matches(std::uint64_t matches, std::uint64_t total) { return matches * 100 >= total * kMatchPercent; }

// Out of line: the resize would otherwise crowd the registers of the hot
// path it sits in (GrowthTracker::on_change).
[[gnu::noinline]] void make_room(std::vector<GrowthSeries>& series, std::uint32_t site) { series.resize(site + 1); }

// GrowthSeries::sample for k > 0, inlined where a site catches up: that runs
// once per site and iteration, a large share of all events on a short loop.
// Reads `steps != 0` for `started` (the same, see GrowthSeries), and counts a
// rise or a fall without branching on which (as random as the sites' values),
// so that the common case touches one cache line and mispredicts nothing.
// Unsigned wrap-around keeps the sums exact.
[[gnu::always_inline]] inline void add_samples(GrowthSeries& g, std::uint64_t value, std::uint64_t k) {
  const std::uint64_t last = g.last;
  if (g.seen > 0 && (g.steps != 0 || value != last)) {
    if (g.steps == 0) [[unlikely]] {
      g.started = true;
      g.baseline = last;
      g.start_boundary = g.seen - 1;
    }
    ++g.steps;
    // 0 or 1, and masks of all zeros or all ones (GCC turns ?: back into
    // branches here).
    const std::uint64_t up = value > last;
    const std::uint64_t down = value < last;
    if (g.ups == 0 && up != 0) [[unlikely]] g.first_rise = g.seen;  // ups == 0: only until the first rise
    g.last_rise += (g.seen - g.last_rise) & (0 - up);
    g.ups += up;
    g.up_total += (value - last) & (0 - up);
    g.downs += down;
    g.down_total += (last - value) & (0 - down);
  }
  g.last = value;
  if (g.steps != 0) g.steps += k - 1;  // the value held over the other boundaries
  g.seen += k;
}

}  // namespace

std::string fold_numbers(std::string_view name) {
  std::string out;
  fold_digits(name, out);
  return out;
}

std::string_view name(IterationInfo::Source source) {
  switch (source) {
    case IterationInfo::Source::marks: return "marks";
    case IterationInfo::Source::period: return "period";
    case IterationInfo::Source::none: break;
  }
  return "none";
}

void GrowthSeries::sample(std::uint64_t value, std::uint64_t k) {
  if (k != 0) add_samples(*this, value, k);
}

bool GrowthSeries::is_growth_leak() const {
  if (!started || ups < 3 || last <= baseline) return false;
  // Kept at least three quarters of what it gained: not a site that rises
  // and falls back within a few iterations.
  if ((last - baseline) * 4 < up_total * 3) return false;
  if (ups * 2 >= steps) return true;  // rose in most steps
  // Rose every so often: over at least half of the steps, and still at the
  // end (no longer flat than two mean gaps between rises).
  const std::uint64_t span = last_rise - first_rise;
  const std::uint64_t flat_tail = seen - 1 - last_rise;
  return span * 2 >= steps && flat_tail * (ups - 1) <= 2 * span;
}

void GrowthTracker::on_mark(std::uint64_t tid, std::string_view name, std::string_view kind) {
  if (kind != "push" && kind != "instant") return;
  fold_digits(name, folded_);
  if (!marker_.empty()) {
    if (!names_marker(folded_)) return;  // only the named marker delimits iterations
    ++marker_count_;
  }
  numbers_in(name, numbers_);
  const std::uint32_t own = thread_index(tid);
  // Each thread also follows the others' marks, for when it has no
  // iterations of its own; marks are rare next to allocations.
  for (std::uint32_t t = 0; t < threads_.size(); ++t) threads_[t]->on_mark(folded_, numbers_, t == own);
}

std::string unassessed_marker_reason(std::string_view marker, std::uint64_t count) {
  const std::string named = "'" + std::string(marker) + "' (--iteration-marker)";
  if (count == 0) return "no mark or NVTX range named " + named;
  if (count < ThreadGrowth::kMinMarkOccurrences) {
    return "the mark " + named + " was pushed " + std::to_string(count) + (count == 1 ? " time" : " times") +
           ", and iterations need " + std::to_string(ThreadGrowth::kMinMarkOccurrences);
  }
  return "the mark " + named + " was pushed " + std::to_string(count) + " times, but no thread allocated while " +
         std::to_string(ThreadGrowth::kMinMarkOccurrences) + " of them passed";
}

void GrowthTracker::set_iteration_marker(std::string_view name) {
  marker_ = std::string(name);
  fold_digits(name, folded_marker_);
}

bool GrowthTracker::names_marker(const std::string& folded) const {
  const std::string& m = folded_marker_;
  if (folded.compare(0, m.size(), m) != 0) return false;
  if (folded.size() == m.size()) return true;
  const unsigned char next = static_cast<unsigned char>(folded[m.size()]);
  return !std::isalnum(next) && next != '_';
}

ThreadGrowth::ThreadGrowth(bool marks_only) {
  if (marks_only) {
    detecting_ = false;
    return;
  }
  window_allocs_.reserve(1024);
  window_changes_.reserve(2048);
}

std::uint64_t ThreadGrowth::symbol(std::uint64_t stack, std::uint64_t size, bool by_stack_only) {
  std::uint64_t h = (stack + 1) * 0x9E3779B97F4A7C15ull;
  if (!by_stack_only) h ^= (size + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
  return h;
}

std::size_t ThreadGrowth::MarkNames::note(const std::string& folded, std::vector<std::uint64_t>& numbers_now) {
  std::size_t c = 0;
  while (c < size && names[c] != folded) ++c;
  if (c == size) {
    if (size == kMaxMarkNames) return kMaxMarkNames;  // only the first few names are followed
    names[size++] = folded;
    counts_up[c] = !numbers_now.empty();
  } else if (counts_up[c]) {
    // Same folded name, so as many numbers as before.
    counts_up[c] = numbers[c] < numbers_now;
  }
  numbers[c] = numbers_now;
  ++counts[c];
  return c;
}

void ThreadGrowth::on_mark(const std::string& folded, std::vector<std::uint64_t>& numbers, bool own) {
  MarkNames& marks = own ? own_marks_ : foreign_marks_;
  const std::size_t c = marks.note(folded, numbers);
  if (c == kMaxMarkNames) return;
  ++boundaries_[own ? c : kForeignMarks + c];
  ++generation_;
  // The thread's own marks win over its period; the other threads' do not.
  if (own && marks.counts[c] >= kMinMarkOccurrences && detecting_) stop_detecting();
}

void ThreadGrowth::stop_detecting() {
  detecting_ = false;
  std::vector<WindowAlloc>().swap(window_allocs_);
  std::vector<WindowChange>().swap(window_changes_);
}

inline void ThreadGrowth::catch_up(std::size_t candidate, std::uint32_t site, std::uint64_t live_bytes) {
  std::vector<GrowthSeries>& series = series_[candidate];
  if (site >= series.size()) [[unlikely]] make_room(series, site);
  GrowthSeries& g = series[site];
  const std::uint64_t boundaries = boundaries_[candidate];
  if (boundaries > g.seen) add_samples(g, live_bytes, boundaries - g.seen);
}

// Runs once per site and iteration (its first change after a boundary): a
// large share of all events on a short loop, hence one function with the
// sampling inlined.
void ThreadGrowth::on_change(std::uint32_t site, LocalSite& s, std::int64_t delta, bool is_alloc) {
  if (s.generation != generation_) {
    s.generation = generation_;
    for (std::size_t c = 0; c < own_marks_.size; ++c) catch_up(c, site, s.live_bytes);
    for (std::size_t c = 0; c < foreign_marks_.size; ++c) catch_up(kForeignMarks + c, site, s.live_bytes);
    if (period_active_) catch_up(kPeriod, site, s.live_bytes);
  }
  if (detecting_) window_changes_.push_back(WindowChange{site, is_alloc, delta});
}

ThreadGrowth::Period ThreadGrowth::detect_period() const {
  const std::size_t n = window_allocs_.size();
  if (n < 8) return {};
  const std::size_t max_period = n / 4;  // at least four periods in the window
  std::vector<std::uint64_t> syms(n);
  for (const bool by_stack_only : {false, true}) {
    if (by_stack_only && std::all_of(window_allocs_.begin(), window_allocs_.end(),
                                     [&](const WindowAlloc& a) { return a.stack == window_allocs_[0].stack; })) {
      break;  // one stack (or none captured): sizes were all there was
    }
    for (std::size_t i = 0; i < n; ++i) syms[i] = symbol(window_allocs_[i].stack, window_allocs_[i].size, by_stack_only);

    // Candidate periods: distances between consecutive allocations of the
    // same symbol; the loop's length is one of them when some symbol occurs
    // once per iteration (the delimiter needs such a symbol anyway).
    std::vector<std::uint32_t> distance_count(max_period + 1, 0);
    AddressMap<std::size_t> last_seen;
    for (std::size_t i = 0; i < n; ++i) {
      if (std::size_t* last = last_seen.find(syms[i])) {
        const std::size_t d = i - *last;
        if (d >= 2 && d <= max_period) ++distance_count[d];
        *last = i;
      } else {
        last_seen.insert(syms[i], i);
      }
    }

    for (std::size_t p = 2; p <= max_period; ++p) {
      if (distance_count[p] < 3) continue;
      std::uint64_t matches = 0, total = 0;
      const std::size_t tail = std::min({std::max(3 * p, kMinTailCheck), kMaxTailCheck, n - p});
      for (std::size_t i = n - tail; i < n; ++i, ++total) {
        matches += syms[i] == syms[i - p];
      }
      if (!enough_matches(matches, total)) continue;
      // The longest suffix that repeats itself one period back.
      std::size_t start = n;
      matches = total = 0;
      for (std::size_t i = n; i-- > p;) {
        ++total;
        matches += syms[i] == syms[i - p];
        if (enough_matches(matches, total)) start = i;
      }
      if (n - start < 3 * p) continue;
      // An iteration frees what it used: without frees between the
      // stretch's allocations this is a loop filling memory (an init, frees
      // at teardown), not a steady loop that may leak.
      const std::uint64_t periods = (n - start + p) / p;
      std::uint64_t frees = 0;
      std::size_t allocs_seen = 0;
      for (const WindowChange& c : window_changes_) {
        if (c.is_alloc) ++allocs_seen;
        else if (allocs_seen > start - p && allocs_seen < n && c.delta < 0) ++frees;
      }
      if (frees + 1 < periods) continue;

      Period period;
      period.length = p;
      period.by_stack_only = by_stack_only;
      // The delimiter: a symbol seen once in the last period and no more
      // often than once per period over the whole periodic stretch.
      AddressMap<std::uint64_t> in_last, in_stretch;
      auto count = [](AddressMap<std::uint64_t>& m, std::uint64_t key) {
        if (std::uint64_t* c = m.find(key)) ++*c;
        else m.insert(key, 1);
      };
      for (std::size_t i = n - p; i < n; ++i) count(in_last, syms[i]);
      for (std::size_t i = start - p; i < n; ++i) count(in_stretch, syms[i]);
      for (std::size_t i = n - p; i < n; ++i) {
        if (*in_last.find(syms[i]) == 1 && *in_stretch.find(syms[i]) <= periods + 1) {
          period.has_delimiter = true;
          period.delimiter = syms[i];
          break;
        }
      }
      return period;
    }
  }
  return {};
}

std::uint64_t ThreadGrowth::replay_window(const Period& period, std::vector<GrowthSeries>& series) const {
  // Each site's live bytes before the window: now, less the window's changes.
  std::vector<std::int64_t> value(sites_.size());
  for (std::size_t s = 0; s < sites_.size(); ++s) value[s] = static_cast<std::int64_t>(sites_[s].live_bytes);
  for (const WindowChange& c : window_changes_) value[c.site] -= c.delta;
  series.assign(sites_.size(), GrowthSeries{});
  std::uint64_t boundaries = 0;
  std::size_t alloc_index = 0;
  for (const WindowChange& c : window_changes_) {
    if (c.is_alloc && alloc_index < window_allocs_.size()) {
      const WindowAlloc& a = window_allocs_[alloc_index];
      const bool boundary = period.has_delimiter
                                ? symbol(a.stack, a.size, period.by_stack_only) == period.delimiter
                                : alloc_index % period.length == 0;
      ++alloc_index;
      if (boundary) ++boundaries;
    }
    GrowthSeries& g = series[c.site];
    if (boundaries > g.seen) g.sample(static_cast<std::uint64_t>(std::max<std::int64_t>(value[c.site], 0)), boundaries - g.seen);
    value[c.site] += c.delta;
  }
  return boundaries;
}

void ThreadGrowth::end_window() {
  const Period period = detect_period();
  if (period.length != 0) {
    boundaries_[kPeriod] = replay_window(period, series_[kPeriod]);
    period_ = period;
    period_active_ = true;
    period_alloc_index_ = window_allocs_.size();
    ++generation_;  // every site catches up on the replayed boundaries when it next changes
    stop_detecting();
    return;
  }
  if (++windows_tried_ >= kMaxDetectionWindows) {
    stop_detecting();
    return;
  }
  window_allocs_.clear();  // the loop may start later: try the next window
  window_changes_.clear();
}

int ThreadGrowth::MarkNames::chosen() const {
  int most = -1, most_counting = -1, most_op = -1;  // ties: the first seen
  const auto more_frequent = [&](std::size_t c, int than) {
    return than < 0 || counts[c] > counts[static_cast<std::size_t>(than)];
  };
  for (std::size_t c = 0; c < size; ++c) {
    if (counts[c] < kMinMarkOccurrences) continue;
    // A C++ name ("cub::DeviceRadixSort::SortPairs", PyTorch's emit_nvtx
    // "aten::mm, seq = 41"): one operation's range, not a step.
    if (names[c].find("::") != std::string::npos) {
      if (more_frequent(c, most_op)) most_op = static_cast<int>(c);
      continue;
    }
    if (more_frequent(c, most)) most = static_cast<int>(c);
    if (counts_up[c] && more_frequent(c, most_counting)) most_counting = static_cast<int>(c);
  }
  if (most < 0) return most_op;
  if (most_counting < 0) return most;
  // A name far more frequent than the counting one is more likely the
  // program's step inside a counted outer loop ("train step" inside
  // "epoch 3") than a part of a counted step.
  const std::uint64_t counting = counts[static_cast<std::size_t>(most_counting)];
  return counts[static_cast<std::size_t>(most)] >= kFarMoreFrequent * counting ? most : most_counting;
}

void ThreadGrowth::result(ThreadIterations& iterations, std::vector<GrowthLeak>& leaks) const {
  const std::vector<GrowthSeries>* series = nullptr;
  std::vector<GrowthSeries> replayed;
  std::uint64_t boundaries = 0;
  iterations = ThreadIterations{};
  const int own = own_marks_.chosen();
  const int foreign = own >= 0 ? -1 : foreign_marks_.chosen();
  if (own >= 0) {
    iterations.source = IterationInfo::Source::marks;
    iterations.mark = own_marks_.names[static_cast<std::size_t>(own)];
    series = &series_[static_cast<std::size_t>(own)];
    boundaries = boundaries_[static_cast<std::size_t>(own)];
  } else if (period_active_) {
    iterations.source = IterationInfo::Source::period;
    iterations.period_allocs = period_.length;
    series = &series_[kPeriod];
    boundaries = boundaries_[kPeriod];
  } else if (const Period period = detecting_ ? detect_period() : Period{}; period.length != 0) {
    // A short trace: its only window never filled.
    iterations.source = IterationInfo::Source::period;
    iterations.period_allocs = period.length;
    boundaries = replay_window(period, replayed);
    series = &replayed;
  } else if (foreign >= 0) {
    iterations.source = IterationInfo::Source::marks;
    iterations.other_threads_marks = true;
    iterations.mark = foreign_marks_.names[static_cast<std::size_t>(foreign)];
    series = &series_[kForeignMarks + static_cast<std::size_t>(foreign)];
    boundaries = boundaries_[kForeignMarks + static_cast<std::size_t>(foreign)];
  }
  if (series == nullptr) return;
  iterations.count = boundaries;
  for (std::size_t s = 0; s < sites_.size(); ++s) {
    GrowthSeries g = s < series->size() ? (*series)[s] : GrowthSeries{};
    if (boundaries > g.seen) g.sample(sites_[s].live_bytes, boundaries - g.seen);
    if (!g.is_growth_leak()) continue;
    GrowthLeak leak;
    leak.stack = sites_[s].stack;
    leak.iterations = g.steps;
    leak.first_live_bytes = g.baseline;
    leak.last_live_bytes = g.last;
    leak.bytes_per_iteration = (g.last - g.baseline + g.steps / 2) / g.steps;
    leak.rising_iterations = g.ups;
    leak.first_iteration = g.start_boundary;
    leaks.push_back(leak);
  }
}

}  // namespace cumemtrace::analyzer
