// Google Benchmark of the analyzer's per-event bookkeeping alone
// (Analysis::consume), without reading or decoding: the trace's events are
// decoded once into memory, then each iteration runs a fresh Analysis over
// them. `report` spends most of its time decoding; this isolates the part
// that decoding does not change, so a change to it can be measured on a
// noisy machine.
//
//   analysis_bench TRACE [--benchmark_repetitions=5 ...]
//
// TRACE: a few hundred thousand events are enough (the events are held in
// memory, a few hundred bytes each), e.g.
// `analyzer/tools/make_synthetic_trace.py 300000 /tmp/300k.jsonl`.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_reader.h"

using namespace cumemtrace::analyzer;

namespace {

// Decoded events that outlive the reader. The reader hands every event over
// in one TraceEvent that stays in the L1 cache; a vector of 300-byte
// TraceEvents would instead make this measure memory bandwidth. So allocs
// and frees (nearly all events) are kept as small records and copied into
// one reused TraceEvent, as the reader does; the rare other kinds are kept
// whole. String views point into `text_`.
class EventsInMemory {
 public:
  void add(const TraceEvent& e) {
    if (e.ev == cumemtrace::format::Event::alloc || e.ev == cumemtrace::format::Event::free) {
      records_.push_back(Record{e.ev, e.memory_kind, e.dev, e.t, e.tid, e.ptr, e.size, e.block, e.stream,
                                e.stack, keep(e.api), keep(e.kind), 0});
      return;
    }
    records_.push_back(Record{e.ev, e.memory_kind, 0, 0, 0, 0, 0, {}, {}, 0, {}, {}, others_.size()});
    TraceEvent& copy = others_.emplace_back(e);
    for (std::string_view* view : {&copy.api, &copy.kind, &copy.name, &copy.cause, &copy.what, &copy.reason,
                                   &copy.format_name, &copy.host, &copy.exe, &copy.pool}) {
      *view = keep(*view);
    }
    for (std::string_view& arg : copy.argv) arg = keep(arg);
    for (StackFrame& f : copy.frames) {
      f.fn = keep(f.fn);
      f.module = keep(f.module);
      f.file = keep(f.file);
    }
    copy.header = nullptr;  // the reader's; Analysis does not read it
  }

  std::size_t size() const { return records_.size(); }

  // Calls `use(event)` on each event in trace order.
  template <typename F>
  void replay(F&& use) const {
    TraceEvent event;
    for (const Record& r : records_) {
      if (r.ev != cumemtrace::format::Event::alloc && r.ev != cumemtrace::format::Event::free) {
        use(others_[r.other]);
        continue;
      }
      event.ev = r.ev;
      event.memory_kind = r.memory_kind;
      event.dev = r.dev;
      event.t = r.t;
      event.tid = r.tid;
      event.ptr = r.ptr;
      event.size = r.size;
      event.block = r.block;
      event.stream = r.stream;
      event.stack = r.stack;
      event.api = r.api;
      event.kind = r.kind;
      use(static_cast<const TraceEvent&>(event));
    }
  }

 private:
  struct Record {
    cumemtrace::format::Event ev;
    cumemtrace::format::MemoryKind memory_kind;
    int dev;
    std::uint64_t t, tid, ptr, size;
    std::optional<std::uint64_t> block, stream;
    std::uint64_t stack;
    std::string_view api, kind;
    std::size_t other;  // index in others_, for the other kinds
  };

  std::string_view keep(std::string_view text) {
    if (text.empty()) return {};
    return *text_.emplace(text).first;
  }

  std::vector<Record> records_;
  std::vector<TraceEvent> others_;
  std::unordered_set<std::string> text_;  // nodes: the strings never move
};

EventsInMemory& trace_events() {
  static EventsInMemory events;
  return events;
}

void BM_AnalysisConsume(benchmark::State& state) {
  const EventsInMemory& events = trace_events();
  for (auto _ : state) {
    Analysis analysis;
    events.replay([&](const TraceEvent& e) { analysis.consume(e); });
    benchmark::DoNotOptimize(analysis.total().allocated.peak);
  }
  const double processed = static_cast<double>(state.iterations()) * static_cast<double>(events.size());
  state.SetItemsProcessed(static_cast<std::int64_t>(processed));
  state.counters["ns_per_event"] =
      benchmark::Counter(processed, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AnalysisConsume)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: analysis_bench TRACE [--benchmark_...]\n");
    return 2;
  }
  try {
    TraceReader reader(argv[1]);
    while (const TraceEvent* e = reader.next()) trace_events().add(*e);
  } catch (const TraceError& error) {
    std::fprintf(stderr, "analysis_bench: %s\n", error.what());
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
