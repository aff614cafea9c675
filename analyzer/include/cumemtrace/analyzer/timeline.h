// Allocated and reserved memory per device over time, with the trace's marks
// and out-of-memory failures, from the same single pass as the Analysis:
//
//   Analysis analysis;
//   TimelineCollector timeline({.buckets = 2000});
//   while (const TraceEvent* e = reader.next()) {
//     analysis.consume(*e);
//     timeline.consume(*e, analysis);   // reads the analysis' new totals
//   }
//
// The values are the Analysis' own (allocated: live `alloc` sizes, reserved:
// live segments), read after each event, so a timeline's maximum is exactly
// the report's peak, at the same `t`.
//
// Two modes:
// - exact (buckets == 0): every change goes to a TimelineSink as it happens,
//   in trace order; nothing is kept, so memory does not grow with the trace.
// - resampled (buckets == N): time is cut into at most N equal buckets and
//   each keeps the moment its allocated memory peaked (and, if reserved
//   peaked at another moment, that one too), so no peak is ever lost.
//   A single pass cannot know the trace's duration in advance, so buckets
//   adapt: they start 1 ns wide from the first change; when an event falls
//   past the last bucket, every bucket doubles in width and neighbours merge
//   (each pair keeps the larger maximum). At the end between N/2 and N
//   buckets are in use. Memory: N buckets per device, whatever the trace's
//   length; cost: O(N log(duration)) merges in all.
// Marks and OOMs are kept (up to a limit, the rest counted) in both modes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_event.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer {

// One device's memory right after the event at `t`: a real state of the
// trace, never an average.
struct TimelineSample {
  std::uint64_t t = 0;
  int dev = 0;
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  // The driver's graph memory pool on `dev` (graph_mem), a part of
  // `reserved`; empty until the device reports graph memory, so traces
  // without CUDA graphs keep their timelines as they were. Resampled, it is
  // read at the moments kept for allocated and reserved, so a short graph
  // memory peak that is not also a reserved peak may not show.
  std::optional<std::uint64_t> graph_reserved;
  bool operator==(const TimelineSample&) const = default;
};

// The pool's cached free memory at one moment (`pool` events, and the pool's
// view that every `oom` event carries).
struct CacheSample {
  std::uint64_t t = 0;
  int dev = 0;
  std::uint64_t cached_free = 0;
  std::uint64_t largest_free = 0;
  // 1 - largest_free/cached_free: how scattered the cache is (DESIGN.md);
  // 0 when nothing is cached.
  double scattered() const {
    if (cached_free == 0 || largest_free >= cached_free) return 0.0;
    return 1.0 - static_cast<double>(largest_free) / static_cast<double>(cached_free);
  }
};

struct TimelineMark {
  std::uint64_t t = 0;
  std::uint64_t tid = 0;
  std::string kind;  // push, pop, instant (or whatever the trace says)
  std::string name;
};

struct TimelineOom {
  std::uint64_t t = 0;
  std::uint64_t tid = 0;
  int dev = 0;
  std::string api;
  std::uint64_t size = 0;
  std::optional<std::uint64_t> block;
  std::string cause;
  std::uint64_t stack = 0;
  // The analysis' totals on `dev` at that moment.
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  // The pool's own view, as the event reports it.
  std::uint64_t cached_free = 0;
  std::uint64_t largest_free = 0;
  std::uint64_t device_free = 0;
  std::uint64_t device_total = 0;
};

// Receives a timeline in time order.
class TimelineSink {
 public:
  virtual ~TimelineSink() = default;
  virtual void sample(const TimelineSample& sample) = 0;
  virtual void mark(const TimelineMark&) {}
  virtual void oom(const TimelineOom&) {}
};

struct TimelineOptions {
  std::size_t buckets = 0;          // 0: exact (every change, to the sink)
  std::size_t max_marks = 100000;   // marks kept; later ones are only counted
  std::size_t max_ooms = 10000;     // the same for OOMs
  // Resampled mode: each bucket also keeps the moments its allocated and
  // reserved memory were lowest, so a drawn line dips where the trace did
  // (the Perfetto export); `timeline` and the HTML charts keep maxima only.
  bool keep_minima = false;
};

