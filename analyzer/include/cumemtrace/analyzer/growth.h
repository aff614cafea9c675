// Growth leaks: call sites whose live bytes rise from one iteration to the
// next. See analyzer/REPORT_FORMAT.md ("Iterations and growth leaks") for the
// rules in words; in short:
//
// Threads. Iterations are found per thread, from that thread's own marks and
// allocations, and each thread's allocations are judged by its own
// iterations (the bytes an allocation holds count for the thread that made
// it, whoever frees it). Two threads running the same loop interleave
// differently on every run; a thread's own sequence does not (issue 32: one
// sequence for the whole process gave a different verdict run to run).
// A thread with neither repeating marks nor a period of its own is judged
// by the marks of the other threads (a helper such as autograd's backward
// thread, which works while the marking thread waits).
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
// not a leak). The rate is the net rise per iteration; a site that grows in
// several threads is reported once, at its fastest thread's rate.
//
// A named marker (`--iteration-marker NAME`). Only marks named NAME delimit
// iterations: numbers folded on both sides, and NAME may leave off what
// follows it after a character other than a letter, digit or '_' ("step",
// "step 1" and "step #" all name "step 41"; "step" does not name "stepper").
// Other marks and the period are not used: growth is not assessed where
// that mark does not repeat 3 times.
//
// Cost. Sampling is lazy: a boundary only bumps a generation number; a site
// catches up on the boundaries it missed (its value was constant over them)
// the next time it changes, or at the end. Per event that is one comparison
// and, per allocation, one lookup of the (thread, site) pair; per site and
// iteration candidate a few counters (no history). Detecting a period needs
// the first allocations: at most kDetectionWindow of them (and their frees)
// are buffered per thread, then replayed once a period is found.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/address_map.h"

namespace cumemtrace::analyzer {

// How one thread's iterations were delimited.
struct ThreadIterations {
  enum class Source { none, marks, period };
  Source source = Source::none;
  std::string mark;                 // the folded mark name ("step #") when source == marks
  std::uint64_t count = 0;          // iteration boundaries seen
  std::uint64_t period_allocs = 0;  // allocations per iteration when source == period
  bool other_threads_marks = false;  // source == marks: pushed by other threads, not this one
  std::uint64_t tid = 0;
};

// The iterations of the whole trace: the fields of ThreadIterations are those
// of the main thread (the one whose growth leak is largest, else the one with
// the most iterations); `threads` lists every thread that allocated and had
// iterations, by tid.
struct IterationInfo : ThreadIterations {
  std::vector<ThreadIterations> threads;
  std::uint64_t threads_without = 0;  // threads that allocated without iterations: not judged
  std::string marker;                 // --iteration-marker NAME as given; empty: not given
  std::uint64_t marker_count = 0;     // pushes and instants of that mark, all threads
};

std::string_view name(IterationInfo::Source source);

// Why iterations delimited by `--iteration-marker marker` were not found,
// its mark having been pushed `count` times ("no mark or NVTX range named
// 'step' (--iteration-marker)").
std::string unassessed_marker_reason(std::string_view marker, std::uint64_t count);

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
  std::uint64_t tid = 0;                  // the thread whose iterations these are
  std::uint64_t threads = 1;              // threads in which the site grows
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

// One thread's iterations and its sites' series. Sites are local: the
// tracker's index of a (thread, site) pair, whose live bytes are the bytes
// that thread allocated there and are still live.
class ThreadGrowth {
 public:
  static constexpr std::size_t kMaxMarkNames = 8;
  static constexpr std::size_t kDetectionWindow = 65536;  // allocations
  static constexpr std::size_t kMaxDetectionWindows = 4;
  static constexpr std::uint64_t kMinMarkOccurrences = 3;
  // How much more frequent than a counting mark name another must be to
  // delimit iterations in its place (chosen_mark()).
  static constexpr std::uint64_t kFarMoreFrequent = 8;

