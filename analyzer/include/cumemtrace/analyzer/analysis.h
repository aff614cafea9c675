// One pass over a trace's events: allocated and reserved memory with their
// peaks, per device and in total, event counts, and the live set (what is
// still allocated), which becomes the leak report at the end. On the same
// pass: the mark ranges (phases) and the one each peak fell in, live bytes
// per call site and what they were at the allocated peak, growth leaks across
// iterations, fragmentation, out-of-memory events and error events.
//
//   Analysis analysis;
//   while (const TraceEvent* e = reader.next()) analysis.consume(*e);
//   analysis.total().allocated.peak; analysis.leaks(); analysis.growth();
//
// Memory is bounded by the live set, plus one entry per device, call site,
// API name and (capped) mark range and OOM, never by the trace's length.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cumemtrace/address_map.h"
#include "cumemtrace/analyzer/call_sites.h"
#include "cumemtrace/analyzer/fragmentation.h"
#include "cumemtrace/analyzer/graphs.h"
#include "cumemtrace/analyzer/growth.h"
#include "cumemtrace/analyzer/oom.h"
#include "cumemtrace/analyzer/phases.h"
#include "cumemtrace/analyzer/trace_event.h"
#include "cumemtrace/trace_format.h"

namespace cumemtrace::analyzer {

namespace detail {
// a == b, for the short names of APIs, without a call to memcmp: from 8 to
// 16 bytes, the first and the last 8 (they overlap; nothing past either
// string is read).
inline bool equal_short_text(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  if (n < 8 || n > 16) return a == b;
  std::uint64_t a_head, a_tail, b_head, b_tail;
  std::memcpy(&a_head, a.data(), 8);
  std::memcpy(&b_head, b.data(), 8);
  std::memcpy(&a_tail, a.data() + n - 8, 8);
  std::memcpy(&b_tail, b.data() + n - 8, 8);
  return ((a_head ^ b_head) | (a_tail ^ b_tail)) == 0;
}
}  // namespace detail

// A byte count that goes up and down, with its highest value and when
// (the `t` of the event that set it; the first time it was reached).
struct Watermark {
  std::uint64_t current = 0;
  std::uint64_t peak = 0;
  std::uint64_t peak_t = 0;

  // True when this sets a new peak.
  bool add(std::uint64_t bytes, std::uint64_t t) {
    current += bytes;
    if (current <= peak) return false;
    peak = current;
    peak_t = t;
    return true;
  }
  void remove(std::uint64_t bytes) { current -= bytes < current ? bytes : current; }
};

// The mark range open when a peak was set (see PhaseTracker::current).
struct PeakPhase {
  std::uint64_t range = kNoRange;  // the range's serial; kNoRange: none was open
  std::string path;                // "epoch 3/forward"; empty when none
};

struct MemoryTotals {
  Watermark allocated;  // sum of live `alloc` sizes
  Watermark reserved;   // sum of live segments
  PeakPhase allocated_peak_phase;
  PeakPhase reserved_peak_phase;
  // The most allocated while reserved stood at its peak: the peak's
  // fragmentation is 1 - this / reserved.peak.
  std::uint64_t allocated_at_reserved_peak = 0;
  // The CUDA graph memory (graph_mem) in reserved at its peak: the driver's
  // graph pool, not the allocator's cache, so fragmentation leaves it out.
  std::uint64_t graph_at_reserved_peak = 0;
  // Live allocations that carry `block`: their requested and block sizes.
  std::uint64_t live_requested = 0;
  std::uint64_t live_blocks = 0;
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

// One allocation that is live (allocated and not yet freed). What a free
// reads comes first: in the live set's 48-byte slots it then spans two cache
// lines for one slot in four instead of one in two.
struct LiveAllocation {
  std::uint64_t size = 0;
  std::uint64_t block = 0;  // 0: the alloc carried no `block`
  std::uint32_t site = 0;   // index in Analysis::sites()
  int dev = 0;
  std::uint64_t t = 0;
  std::uint64_t stack = 0;
  std::uint16_t api = 0;  // Analysis::api_name()
  format::MemoryKind kind = format::MemoryKind::unknown;
  std::uint32_t growth_key = 0;  // GrowthTracker's (thread, site) of the allocating thread
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

// A Python frame (`py`) has fn, file and maybe line: no ip, module or off.
struct OwnedFrame {
  std::uint64_t ip = 0;
  std::optional<std::string> fn;  // nullopt: the writer could not name it
  std::string module;
  std::optional<std::uint64_t> off;
  std::string file;
  std::optional<std::uint64_t> line;
  bool py = false;  // last: aggregate initialisers list the native fields
};

class FrameSymbolizer;

// The `stack` events of a trace: id -> frames, innermost first.
class StackTable {
 public:
  void add(const TraceEvent& stack_event);
  const std::vector<OwnedFrame>* find(std::uint64_t id) const;
  std::size_t size() const { return stacks_.size(); }
  // Frames added from now on are symbolised by `symbolizer` (not owned).
  void set_symbolizer(FrameSymbolizer* symbolizer) { symbolizer_ = symbolizer; }
  // The header's start_unix_ns: the symbolizer's test of changed files.
  void set_run_start(std::uint64_t unix_ns);

