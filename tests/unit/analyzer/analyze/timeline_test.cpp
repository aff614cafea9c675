// The timeline collector: exact mode gives every change in order; resampled
// mode keeps every bucket's maximum (so the analysis' peaks, at their
// times), stays within its bucket budget however long the trace, and its
// samples are real states of the trace. Then `cumemtrace timeline` output.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/timeline.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer {
namespace {

using format::Event;

class Recorder : public TimelineSink {
 public:
  void sample(const TimelineSample& s) override { samples.push_back(s); }
  void mark(const TimelineMark& m) override { order += "m" + m.name + ";"; }
  void oom(const TimelineOom& o) override { order += "o" + std::to_string(o.t) + ";"; }
  std::vector<TimelineSample> samples;
  std::string order;
};

// Feeds hand-built events to an Analysis and to the collectors under test.
class Feed {
 public:
  explicit Feed(std::vector<TimelineCollector*> collectors) : collectors_(std::move(collectors)) {}

  void alloc(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    event(Event::alloc, t, ptr, size, dev);
  }
  void free(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    event(Event::free, t, ptr, size, dev);
  }
  void segment_alloc(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    event(Event::segment_alloc, t, ptr, size, dev);
  }
  void segment_free(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    event(Event::segment_free, t, ptr, size, dev);
  }
  void mark(std::uint64_t t, std::string_view name, std::string_view kind) {
    TraceEvent e;
    e.ev = Event::mark;
    e.t = t;
    e.tid = 7;
    e.name = name;
    e.kind = kind;
    consume(e);
  }
  void oom(std::uint64_t t, std::uint64_t size, int dev = 0) {
    TraceEvent e;
    e.ev = Event::oom;
    e.t = t;
    e.dev = dev;
    e.size = size;
    e.cause = "capacity";
    e.api = "cudaMalloc";
    e.cached_free = 100;
    e.largest_free = 25;
    consume(e);
  }
  void pool(std::uint64_t t, std::uint64_t cached_free, std::uint64_t largest_free, int dev = 0) {
    TraceEvent e;
    e.ev = Event::pool;
    e.t = t;
    e.dev = dev;
    e.cached_free = cached_free;
    e.largest_free = largest_free;
    consume(e);
  }

  Analysis analysis;

