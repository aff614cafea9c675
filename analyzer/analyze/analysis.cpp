#include "cumemtrace/analyzer/analysis.h"

#include <algorithm>
#include <tuple>

#include "cumemtrace/analyzer/symbolizer.h"

namespace cumemtrace::analyzer {

namespace {
// API names come from the trace; past this many distinct ones (garbage
// input) they share one name, so interning stays cheap and bounded.
constexpr std::size_t kMaxApiNames = 1024;
constexpr std::string_view kOtherApi = "(other)";

template <typename T>
void insert_sorted_unique(std::vector<T>& values, const T& value) {
  auto it = std::lower_bound(values.begin(), values.end(), value);
  if (it == values.end() || *it != value) values.insert(it, value);
}
}  // namespace

void StackTable::set_run_start(std::uint64_t unix_ns) {
  if (symbolizer_ != nullptr) symbolizer_->set_run_start(unix_ns);
}

void StackTable::add(const TraceEvent& e) {
  std::vector<OwnedFrame> frames;
  frames.reserve(e.frames.size());
  for (const StackFrame& f : e.frames) {
    OwnedFrame owned;
    owned.py = f.py;
    owned.ip = f.ip;
    if (f.has_fn) owned.fn = std::string(f.fn);
    owned.module = f.module;
    owned.off = f.off;
    owned.file = f.file;
    owned.line = f.line;
    if (symbolizer_ != nullptr) symbolizer_->symbolize(owned);
    frames.push_back(std::move(owned));
  }
  stacks_[e.id] = std::move(frames);
}

const std::vector<OwnedFrame>* StackTable::find(std::uint64_t id) const {
  auto it = stacks_.find(id);
  return it == stacks_.end() ? nullptr : &it->second;
}

Analysis::Analysis() { api_names_.emplace_back(kOtherApi); }

DeviceInfo& Analysis::find_device(int dev) {
  auto [it, inserted] = devices_.try_emplace(dev);
  if (inserted) it->second.dev = dev;
  last_device_ = &it->second;  // std::map nodes never move
  return it->second;
}

std::uint16_t Analysis::find_api(std::string_view api) {
  for (std::size_t i = 0; i < api_names_.size(); ++i) {
    if (api_names_[i] == api) return last_api_ = static_cast<std::uint16_t>(i);
  }
  if (api_names_.size() >= kMaxApiNames) return 0;
  api_names_.emplace_back(api);
  return last_api_ = static_cast<std::uint16_t>(api_names_.size() - 1);
}

void Analysis::consume(const TraceEvent& e) {
  using format::Event;
  // Allocs and frees are nearly all events: each a tail call, with the rest
  // out of line, so that this saves no registers.
  if (e.ev == Event::alloc) {
    last_t_ = std::max(last_t_, e.t);
    return on_alloc(e);
  }
  if (e.ev == Event::free) {
    last_t_ = std::max(last_t_, e.t);
    return on_free(e);
  }
  return on_other(e);
}

void Analysis::on_other(const TraceEvent& e) {
  using format::Event;
  if (e.ev != Event::header && e.ev != Event::stack) last_t_ = std::max(last_t_, e.t);
  switch (e.ev) {
    case Event::alloc:
    case Event::free: break;  // consume()
    case Event::segment_alloc: on_segment_alloc(e); break;
    case Event::segment_free: on_segment_free(e); break;
    case Event::stack: stacks_.add(e); break;
    case Event::device: {
      DeviceInfo& d = device(e.dev);
      d.described = true;
      d.name = e.name;
      d.total_bytes = e.total;
      break;
    }
    case Event::oom: on_oom(e); break;
    case Event::error: on_error(e); break;
    case Event::mark:
      // A graph launch (it names its executable graph) is no phase boundary.
      if (e.exec != 0) graphs_.on_launch(e);
      else on_mark(e);
      break;
    case Event::pool: on_pool(e); break;
    case Event::graph_alloc: graphs_.on_alloc(e); break;
    case Event::graph_exec: graphs_.on_exec(e); break;
    case Event::graph_destroy: graphs_.on_destroy(e); break;
    case Event::graph_mem: on_graph_memory(e); break;
    case Event::header: stacks_.set_run_start(e.start_unix_ns); break;
    case Event::end:
    case Event::unknown: break;
  }
}

PhaseClock Analysis::phase_clock() const {
  return PhaseClock{last_t_, total_.allocated.current, total_.reserved.current, total_.allocs, total_.frees};
}

void Analysis::note_peak_phase(PeakPhase& phase, std::uint64_t tid) const {
  const PhaseRecord* range = phases_.current(tid);
  if (range == nullptr) {
    if (phase.range != kNoRange) {
      phase.range = kNoRange;
      phase.path.clear();
    }
  } else if (range->serial != phase.range) {  // copy the path only when the phase changed
    phase.range = range->serial;
    phase.path = range->path;
  }
}

namespace {
// While reserved stands at its peak, remember the most that was allocated.
void note_reserved_peak_occupancy(MemoryTotals& m) {
  if (m.reserved.current == m.reserved.peak && m.allocated.current > m.allocated_at_reserved_peak) {
    m.allocated_at_reserved_peak = m.allocated.current;
  }
}

PoolSample pool_sample(const TraceEvent& e) {
  return PoolSample{e.t, e.allocated, e.reserved, e.cached_free, e.largest_free, e.inactive_split};
}
}  // namespace

// Inlined into on_free, which calls it for every free.
[[gnu::always_inline]] inline void Analysis::release(const LiveAllocation& a, DeviceInfo& d) {
  d.memory.allocated.remove(a.size);
  --d.memory.live_allocations;
  total_.allocated.remove(a.size);
  --total_.live_allocations;
  if (a.block != 0) {
    d.memory.live_requested -= a.size;
    d.memory.live_blocks -= a.block;
    total_.live_requested -= a.size;
    total_.live_blocks -= a.block;
  }
  growth_.on_free(a.growth_key, a.size);
  sites_.remove(a.site, a.size);
}

void Analysis::on_mark(const TraceEvent& e) {
  phases_.on_mark(e.tid, e.name, e.kind, phase_clock());
  growth_.on_mark(e.tid, e.name, e.kind);
}

void Analysis::on_pool(const TraceEvent& e) {
  const MemoryTotals& m = device(e.dev).memory;
  fragmentation_.on_pool(e.dev, pool_sample(e), m.live_requested, m.live_blocks);
}

void Analysis::on_oom(const TraceEvent& e) {
  DeviceInfo& d = device(e.dev);
  ++d.memory.ooms;
  ++total_.ooms;
  fragmentation_.on_oom(e.dev, pool_sample(e), d.memory.live_requested, d.memory.live_blocks);
  if (oom_records_.size() >= kMaxOomRecords) return;
  OomRecord r;
  r.t = e.t;
  r.tid = e.tid;
  r.dev = e.dev;
  r.api = e.api;
  r.size = e.size;
  r.block = e.block;
  r.allocated = e.allocated;
  r.reserved = e.reserved;
  r.graph_reserved = graphs_.reserved(e.dev);
  r.cached_free = e.cached_free;
  r.largest_free = e.largest_free;
  r.device_free = e.device_free;
  r.device_total = e.device_total;
  r.cause = e.cause;
  r.stack = e.stack;
  if (const PhaseRecord* range = phases_.current(e.tid)) r.phase = range->path;
  oom_records_.push_back(std::move(r));
}

void Analysis::on_error(const TraceEvent& e) {
  ++errors_;
  const std::string_view what = e.what.empty() ? std::string_view("unspecified") : e.what;
  for (auto& [name, count] : errors_by_what_) {
    if (name == what) {
      ++count;
      return;
    }
  }
  // Past this many kinds (garbage input) the rest share one entry.
  if (errors_by_what_.size() + 1 >= kMaxErrorKinds) {
    if (errors_by_what_.size() + 1 == kMaxErrorKinds) errors_by_what_.emplace_back("(other)", 0);
    ++errors_by_what_.back().second;
    return;
  }
  errors_by_what_.emplace_back(std::string(what), 1);
}

void Analysis::on_alloc(const TraceEvent& e) {
  bool is_new = false;
  LiveAllocation& live = live_.find_or_claim(e.ptr, is_new);  // filled in below
  if (!is_new) {
    // The same address handed out twice without a free in between: the free
    // was lost (dropped events). Count the old allocation as freed.
    const LiveAllocation& old = live;  // release() leaves the map alone
    DeviceInfo& old_device = device(old.dev);
    release(old, old_device);
    ++old_device.memory.duplicate_allocs;
    ++total_.duplicate_allocs;
  }
  DeviceInfo& d = device(e.dev);
  const std::uint32_t site = sites_.intern(e.stack);
  const std::uint32_t growth_key = growth_.on_alloc(e.tid, site, e.stack, e.size);  // may be an iteration boundary
  sites_.add(site, e.size);
  const std::uint64_t block = e.block.value_or(0);
  live = LiveAllocation{e.size, block, site, e.dev, e.t, e.stack, intern_api(e.api), e.memory_kind, growth_key};
  if (d.memory.allocated.add(e.size, e.t)) note_peak_phase(d.memory.allocated_peak_phase, e.tid);
  ++d.memory.allocs;
  ++d.memory.live_allocations;
  if (total_.allocated.add(e.size, e.t)) {
    note_peak_phase(total_.allocated_peak_phase, e.tid);
    sites_.snapshot_peak();
  }
  ++total_.allocs;
  ++total_.live_allocations;
  phases_.note_allocated(total_.allocated.current);
  note_reserved_peak_occupancy(d.memory);
  note_reserved_peak_occupancy(total_);
  // Unused reserved memory is judged when memory is handed out (and at the
  // pool's samples): right after a segment_alloc, or between a free and the
  // release of its segment, it is high only for an instant.
  // Graph memory (the driver's graph pool) is not the allocator's cache.
  fragmentation_.note_unused(e.dev, d.memory.allocated.current,
                             d.memory.reserved.current - graphs_.reserved(e.dev), e.t);
  if (block != 0) {
    d.memory.live_requested += e.size;
    d.memory.live_blocks += block;
    total_.live_requested += e.size;
    total_.live_blocks += block;
    fragmentation_.note_rounding(e.dev, d.memory.live_requested, d.memory.live_blocks, e.t);
  }
}

void Analysis::on_free(const TraceEvent& e) {
  ++total_.frees;
  // Account the free where the allocation was, with the size it was given.
  const bool was_live = live_.erase_with(e.ptr, [this](const LiveAllocation& freed) {
    DeviceInfo& d = device(freed.dev);
    ++d.memory.frees;
    release(freed, d);
  });
  if (!was_live) {
    DeviceInfo& d = device(e.dev);
    ++d.memory.frees;
    ++d.memory.unknown_frees;
    ++total_.unknown_frees;
  }
}

void Analysis::on_segment_alloc(const TraceEvent& e) {
  Segment replaced;
  if (segments_.erase(e.ptr, &replaced)) {  // its segment_free was lost
    device(replaced.dev).memory.reserved.remove(replaced.size);
    total_.reserved.remove(replaced.size);
  }
  segments_.insert(e.ptr, Segment{e.size, e.dev});
  DeviceInfo& d = device(e.dev);
  if (d.memory.reserved.add(e.size, e.t)) {
    note_peak_phase(d.memory.reserved_peak_phase, e.tid);
    d.memory.allocated_at_reserved_peak = d.memory.allocated.current;
    d.memory.graph_at_reserved_peak = graphs_.reserved(e.dev);
  }
  ++d.memory.segment_allocs;
  if (total_.reserved.add(e.size, e.t)) {
    note_peak_phase(total_.reserved_peak_phase, e.tid);
    total_.allocated_at_reserved_peak = total_.allocated.current;
    total_.graph_at_reserved_peak = graphs_.reserved_total();
  }
  ++total_.segment_allocs;
  phases_.note_reserved(total_.reserved.current);
}

// The driver's graph memory pool is reserved device memory that no segment
// shows: its change is a change of reserved.
void Analysis::on_graph_memory(const TraceEvent& e) {
  const std::uint64_t before = graphs_.on_memory(e);
  DeviceInfo& d = device(e.dev);
  if (e.reserved < before) {
    d.memory.reserved.remove(before - e.reserved);
    total_.reserved.remove(before - e.reserved);
    return;
  }
  const std::uint64_t grown = e.reserved - before;
  if (grown == 0) return;
  if (d.memory.reserved.add(grown, e.t)) {
    note_peak_phase(d.memory.reserved_peak_phase, e.tid);
    d.memory.allocated_at_reserved_peak = d.memory.allocated.current;
    d.memory.graph_at_reserved_peak = e.reserved;
  }
  if (total_.reserved.add(grown, e.t)) {
    note_peak_phase(total_.reserved_peak_phase, e.tid);
    total_.allocated_at_reserved_peak = total_.allocated.current;
    total_.graph_at_reserved_peak = graphs_.reserved_total();
  }
  phases_.note_reserved(total_.reserved.current);
}

void Analysis::on_segment_free(const TraceEvent& e) {
  ++total_.segment_frees;
  Segment freed;
  if (!segments_.erase(e.ptr, &freed)) {
    DeviceInfo& d = device(e.dev);
    ++d.memory.segment_frees;
    ++d.memory.unknown_segment_frees;
    ++total_.unknown_segment_frees;
    return;
  }
  DeviceInfo& d = device(freed.dev);
  ++d.memory.segment_frees;
  d.memory.reserved.remove(freed.size);
  total_.reserved.remove(freed.size);
}

std::vector<LeakGroup> Analysis::leaks(std::size_t max_examples) const {
  std::map<std::uint64_t, LeakGroup> by_stack;
  live_.for_each([&](std::uint64_t ptr, const LiveAllocation& a) {
    LeakGroup& g = by_stack[a.stack];
    if (g.count == 0 || a.t < g.first_t) g.first_t = a.t;
    g.stack = a.stack;
    g.bytes += a.size;
    ++g.count;
    insert_sorted_unique(g.apis, std::string(api_name(a.api)));
    insert_sorted_unique(g.devices, a.dev);
    insert_sorted_unique(g.kinds, a.kind);
    // Keep the oldest few, by (time, address) so the choice is reproducible.
    LeakExample example{ptr, a.size, a.t};
    auto older = [](const LeakExample& x, const LeakExample& y) {
      return std::tie(x.t, x.ptr) < std::tie(y.t, y.ptr);
    };
    auto it = std::lower_bound(g.examples.begin(), g.examples.end(), example, older);
    if (static_cast<std::size_t>(it - g.examples.begin()) < max_examples) {
      g.examples.insert(it, example);
      if (g.examples.size() > max_examples) g.examples.pop_back();
    }
  });
  std::vector<LeakGroup> groups;
  groups.reserve(by_stack.size());
  for (auto& [stack, group] : by_stack) groups.push_back(std::move(group));
  std::stable_sort(groups.begin(), groups.end(), [](const LeakGroup& a, const LeakGroup& b) {
    return std::tie(b.bytes, b.count) < std::tie(a.bytes, a.count);
  });
  return groups;
}

}  // namespace cumemtrace::analyzer