  struct LocalSite {
    std::uint64_t live_bytes = 0;
    std::uint64_t stack = 0;
    std::uint32_t generation = 0;  // sites start at 0, so each catches up at its first change
  };

  // `marks_only`: iterations come from marks alone (a named marker), never
  // from a period.
  explicit ThreadGrowth(bool marks_only = false);

  // A push or instant mark, its name folded ("step #") and its numbers;
  // `own`: this thread's, else another thread's.
  void on_mark(const std::string& folded, std::vector<std::uint64_t>& numbers, bool own);

  // A new local site for `stack`; returns its index.
  std::uint32_t add_site(std::uint64_t stack) {
    sites_.push_back(LocalSite{0, stack, 0});
    return static_cast<std::uint32_t>(sites_.size() - 1);
  }

  // An allocation by this thread from local site `site` (it may be an
  // iteration boundary), or `bytes` it allocated there freed.
  void on_alloc(std::uint32_t site, std::uint64_t stack, std::uint64_t bytes) {
    ++allocs_;
    if (detecting_ && window_allocs_.size() >= kDetectionWindow) end_window();
    if (detecting_) {
      window_allocs_.push_back(WindowAlloc{stack, bytes});
    } else if (period_active_ && is_period_boundary(stack, bytes)) {
      ++boundaries_[kPeriod];
      ++generation_;
    }
    change(site, static_cast<std::int64_t>(bytes), true);
  }
  void on_free(std::uint32_t site, std::uint64_t bytes) {
    const std::uint64_t live = sites_[site].live_bytes;
    change(site, -static_cast<std::int64_t>(bytes < live ? bytes : live), false);
  }

  std::uint64_t allocs() const { return allocs_; }

  // How iterations were delimited and the growth leaks, as of now. Does not
  // change the tracker (the end of a short trace is handled on a copy).
  // Leaks carry no tid.
  void result(ThreadIterations& iterations, std::vector<GrowthLeak>& leaks) const;

 private:
  // Own mark names, the other threads' mark names, the period.
  static constexpr std::size_t kForeignMarks = kMaxMarkNames;
  static constexpr std::size_t kPeriod = 2 * kMaxMarkNames;
  static constexpr std::size_t kCandidates = kPeriod + 1;

  // The mark names one thread follows (its own, or the other threads').
  struct MarkNames {
    std::array<std::string, kMaxMarkNames> names;
    std::array<std::uint64_t, kMaxMarkNames> counts{};
    // The numbers in each name's last occurrence, and whether every occurrence
    // so far had numbers greater (compared in order) than the one before.
    std::array<std::vector<std::uint64_t>, kMaxMarkNames> numbers;
    std::array<bool, kMaxMarkNames> counts_up{};
    std::size_t size = 0;
    // The slot of `folded`, added if there is room; kMaxMarkNames if not.
    std::size_t note(const std::string& folded, std::vector<std::uint64_t>& numbers_now);
    // The name that delimits iterations, or -1. Among the names seen often
    // enough: the most frequent one whose numbers count up ("step 7", "step
    // 8", ...), unless a name whose numbers repeat ("layer 0" .. "layer 31"
    // again and again) or that has none is kFarMoreFrequent times as
    // frequent; then the most frequent of those; names of C++ functions (a
    // library's ranges, such as CUB's "cub::DeviceRadixSort::SortPairs",
    // seen in a real PyTorch run between its "sample N" marks) only when
    // there is nothing else. Ties go to the first seen.
    int chosen() const;
  };

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
  // Site `site` changes by `delta` bytes; `is_alloc`: the change is the
  // allocation on_alloc was called for. Inline test, rare out-of-line work.
  void change(std::uint32_t site, std::int64_t delta, bool is_alloc) {
    LocalSite& s = sites_[site];
    if (s.generation != generation_ || detecting_) on_change(site, s, delta, is_alloc);
    s.live_bytes = static_cast<std::uint64_t>(static_cast<std::int64_t>(s.live_bytes) + delta);
  }
  void on_change(std::uint32_t site, LocalSite& s, std::int64_t delta, bool is_alloc);
  // Samples `site`, which held `live_bytes`, at the boundaries of `candidate` it missed.
  void catch_up(std::size_t candidate, std::uint32_t site, std::uint64_t live_bytes);
  void stop_detecting();
  // The window is full: look for a period; without one, try the next window.
  void end_window();
  Period detect_period() const;
  // Runs the window's changes through `series` (the period's), starting
  // from each site's live bytes before the window; returns the boundaries.
  std::uint64_t replay_window(const Period& period, std::vector<GrowthSeries>& series) const;

