// Feeds hand-built events straight into an Analysis, for the analysis unit
// tests (no trace text, no reader). String views point at literals or at
// strings the feeder keeps alive.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer::testing {

class EventFeeder {
 public:
  explicit EventFeeder(Analysis& analysis) : analysis_(analysis) {}

  void alloc(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, std::uint64_t stack = 0, int dev = 0,
             std::optional<std::uint64_t> block = std::nullopt, std::uint64_t tid = 1) {
    TraceEvent e = base(format::Event::alloc, t, tid, dev);
    e.ptr = ptr;
    e.size = size;
    e.block = block;
    e.stack = stack;
    e.api = "cudaMalloc";
    e.kind = "device";
    e.memory_kind = format::MemoryKind::device;
    analysis_.consume(e);
  }
  void free(std::uint64_t t, std::uint64_t ptr, std::uint64_t size = 0, int dev = 0, std::uint64_t tid = 1) {
    TraceEvent e = base(format::Event::free, t, tid, dev);
    e.ptr = ptr;
    e.size = size;
    e.api = "cudaFree";
    e.kind = "device";
    e.memory_kind = format::MemoryKind::device;
    analysis_.consume(e);
  }
  void segment_alloc(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    TraceEvent e = base(format::Event::segment_alloc, t, 0, dev);
    e.ptr = ptr;
    e.size = size;
    e.api = "cuMemAlloc_v2";
    analysis_.consume(e);
  }
  void segment_free(std::uint64_t t, std::uint64_t ptr, std::uint64_t size, int dev = 0) {
    TraceEvent e = base(format::Event::segment_free, t, 0, dev);
    e.ptr = ptr;
    e.size = size;
    analysis_.consume(e);
  }
  void mark(std::uint64_t t, std::string name, std::string_view kind, std::uint64_t tid = 1) {
    TraceEvent e = base(format::Event::mark, t, tid, 0);
    e.name = keep(std::move(name));
    e.kind = kind;
    analysis_.consume(e);
  }
  void push(std::uint64_t t, std::string name, std::uint64_t tid = 1) { mark(t, std::move(name), "push", tid); }
  void pop(std::uint64_t t, std::string name, std::uint64_t tid = 1) { mark(t, std::move(name), "pop", tid); }
  void pool(std::uint64_t t, int dev, std::uint64_t allocated, std::uint64_t reserved, std::uint64_t cached_free,
            std::uint64_t largest_free, std::uint64_t inactive_split) {
    TraceEvent e = base(format::Event::pool, t, 0, dev);
    e.allocated = allocated;
    e.reserved = reserved;
    e.cached_free = cached_free;
    e.largest_free = largest_free;
    e.inactive_split = inactive_split;
    analysis_.consume(e);
  }
  void error(std::uint64_t t, std::string what) {
    TraceEvent e = base(format::Event::error, t, 1, 0);
    e.api = "cudaFree";
    e.what = keep(std::move(what));
    analysis_.consume(e);
  }
  void stack(std::uint64_t id, std::vector<std::string> functions) {
    TraceEvent e;
    e.ev = format::Event::stack;
    e.id = id;
    for (std::string& fn : functions) {
      StackFrame f;
      f.ip = 0x1000 + e.frames.size();
      f.fn = keep(std::move(fn));
      f.has_fn = true;
      f.module = "/bin/app";
      e.frames.push_back(f);
    }
    analysis_.consume(e);
  }

 private:
  static TraceEvent base(format::Event ev, std::uint64_t t, std::uint64_t tid, int dev) {
    TraceEvent e;
    e.ev = ev;
    e.t = t;
    e.tid = tid;
    e.dev = dev;
    return e;
  }
  std::string_view keep(std::string s) { return strings_.emplace_back(std::move(s)); }

  Analysis& analysis_;
  std::deque<std::string> strings_;  // deque: references stay valid
};

}  // namespace cumemtrace::analyzer::testing