 private:
  std::unordered_map<std::uint64_t, std::vector<OwnedFrame>> stacks_;
  FrameSymbolizer* symbolizer_ = nullptr;
};

class Analysis {
 public:
  Analysis();

  void consume(const TraceEvent& event);
  // `report --symbolize`: stack frames get file, line and missing names
  // from their object files as their stack events arrive, unless a file
  // changed after the header's start_unix_ns (not owned).
  void set_symbolizer(FrameSymbolizer* symbolizer) { stacks_.set_symbolizer(symbolizer); }
  // `--iteration-marker NAME`, before the first event: only that mark
  // delimits iterations (growth.h).
  void set_iteration_marker(std::string_view name) { growth_.set_iteration_marker(name); }

  const MemoryTotals& total() const { return total_; }
  const std::map<int, DeviceInfo>& devices() const { return devices_; }
  const StackTable& stacks() const { return stacks_; }
  // ptr -> allocation, for everything live now.
  const AddressMap<LiveAllocation>& live() const { return live_; }
  std::string_view api_name(std::uint16_t id) const { return api_names_[id]; }
  std::uint64_t last_t() const { return last_t_; }
  std::uint64_t errors() const { return errors_; }
  // `error` events by `what`, in first-seen order.
  const std::vector<std::pair<std::string, std::uint64_t>>& errors_by_what() const { return errors_by_what_; }

  const SiteTable& sites() const { return sites_; }
  const PhaseTracker& phases() const { return phases_; }
  PhaseClock phase_clock() const;
  // Every mark range in push order, open ones with figures up to now.
  std::vector<PhaseRecord> phase_ranges() const { return phases_.ranges(phase_clock()); }
  // Every mark range grouped by path with numbers folded, highest peak first.
  std::vector<PhaseGroup> phase_groups() const { return phases_.groups(phase_clock()); }
  // Call sites live at the allocated peak, most bytes first.
  std::vector<SiteAtPeak> top_at_peak(std::size_t limit) const { return sites_.top_at_peak(limit); }
  // Iterations and growth leaks as of now (computed on each call).
  GrowthResult growth() const { return growth_.result(); }
  const FragmentationTracker& fragmentation() const { return fragmentation_; }
  // CUDA graphs and the device's graph memory (counted in reserved).
  const GraphTracker& graphs() const { return graphs_; }
  // The `oom` events (the first kMaxOomRecords; total().ooms counts all).
  const std::vector<OomRecord>& oom_records() const { return oom_records_; }

  static constexpr std::size_t kMaxOomRecords = 100;
  static constexpr std::size_t kMaxErrorKinds = 64;

  // The live set grouped by call stack, most bytes first; each group keeps
  // its `max_examples` oldest allocations.
  std::vector<LeakGroup> leaks(std::size_t max_examples = 3) const;

 private:
  struct Segment {
    std::uint64_t size = 0;
    int dev = 0;
  };

  // Nearly every event is for the device and API of the one before: those
  // fast paths are inline, the lookups out of line.
  DeviceInfo& device(int dev) {
    if (last_device_ != nullptr && last_device_->dev == dev) [[likely]] return *last_device_;
    return find_device(dev);
  }
  DeviceInfo& find_device(int dev);
  std::uint16_t intern_api(std::string_view api) {
    if (detail::equal_short_text(api_names_[last_api_], api)) [[likely]] return last_api_;
    return find_api(api);
  }
  std::uint16_t find_api(std::string_view api);
  [[gnu::noinline]] void on_other(const TraceEvent& e);  // every kind but alloc and free
  void on_alloc(const TraceEvent& e);
  void on_free(const TraceEvent& e);
  void on_segment_alloc(const TraceEvent& e);
  void on_segment_free(const TraceEvent& e);
  void on_mark(const TraceEvent& e);
  void on_pool(const TraceEvent& e);
  void on_oom(const TraceEvent& e);
  void on_error(const TraceEvent& e);
  void on_graph_memory(const TraceEvent& e);
  void release(const LiveAllocation& a, DeviceInfo& d);  // `a` (on device `d`) stops being live
  void note_peak_phase(PeakPhase& phase, std::uint64_t tid) const;

  MemoryTotals total_;
  std::map<int, DeviceInfo> devices_;
  DeviceInfo* last_device_ = nullptr;  // most events are for the same device
  AddressMap<LiveAllocation> live_;
  AddressMap<Segment> segments_;
  StackTable stacks_;
  std::vector<std::string> api_names_;
  std::uint16_t last_api_ = 0;
  std::uint64_t last_t_ = 0;
  std::uint64_t errors_ = 0;
  std::vector<std::pair<std::string, std::uint64_t>> errors_by_what_;

  SiteTable sites_;
  PhaseTracker phases_;
  GrowthTracker growth_;
  GraphTracker graphs_;
  FragmentationTracker fragmentation_;
  std::vector<OomRecord> oom_records_;
};

}  // namespace cumemtrace::analyzer