 private:
  void event(Event ev, std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev) {
    TraceEvent e;
    e.ev = ev;
    e.t = t;
    e.ptr = ptr;
    e.size = size;
    e.dev = dev;
    e.api = "cudaMalloc";
    consume(e);
  }
  void consume(const TraceEvent& e) {
    analysis.consume(e);
    for (TimelineCollector* c : collectors_) c->consume(e, analysis);
  }
  std::vector<TimelineCollector*> collectors_;
};

TEST(Timeline, ExactModeSendsEveryChangeInTraceOrder) {
  Recorder sink;
  TimelineCollector timeline({}, &sink);
  Feed feed({&timeline});
  feed.segment_alloc(10, 0x1000, 1000);
  feed.alloc(20, 0x1000, 300);
  feed.mark(25, "step", "push");
  feed.alloc(30, 0x2000, 200, 1);
  feed.free(40, 0xdead, 0);  // unknown pointer: nothing changes, no sample
  feed.oom(45, 5000);
  feed.free(50, 0x1000, 300);
  const std::vector<TimelineSample> expected{
      {10, 0, 0, 1000, {}}, {20, 0, 300, 1000, {}}, {30, 1, 200, 0, {}}, {50, 0, 0, 1000, {}}};
  EXPECT_EQ(sink.samples, expected);
  EXPECT_EQ(sink.order, "mstep;o45;");
  ASSERT_EQ(timeline.ooms().size(), 1u);
  EXPECT_EQ(timeline.ooms()[0].allocated, 300u);  // the analysis' state on device 0 then
  EXPECT_EQ(timeline.ooms()[0].reserved, 1000u);
  EXPECT_EQ(timeline.devices(), (std::vector<int>{0, 1}));
  EXPECT_EQ(timeline.last_t(), 50u);
}

TEST(Timeline, FreeOnAnotherDeviceIsAccountedWhereTheAllocationWas) {
  Recorder sink;
  TimelineCollector timeline({}, &sink);
  Feed feed({&timeline});
  feed.alloc(10, 0x1000, 300, 1);
  feed.free(20, 0x1000, 300, 0);  // the event says device 0; the allocation was on 1
  ASSERT_EQ(sink.samples.size(), 2u);
  EXPECT_EQ(sink.samples[1], (TimelineSample{20, 1, 0, 0, {}}));
}

// A random walk of allocations on two devices with segments, over a long
// and uneven time span.
void random_trace(Feed& feed, std::uint64_t events, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<std::uint64_t, int>> live;
  std::uint64_t t = 1000, next_ptr = 0x100000;
  for (std::uint64_t i = 0; i < events; ++i) {
    t += 1 + rng() % (i % 1000 == 0 ? 5000000 : 3000);  // occasional long gaps
    const int dev = static_cast<int>(rng() % 2);
    if (!live.empty() && rng() % 100 < 45) {
      const std::size_t k = rng() % live.size();
      feed.free(t, live[k].first, 0, live[k].second);
      live[k] = live.back();
      live.pop_back();
    } else if (rng() % 100 < 3) {
      feed.segment_alloc(t, 0x900000000000 + i, 1 + rng() % (1 << 24), dev);
    } else {
      const std::uint64_t size = 1 + rng() % (1 << 20);
      feed.alloc(t, next_ptr, size, dev);
      live.emplace_back(next_ptr, dev);
      next_ptr += 0x1000;
    }
  }
}

TEST(Timeline, ResampledKeepsEveryBucketsMaximumAndTheExactPeaks) {
  constexpr std::size_t kBuckets = 64;
  Recorder exact_sink;
  TimelineCollector exact({}, &exact_sink);
  TimelineCollector resampled({.buckets = kBuckets});
  Feed feed({&exact, &resampled});
  random_trace(feed, 20000, 1);

  const auto series = resampled.samples_by_device();
  ASSERT_EQ(series.size(), 2u);
  const std::uint64_t t0 = exact_sink.samples.front().t;
  const std::uint64_t width = resampled.bucket_ns();
  for (const auto& [dev, samples] : series) {
    // Within budget: two moments per bucket at most, and the final state.
    EXPECT_LE(samples.size(), 2 * kBuckets + 1);
    EXPECT_GT(samples.size(), kBuckets / 2);
    EXPECT_TRUE(std::is_sorted(samples.begin(), samples.end(),
                               [](const TimelineSample& a, const TimelineSample& b) { return a.t < b.t; }));
    // The device's peaks appear with their exact times.
    const MemoryTotals& m = feed.analysis.devices().at(dev).memory;
    auto top_allocated = std::max_element(samples.begin(), samples.end(), [](auto& a, auto& b) {
      return a.allocated < b.allocated;
    });
    EXPECT_EQ(top_allocated->allocated, m.allocated.peak);
    EXPECT_EQ(top_allocated->t, m.allocated.peak_t);
    auto top_reserved = std::max_element(samples.begin(), samples.end(), [](auto& a, auto& b) {
      return a.reserved < b.reserved;
    });
    EXPECT_EQ(top_reserved->reserved, m.reserved.peak);
    EXPECT_EQ(top_reserved->t, m.reserved.peak_t);
    // Every kept sample is a real state of the trace...
    std::vector<TimelineSample> exact_dev;
    for (const TimelineSample& s : exact_sink.samples) {
      if (s.dev == dev) exact_dev.push_back(s);
    }
    for (const TimelineSample& s : samples) {
      EXPECT_NE(std::find(exact_dev.begin(), exact_dev.end(), s), exact_dev.end()) << "t=" << s.t;
    }
    // ...and no bucket loses its maximum.
    std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> bucket_max, kept_max;
    for (const TimelineSample& s : exact_dev) {
      auto& [a, r] = bucket_max[(s.t - t0) / width];
      a = std::max(a, s.allocated), r = std::max(r, s.reserved);
    }
    for (const TimelineSample& s : samples) {
      auto& [a, r] = kept_max[(s.t - t0) / width];
      a = std::max(a, s.allocated), r = std::max(r, s.reserved);
    }
    EXPECT_EQ(kept_max, bucket_max);
    // It ends with the state at the last change.
    EXPECT_EQ(samples.back(), exact_dev.back());
  }
}

TEST(Timeline, BucketsWidenSoTheBudgetHoldsForAnyDuration) {
  TimelineCollector timeline({.buckets = 8});
  Feed feed({&timeline});
  std::uint64_t t = 0;
  for (int i = 0; i < 5000; ++i) {
    feed.alloc(t, 0x1000, 10 + static_cast<std::uint64_t>(i % 7));
    feed.free(t + 1, 0x1000, 0);
    t = t * 2 + 3;  // grows past 2^64: the widening must stop, not overflow
    if (t > (std::uint64_t{1} << 62)) t = (std::uint64_t{1} << 62) + static_cast<std::uint64_t>(i);
  }
  const auto series = timeline.samples_by_device();
  ASSERT_EQ(series.size(), 1u);
  EXPECT_LE(series.at(0).size(), 17u);
  EXPECT_EQ(std::max_element(series.at(0).begin(), series.at(0).end(), [](auto& a, auto& b) {
              return a.allocated < b.allocated;
            })->allocated, 16u);
}

TEST(Timeline, OneBucketSpansEvenTheWholeClock) {
  TimelineCollector timeline({.buckets = 1});
  Feed feed({&timeline});
  feed.alloc(0, 0x1000, 10);
  feed.alloc(~std::uint64_t{0} - 1, 0x2000, 20);  // the width cannot double past 2^63
  const auto series = timeline.samples_by_device();
  ASSERT_EQ(series.at(0).size(), 1u);
  EXPECT_EQ(series.at(0)[0].allocated, 30u);
}

TEST(Timeline, TimeSteppingBackCountsInTheFirstBucket) {
  TimelineCollector timeline({.buckets = 4});
  Feed feed({&timeline});
  feed.alloc(1000, 0x1000, 10);
  feed.alloc(10, 0x2000, 20);  // a damaged trace: earlier than the first event
  const auto series = timeline.samples_by_device();
  ASSERT_EQ(series.at(0).size(), 1u);
  EXPECT_EQ(series.at(0)[0].allocated, 30u);
}

TEST(Timeline, ReplayMergesSamplesMarksAndOomsInTimeOrder) {
  TimelineCollector timeline({.buckets = 100});
  Feed feed({&timeline});
  feed.mark(5, "start", "instant");
  feed.alloc(10, 0x1000, 10);
  feed.oom(10, 99);
  feed.mark(10, "same time", "push");
  feed.alloc(20, 0x2000, 10);
  Recorder sink;
  timeline.replay(sink);
  EXPECT_EQ(sink.order, "mstart;msame time;o10;");
  ASSERT_EQ(sink.samples.size(), 2u);
}

TEST(Timeline, MarksAndOomsPastTheirLimitAreCounted) {
  TimelineCollector timeline({.buckets = 10, .max_marks = 2, .max_ooms = 1});
  Feed feed({&timeline});
  for (int i = 0; i < 5; ++i) feed.mark(static_cast<std::uint64_t>(i), "m", "instant");
  feed.oom(10, 1);
  feed.oom(11, 1);
  EXPECT_EQ(timeline.marks().size(), 2u);
  EXPECT_EQ(timeline.marks_omitted(), 3u);
  EXPECT_EQ(timeline.ooms().size(), 1u);
  EXPECT_EQ(timeline.ooms_omitted(), 1u);
}

TEST(Timeline, PoolSamplesKeepTheMostScatteredPerBucket) {
  TimelineCollector timeline({.buckets = 2});
  Feed feed({&timeline});
  feed.pool(0, 100, 100);  // 0 scattered
  feed.pool(1, 100, 10);   // 0.9
  feed.pool(2, 0, 0);      // nothing cached: 0
  feed.pool(3, 100, 50);   // 0.5
  const auto pool = timeline.pool_by_device();
  ASSERT_EQ(pool.at(0).size(), 2u);
  EXPECT_DOUBLE_EQ(pool.at(0)[0].scattered(), 0.9);
  EXPECT_EQ(pool.at(0)[0].t, 1u);
  EXPECT_DOUBLE_EQ(pool.at(0)[1].scattered(), 0.5);
}

// `cumemtrace timeline` output through write_timeline.
std::string timeline_of(const std::string& trace, TimelineFormat format, std::size_t buckets) {
  testing::TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), trace);
  TraceReader reader(tmp.path("t.jsonl"));
  std::ostringstream out;
  write_timeline(reader, format, buckets, out);
  return out.str();
}