class TimelineCollector {
 public:
  // `sink` receives samples, marks and OOMs as they happen in exact mode; it
  // may be null (resampled mode, or exact mode for marks and OOMs only).
  explicit TimelineCollector(TimelineOptions options, TimelineSink* sink = nullptr);

  // Call right after analysis.consume(event), with the same event.
  void consume(const TraceEvent& event, const Analysis& analysis);

  // Resampled mode: the kept samples of every device, then the marks and
  // OOMs, merged in time order (samples first at equal times). Each device
  // ends with its state at the last change, if the buckets did not end there.
  void replay(TimelineSink& sink) const;

  // Resampled mode: the kept samples in time order, per device.
  std::map<int, std::vector<TimelineSample>> samples_by_device() const;
  // Resampled mode: per device, the most scattered pool sample of each bucket.
  std::map<int, std::vector<CacheSample>> pool_by_device() const;

  const std::vector<TimelineMark>& marks() const { return marks_; }
  const std::vector<TimelineOom>& ooms() const { return ooms_; }
  std::uint64_t marks_omitted() const { return marks_omitted_; }
  std::uint64_t ooms_omitted() const { return ooms_omitted_; }
  std::vector<int> devices() const;  // every device whose memory changed, sorted
  std::uint64_t last_t() const { return last_t_; }  // of the last event with a time
  std::uint64_t bucket_ns() const { return width_; }
  const TimelineOptions& options() const { return options_; }

 private:
  struct SampleBucket {
    bool used = false;
    TimelineSample at_allocated_max;
    TimelineSample at_reserved_max;
    TimelineSample at_allocated_min;  // kept with options_.keep_minima
    TimelineSample at_reserved_min;
  };
  struct PoolBucket {
    bool used = false;
    CacheSample most_scattered;
  };
  struct Device {
    int dev = 0;
    const MemoryTotals* totals = nullptr;  // inside Analysis::devices(): map nodes never move
    std::uint64_t allocated = 0;            // as last recorded
    std::uint64_t reserved = 0;
    std::optional<std::uint64_t> graph_reserved;
    TimelineSample last;  // the latest state, for the end of a resampled series
    bool changed = false;  // its memory changed at least once
    std::vector<SampleBucket> buckets;
    std::vector<PoolBucket> pool_buckets;
  };

  Device& device(int dev);
  void track_new_devices(const Analysis& analysis);
  void record_changes(std::uint64_t t, const GraphTracker& graphs);
  void record_pool(const CacheSample& sample);
  std::size_t bucket_index(std::uint64_t t);
  void widen_buckets();
  void add_mark(const TraceEvent& e);
  void add_oom(const TraceEvent& e);

  TimelineOptions options_;
  TimelineSink* sink_;
  std::vector<Device> devices_;  // few: searched linearly
  std::size_t tracked_ = 0;      // devices_ entries linked to the analysis' totals
  std::vector<TimelineMark> marks_;
  std::vector<TimelineOom> ooms_;
  std::uint64_t marks_omitted_ = 0;
  std::uint64_t ooms_omitted_ = 0;
  std::uint64_t last_t_ = 0;
  bool started_ = false;    // t0_ is set
  std::uint64_t t0_ = 0;    // where bucket 0 starts
  std::uint64_t width_ = 1; // bucket width in ns (a power of two)
};

enum class TimelineFormat { csv, json };

struct TimelineWriteSummary {
  std::uint64_t samples = 0;  // rows of memory samples written
  std::uint64_t marks_omitted = 0;
  std::uint64_t ooms_omitted = 0;
};

// `cumemtrace timeline`: reads the rest of `reader` and writes the timeline
// (EXPORT_FORMATS.md), streaming when `buckets` is 0, resampled otherwise.
TimelineWriteSummary write_timeline(TraceReader& reader, TimelineFormat format, std::size_t buckets,
                                    std::ostream& out);

}  // namespace cumemtrace::analyzer
