#include "cumemtrace/analyzer/timeline.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <tuple>

namespace cumemtrace::analyzer {

namespace {

// The earlier sample wins a tie, as a peak's time is when it was first
// reached (Watermark) -- unless both have the same time: then the later one
// is the state once that moment's events are all done (a free and its
// segment_free share a time; the state between them is not worth showing).
TimelineSample higher_allocated(const TimelineSample& earlier, const TimelineSample& later) {
  const bool later_wins = later.allocated > earlier.allocated ||
                          (later.allocated == earlier.allocated && later.t == earlier.t);
  return later_wins ? later : earlier;
}
TimelineSample higher_reserved(const TimelineSample& earlier, const TimelineSample& later) {
  const bool later_wins = later.reserved > earlier.reserved ||
                          (later.reserved == earlier.reserved && later.t == earlier.t);
  return later_wins ? later : earlier;
}

// The same for the lowest moments (TimelineOptions::keep_minima).
TimelineSample lower_allocated(const TimelineSample& earlier, const TimelineSample& later) {
  const bool later_wins = later.allocated < earlier.allocated ||
                          (later.allocated == earlier.allocated && later.t == earlier.t);
  return later_wins ? later : earlier;
}
TimelineSample lower_reserved(const TimelineSample& earlier, const TimelineSample& later) {
  const bool later_wins = later.reserved < earlier.reserved ||
                          (later.reserved == earlier.reserved && later.t == earlier.t);
  return later_wins ? later : earlier;
}

}  // namespace

TimelineCollector::TimelineCollector(TimelineOptions options, TimelineSink* sink)
    : options_(options), sink_(sink) {}

TimelineCollector::Device& TimelineCollector::device(int dev) {
  for (Device& d : devices_) {
    if (d.dev == dev) return d;
  }
  Device& d = devices_.emplace_back();
  d.dev = dev;
  d.last.dev = dev;
  d.buckets.resize(options_.buckets);
  d.pool_buckets.resize(options_.buckets);
  return d;
}

void TimelineCollector::track_new_devices(const Analysis& analysis) {
  for (const auto& [dev, info] : analysis.devices()) {
    Device& d = device(dev);
    if (d.totals == nullptr) {
      d.totals = &info.memory;
      ++tracked_;
    }
  }
}

std::size_t TimelineCollector::bucket_index(std::uint64_t t) {
  if (!started_) {
    started_ = true;
    t0_ = t;
  }
  // Lines are in time order, but a damaged trace may step back: such an
  // event counts in the first bucket rather than being lost.
  const std::uint64_t offset = t > t0_ ? t - t0_ : 0;
  const std::uint64_t capacity = options_.buckets;
  while (offset / width_ >= capacity) {
    if (width_ > std::numeric_limits<std::uint64_t>::max() / 2) return capacity - 1;
    widen_buckets();
  }
  return static_cast<std::size_t>(offset / width_);
}

void TimelineCollector::widen_buckets() {
  width_ *= 2;
  const std::size_t capacity = options_.buckets;
  const std::size_t half = (capacity + 1) / 2;
  // Bucket j of the new width covers old buckets 2j and 2j+1; writing j only
  // after reading 2j and 2j+1 (both >= j) lets this work in place.
  for (Device& d : devices_) {
    for (std::size_t j = 0; j < half; ++j) {
      SampleBucket merged = d.buckets[2 * j];
      PoolBucket merged_pool = d.pool_buckets[2 * j];
      if (2 * j + 1 < capacity) {
        const SampleBucket& next = d.buckets[2 * j + 1];
        if (next.used) {
          if (!merged.used) {
            merged = next;
          } else {
            merged.at_allocated_max = higher_allocated(merged.at_allocated_max, next.at_allocated_max);
            merged.at_reserved_max = higher_reserved(merged.at_reserved_max, next.at_reserved_max);
            merged.at_allocated_min = lower_allocated(merged.at_allocated_min, next.at_allocated_min);
            merged.at_reserved_min = lower_reserved(merged.at_reserved_min, next.at_reserved_min);
          }
        }
        const PoolBucket& next_pool = d.pool_buckets[2 * j + 1];
        if (next_pool.used && (!merged_pool.used || next_pool.most_scattered.scattered() >
                                                        merged_pool.most_scattered.scattered())) {
          merged_pool = next_pool;
        }
      }
      d.buckets[j] = merged;
      d.pool_buckets[j] = merged_pool;
    }
    std::fill(d.buckets.begin() + static_cast<std::ptrdiff_t>(half), d.buckets.end(), SampleBucket{});
    std::fill(d.pool_buckets.begin() + static_cast<std::ptrdiff_t>(half), d.pool_buckets.end(), PoolBucket{});
  }
}

void TimelineCollector::record_changes(std::uint64_t t, const GraphTracker& graphs) {
  for (std::size_t k = 0; k < devices_.size(); ++k) {
    Device* d = &devices_[k];
    if (d->totals == nullptr) continue;
    const std::uint64_t allocated = d->totals->allocated.current;
    const std::uint64_t reserved = d->totals->reserved.current;
    std::optional<std::uint64_t> graph_reserved;
    if (auto it = graphs.memory().find(d->dev); it != graphs.memory().end()) graph_reserved = it->second.reserved;
    if (allocated == d->allocated && reserved == d->reserved && graph_reserved == d->graph_reserved) continue;
    d->allocated = allocated;
    d->reserved = reserved;
    d->graph_reserved = graph_reserved;
    const TimelineSample sample{t, d->dev, allocated, reserved, graph_reserved};
    d->last = sample;
    d->changed = true;
    if (options_.buckets == 0) {
      if (sink_ != nullptr) sink_->sample(sample);
      continue;
    }
    SampleBucket& bucket = d->buckets[bucket_index(t)];
    if (!bucket.used) {
      bucket = SampleBucket{true, sample, sample, sample, sample};
    } else {
      bucket.at_allocated_max = higher_allocated(bucket.at_allocated_max, sample);
      bucket.at_reserved_max = higher_reserved(bucket.at_reserved_max, sample);
      if (options_.keep_minima) {
        bucket.at_allocated_min = lower_allocated(bucket.at_allocated_min, sample);
        bucket.at_reserved_min = lower_reserved(bucket.at_reserved_min, sample);
      }
    }
  }
}

void TimelineCollector::record_pool(const CacheSample& sample) {
  if (options_.buckets == 0) return;
  Device& d = device(sample.dev);
  PoolBucket& bucket = d.pool_buckets[bucket_index(sample.t)];
  if (!bucket.used || sample.scattered() > bucket.most_scattered.scattered()) {
    bucket = PoolBucket{true, sample};
  }
}

void TimelineCollector::add_mark(const TraceEvent& e) {
  if (marks_.size() >= options_.max_marks) {
    ++marks_omitted_;
    return;
  }
  TimelineMark mark{e.t, e.tid, std::string(e.kind), std::string(e.name)};
  if (options_.buckets == 0 && sink_ != nullptr) sink_->mark(mark);
  marks_.push_back(std::move(mark));
}

void TimelineCollector::add_oom(const TraceEvent& e) {
  if (ooms_.size() >= options_.max_ooms) {
    ++ooms_omitted_;
    return;
  }
  TimelineOom oom;
  oom.t = e.t;
  oom.tid = e.tid;
  oom.dev = e.dev;
  oom.api = e.api;
  oom.size = e.size;
  oom.block = e.block;
  oom.cause = e.cause;
  oom.stack = e.stack;
  for (const Device& d : devices_) {
    if (d.dev == e.dev) {
      oom.allocated = d.allocated;
      oom.reserved = d.reserved;
    }
  }
  oom.cached_free = e.cached_free;
  oom.largest_free = e.largest_free;
  oom.device_free = e.device_free;
  oom.device_total = e.device_total;
  if (options_.buckets == 0 && sink_ != nullptr) sink_->oom(oom);
  ooms_.push_back(std::move(oom));
}

void TimelineCollector::consume(const TraceEvent& e, const Analysis& analysis) {
  using format::Event;
  if (e.ev == Event::header || e.ev == Event::stack) return;  // they carry no time
  last_t_ = std::max(last_t_, e.t);
  switch (e.ev) {
    case Event::alloc:
    case Event::free:
    case Event::segment_alloc:
    case Event::segment_free:
    case Event::graph_mem:  // the device's graph memory is reserved memory (Analysis)
      if (analysis.devices().size() != tracked_) track_new_devices(analysis);
      record_changes(e.t, analysis.graphs());
      break;
    case Event::pool: record_pool(CacheSample{e.t, e.dev, e.cached_free, e.largest_free}); break;
    case Event::oom:
      if (analysis.devices().size() != tracked_) track_new_devices(analysis);
      add_oom(e);
      record_pool(CacheSample{e.t, e.dev, e.cached_free, e.largest_free});
      break;
    case Event::mark:
      if (e.exec == 0) add_mark(e);  // a graph launch is counted in the report's graphs, not drawn
      break;
    default: break;
  }
}

std::map<int, std::vector<TimelineSample>> TimelineCollector::samples_by_device() const {
  std::map<int, std::vector<TimelineSample>> out;
  for (const Device& d : devices_) {
    std::vector<TimelineSample> samples;
    for (const SampleBucket& b : d.buckets) {
      if (!b.used) continue;
      if (options_.keep_minima) {
        // Up to four moments, each a real state, in time order (a moment
        // that is two of the extremes appears once).
        TimelineSample moments[] = {b.at_allocated_max, b.at_reserved_max, b.at_allocated_min, b.at_reserved_min};
        std::stable_sort(std::begin(moments), std::end(moments),
                         [](const TimelineSample& x, const TimelineSample& y) { return x.t < y.t; });
        const std::size_t bucket_start = samples.size();
        for (const TimelineSample& m : moments) {
          const auto here = samples.begin() + static_cast<std::ptrdiff_t>(bucket_start);
          if (std::find(here, samples.end(), m) == samples.end()) samples.push_back(m);
        }
        continue;
      }
      const TimelineSample& a = b.at_allocated_max;
      const TimelineSample& r = b.at_reserved_max;
      // One moment shows both maxima when it is the same moment, or when
      // nothing was reserved at all; otherwise keep both moments (each
      // maximum with its exact time), in time order.
      if ((r.t == a.t && r.reserved <= a.reserved) || r.reserved == 0) {
        samples.push_back(a);
      } else if (r.t <= a.t) {
        samples.push_back(r);
        samples.push_back(a);
      } else {
        samples.push_back(a);
        samples.push_back(r);
      }
    }
    if (samples.empty()) continue;
    if (samples.back() != d.last) samples.push_back(d.last);
    out.emplace(d.dev, std::move(samples));
  }
  return out;
}

std::map<int, std::vector<CacheSample>> TimelineCollector::pool_by_device() const {
  std::map<int, std::vector<CacheSample>> out;
  for (const Device& d : devices_) {
    std::vector<CacheSample> samples;
    for (const PoolBucket& b : d.pool_buckets) {
      if (b.used) samples.push_back(b.most_scattered);
    }
    if (!samples.empty()) out.emplace(d.dev, std::move(samples));
  }
  return out;
}

std::vector<int> TimelineCollector::devices() const {
  std::vector<int> devs;
  for (const Device& d : devices_) {
    if (d.changed) devs.push_back(d.dev);
  }
  std::sort(devs.begin(), devs.end());
  return devs;
}

void TimelineCollector::replay(TimelineSink& sink) const {
  std::vector<TimelineSample> samples;
  for (auto& [dev, series] : samples_by_device()) samples.insert(samples.end(), series.begin(), series.end());
  std::stable_sort(samples.begin(), samples.end(), [](const TimelineSample& a, const TimelineSample& b) {
    return std::tie(a.t, a.dev) < std::tie(b.t, b.dev);
  });
  // Three time-ordered lists, merged; at equal times samples come first, then marks, then OOMs.
  std::size_t s = 0, m = 0, o = 0;
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  while (s < samples.size() || m < marks_.size() || o < ooms_.size()) {
    const std::uint64_t ts = s < samples.size() ? samples[s].t : kNone;
    const std::uint64_t tm = m < marks_.size() ? marks_[m].t : kNone;
    const std::uint64_t to = o < ooms_.size() ? ooms_[o].t : kNone;
    if (s < samples.size() && ts <= tm && ts <= to) {
      sink.sample(samples[s++]);
    } else if (m < marks_.size() && tm <= to) {
      sink.mark(marks_[m++]);
    } else {
      sink.oom(ooms_[o++]);
    }
  }
}

}  // namespace cumemtrace::analyzer
