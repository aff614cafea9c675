// One pass over a trace's events: allocated and reserved memory with their
// peaks, per device and in total, event counts, and the live set (what is
// still allocated), which becomes the leak report at the end.
//
//   Analysis analysis;
//   while (const TraceEvent* e = reader.next()) analysis.consume(*e);
//   analysis.total().allocated.peak; analysis.leaks();
//
// Memory is bounded by the live set (plus one entry per device, call stack
// and API name). Later analyses (phases from marks, growth leaks,
// fragmentation, what was live at the peak) build on the same state: they can
// consume the same events after Analysis has, and read live() / devices().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cumemtrace/analyzer/address_map.h"
#include "cumemtrace/analyzer/trace_event.h"
#include "cumemtrace/trace_format.h"

namespace cumemtrace::analyzer {

// A byte count that goes up and down, with its highest value and when
// (the `t` of the event that set it; the first time it was reached).
struct Watermark {
  std::uint64_t current = 0;
  std::uint64_t peak = 0;
  std::uint64_t peak_t = 0;

  void add(std::uint64_t bytes, std::uint64_t t) {
    current += bytes;
    if (current > peak) {
      peak = current;
      peak_t = t;
    }
  }
  void remove(std::uint64_t bytes) { current -= bytes < current ? bytes : current; }
};

struct MemoryTotals {
  Watermark allocated;  // sum of live `alloc` sizes
  Watermark reserved;   // sum of live segments
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;          // every `free` event, matched or not
  std::uint64_t unknown_frees = 0;  // `free` of a pointer that was not live
  std::uint64_t duplicate_allocs = 0;  // `alloc` of a live pointer: its free was lost
  std::uint64_t segment_allocs = 0;
  std::uint64_t segment_frees = 0;
  std::uint64_t unknown_segment_frees = 0;
  std::uint64_t live_allocations = 0;  // allocations live now
  std::uint64_t ooms = 0;
};

struct DeviceInfo {
  int dev = 0;
  bool described = false;  // a `device` event was seen
  std::string name;
  std::uint64_t total_bytes = 0;
  MemoryTotals memory;
};

// One allocation that is live (allocated and not yet freed).
struct LiveAllocation {
  std::uint64_t size = 0;
  std::uint64_t t = 0;
  std::uint64_t stack = 0;
  int dev = 0;
  std::uint16_t api = 0;  // Analysis::api_name()
  format::MemoryKind kind = format::MemoryKind::unknown;
};

struct LeakExample {
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  std::uint64_t t = 0;
};

// What was still live at the end, for one call stack.
struct LeakGroup {
  std::uint64_t stack = 0;  // 0: no stack captured
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
  std::uint64_t first_t = 0;            // the oldest allocation's time
  std::vector<std::string> apis;        // sorted, distinct
  std::vector<int> devices;             // sorted, distinct
  std::vector<format::MemoryKind> kinds;  // sorted, distinct
  std::vector<LeakExample> examples;    // the oldest few
};

struct OwnedFrame {
  std::uint64_t ip = 0;
  std::optional<std::string> fn;  // nullopt: the writer could not name it
  std::string module;
  std::optional<std::uint64_t> off;
  std::string file;
  std::optional<std::uint64_t> line;
};

// The `stack` events of a trace: id -> frames, innermost first.
class StackTable {
 public:
  void add(const TraceEvent& stack_event);
  const std::vector<OwnedFrame>* find(std::uint64_t id) const;
  std::size_t size() const { return stacks_.size(); }

 private:
  std::unordered_map<std::uint64_t, std::vector<OwnedFrame>> stacks_;
};

class Analysis {
 public:
  Analysis();

  void consume(const TraceEvent& event);

  const MemoryTotals& total() const { return total_; }
  const std::map<int, DeviceInfo>& devices() const { return devices_; }
  const StackTable& stacks() const { return stacks_; }
  // ptr -> allocation, for everything live now.
  const detail::AddressMap<LiveAllocation>& live() const { return live_; }
  std::string_view api_name(std::uint16_t id) const { return api_names_[id]; }
  std::uint64_t last_t() const { return last_t_; }
  std::uint64_t errors() const { return errors_; }

  // The live set grouped by call stack, most bytes first; each group keeps
  // its `max_examples` oldest allocations.
  std::vector<LeakGroup> leaks(std::size_t max_examples = 3) const;

 private:
  struct Segment {
    std::uint64_t size = 0;
    int dev = 0;
  };

  DeviceInfo& device(int dev);
  std::uint16_t intern_api(std::string_view api);
  void on_alloc(const TraceEvent& e);
  void on_free(const TraceEvent& e);
  void on_segment_alloc(const TraceEvent& e);
  void on_segment_free(const TraceEvent& e);

  MemoryTotals total_;
  std::map<int, DeviceInfo> devices_;
  DeviceInfo* last_device_ = nullptr;  // most events are for the same device
  detail::AddressMap<LiveAllocation> live_;
  detail::AddressMap<Segment> segments_;
  StackTable stacks_;
  std::vector<std::string> api_names_;
  std::uint16_t last_api_ = 0;
  std::uint64_t last_t_ = 0;
  std::uint64_t errors_ = 0;
};

}  // namespace cumemtrace::analyzer
