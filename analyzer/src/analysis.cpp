#include "cumemtrace/analyzer/analysis.h"

#include <algorithm>
#include <tuple>

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

void StackTable::add(const TraceEvent& e) {
  std::vector<OwnedFrame> frames;
  frames.reserve(e.frames.size());
  for (const StackFrame& f : e.frames) {
    OwnedFrame owned;
    owned.ip = f.ip;
    if (f.has_fn) owned.fn = std::string(f.fn);
    owned.module = f.module;
    owned.off = f.off;
    owned.file = f.file;
    owned.line = f.line;
    frames.push_back(std::move(owned));
  }
  stacks_[e.id] = std::move(frames);
}

const std::vector<OwnedFrame>* StackTable::find(std::uint64_t id) const {
  auto it = stacks_.find(id);
  return it == stacks_.end() ? nullptr : &it->second;
}

Analysis::Analysis() { api_names_.emplace_back(kOtherApi); }

DeviceInfo& Analysis::device(int dev) {
  if (last_device_ != nullptr && last_device_->dev == dev) return *last_device_;
  auto [it, inserted] = devices_.try_emplace(dev);
  if (inserted) it->second.dev = dev;
  last_device_ = &it->second;  // std::map nodes never move
  return it->second;
}

std::uint16_t Analysis::intern_api(std::string_view api) {
  if (api_names_[last_api_] == api) return last_api_;
  for (std::size_t i = 0; i < api_names_.size(); ++i) {
    if (api_names_[i] == api) return last_api_ = static_cast<std::uint16_t>(i);
  }
  if (api_names_.size() >= kMaxApiNames) return 0;
  api_names_.emplace_back(api);
  return last_api_ = static_cast<std::uint16_t>(api_names_.size() - 1);
}

void Analysis::consume(const TraceEvent& e) {
  using format::Event;
  if (e.ev != Event::header && e.ev != Event::stack) last_t_ = std::max(last_t_, e.t);
  switch (e.ev) {
    case Event::alloc: on_alloc(e); break;
    case Event::free: on_free(e); break;
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
    case Event::oom:
      ++device(e.dev).memory.ooms;
      ++total_.ooms;
      break;
    case Event::error: ++errors_; break;
    // Phases (mark), pool samples and the end line: for later analyses.
    case Event::header:
    case Event::pool:
    case Event::mark:
    case Event::end:
    case Event::unknown: break;
  }
}

void Analysis::on_alloc(const TraceEvent& e) {
  const LiveAllocation allocation{e.size, e.t, e.stack, e.dev, intern_api(e.api), e.memory_kind};
  // One probe of the live set, not a find() then an insert(): the hottest
  // path of the analysis.
  const auto [slot, inserted] = live_.find_or_insert(e.ptr, allocation);
  if (!inserted) {
    // The same address handed out twice without a free in between: the free
    // was lost (dropped events). Count the old allocation as freed.
    const LiveAllocation stale = *slot;
    *slot = allocation;
    DeviceInfo& old_device = device(stale.dev);
    old_device.memory.allocated.remove(stale.size);
    --old_device.memory.live_allocations;
    total_.allocated.remove(stale.size);
    --total_.live_allocations;
    ++old_device.memory.duplicate_allocs;
    ++total_.duplicate_allocs;
  }
  DeviceInfo& d = device(e.dev);
  d.memory.allocated.add(e.size, e.t);  // std::map nodes never move
  ++d.memory.allocs;
  ++d.memory.live_allocations;
  total_.allocated.add(e.size, e.t);
  ++total_.allocs;
  ++total_.live_allocations;
}

void Analysis::on_free(const TraceEvent& e) {
  ++total_.frees;
  LiveAllocation freed;
  if (!live_.erase(e.ptr, &freed)) {
    DeviceInfo& d = device(e.dev);
    ++d.memory.frees;
    ++d.memory.unknown_frees;
    ++total_.unknown_frees;
    return;
  }
  // Account the free where the allocation was, with the size it was given.
  DeviceInfo& d = device(freed.dev);
  ++d.memory.frees;
  d.memory.allocated.remove(freed.size);
  --d.memory.live_allocations;
  total_.allocated.remove(freed.size);
  --total_.live_allocations;
}

void Analysis::on_segment_alloc(const TraceEvent& e) {
  Segment replaced;
  if (segments_.erase(e.ptr, &replaced)) {  // its segment_free was lost
    device(replaced.dev).memory.reserved.remove(replaced.size);
    total_.reserved.remove(replaced.size);
  }
  segments_.insert(e.ptr, Segment{e.size, e.dev});
  DeviceInfo& d = device(e.dev);
  d.memory.reserved.add(e.size, e.t);
  ++d.memory.segment_allocs;
  total_.reserved.add(e.size, e.t);
  ++total_.segment_allocs;
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