std::string timeline_trace() {
  return testing::join_lines(
      {testing::header_line(), testing::alloc_line(10, "0x100", 2048),
       R"({"ev":"mark","t":15,"tid":7,"name":"phase, \"one\"","kind":"push"})",
       testing::alloc_line(20, "0x200", 100, 1), testing::free_line(30, "0x100", 2048),
       R"({"ev":"oom","t":35,"tid":7,"api":"cudaMalloc","dev":1,"size":999,"block":1024,"allocated":100,"reserved":0,"cached_free":0,"largest_free":0,"device_free":0,"device_total":1000,"cause":"capacity","stack":0})",
       testing::end_line(40)});
}

TEST(TimelineOutput, CsvHasAHeaderAndOneRowPerChangeMarkAndOom) {
  EXPECT_EQ(timeline_of(timeline_trace(), TimelineFormat::csv, 0),
            "t,event,dev,allocated,reserved,kind,name,size,cause\n"
            "10,sample,0,2048,0,,,,\n"
            "15,mark,,,,push,\"phase, \"\"one\"\"\",,\n"
            "20,sample,1,100,0,,,,\n"
            "30,sample,0,0,0,,,,\n"
            "35,oom,1,100,0,,,999,capacity\n");
}

TEST(TimelineOutput, JsonIsOneObjectWithSamplesMarksAndOoms) {
  for (std::size_t buckets : {std::size_t{0}, std::size_t{3}}) {
    const nlohmann::json j = nlohmann::json::parse(timeline_of(timeline_trace(), TimelineFormat::json, buckets));
    EXPECT_EQ(j["timeline_version"], 1);
    EXPECT_EQ(j["samples"].size(), 3u);
    EXPECT_EQ(j["samples"][1], (nlohmann::json{{"t", 20}, {"dev", 1}, {"allocated", 100}, {"reserved", 0}}));
    EXPECT_EQ(j["marks"][0]["name"], "phase, \"one\"");
    EXPECT_EQ(j["ooms"][0]["size"], 999);
    EXPECT_EQ(j["devices"], (nlohmann::json{0, 1}));
    EXPECT_EQ(j["t_end"], 40);
    EXPECT_EQ(j["truncated"], false);
    if (buckets == 0) {
      EXPECT_TRUE(j["points"].is_null());
      EXPECT_TRUE(j["bucket_ns"].is_null());
    } else {
      EXPECT_EQ(j["points"], 3);
      EXPECT_GE(j["bucket_ns"].get<std::uint64_t>() * 3, 20u);  // three buckets cover the samples' span
    }
  }
}

}  // namespace
}  // namespace cumemtrace::analyzer