  std::uint32_t generation_ = 1;
  std::array<std::uint64_t, kCandidates> boundaries_{};
  std::array<std::vector<GrowthSeries>, kCandidates> series_;
  MarkNames own_marks_, foreign_marks_;
  std::vector<LocalSite> sites_;
  std::uint64_t allocs_ = 0;

  bool detecting_ = true;
  std::size_t windows_tried_ = 0;
  std::vector<WindowAlloc> window_allocs_;
  std::vector<WindowChange> window_changes_;
  bool period_active_ = false;
  Period period_;
  std::uint64_t period_alloc_index_ = 0;
};

// Every thread's ThreadGrowth, and which (thread, site) each allocation
// counts for.
class GrowthTracker {
 public:
  // --iteration-marker NAME (before the first event): only that mark
  // delimits iterations.
  void set_iteration_marker(std::string_view name);

  // A `mark` event; pushes and instants of a tracked name are boundaries.
  void on_mark(std::uint64_t tid, std::string_view name, std::string_view kind);

  // An allocation of `bytes` by thread `tid` from call site `site` (the
  // Analysis' index of `stack`). Returns the key its free passes back.
  std::uint32_t on_alloc(std::uint64_t tid, std::uint32_t site, std::uint64_t stack, std::uint64_t bytes) {
    const std::uint32_t thread = thread_index(tid);
    ThreadGrowth& t = *threads_[thread];
    bool is_new = false;
    std::uint32_t& key = keys_.find_or_insert((static_cast<std::uint64_t>(thread) << 32) | site, is_new);
    if (is_new) {
      key = static_cast<std::uint32_t>(key_places_.size());
      key_places_.push_back(KeyPlace{thread, t.add_site(stack)});
    }
    const KeyPlace place = key_places_[key];
    t.on_alloc(place.local, stack, bytes);
    return key;
  }
  // `bytes` allocated under `key` freed (by any thread).
  void on_free(std::uint32_t key, std::uint64_t bytes) {
    const KeyPlace place = key_places_[key];
    threads_[place.thread]->on_free(place.local, bytes);
  }

  // How iterations were delimited and the growth leaks, as of now.
  GrowthResult result() const;

 private:
  struct KeyPlace {
    std::uint32_t thread;
    std::uint32_t local;
  };
  std::uint32_t thread_index(std::uint64_t tid) {
    if (tid == last_tid_ && !threads_.empty()) return last_thread_;
    return find_thread(tid);
  }
  std::uint32_t find_thread(std::uint64_t tid);
  // Whether a mark whose folded name is `folded` is the named marker's.
  bool names_marker(const std::string& folded) const;

  std::vector<std::unique_ptr<ThreadGrowth>> threads_;
  std::vector<std::uint64_t> thread_ids_;
  AddressMap<std::uint32_t> thread_of_tid_;
  std::uint64_t last_tid_ = 0;
  std::uint32_t last_thread_ = 0;
  AddressMap<std::uint32_t> keys_;  // (thread << 32 | site) -> key
  std::vector<KeyPlace> key_places_;
  std::string marker_;                  // as given; empty: none
  std::string folded_marker_;           // fold_numbers(marker_)
  std::uint64_t marker_count_ = 0;
  std::string folded_;                  // scratch
  std::vector<std::uint64_t> numbers_;  // scratch
};

}  // namespace cumemtrace::analyzer
