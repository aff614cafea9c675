#include "commands/replay.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <memory>
#include <unordered_map>

#include <fnmatch.h>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/growth.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "cumemtrace/analyzer/units.h"
#include "cumemtrace/caching_allocators.h"
#include "cumemtrace/pool/device_pool.h"
#include "cumemtrace/pool/simulated_upstream.h"

namespace cumemtrace::analyzer {

namespace {

using pool::kUnlimited;

// A trace's pointers become slots: numbers reused once freed.
class SlotTable {
 public:
  std::uint32_t take() {
    if (!free_.empty()) {
      const std::uint32_t slot = free_.back();
      free_.pop_back();
      return slot;
    }
    return next_++;
  }
  void give_back(std::uint32_t slot) { free_.push_back(slot); }
  std::uint32_t count() const { return next_; }

 private:
  std::vector<std::uint32_t> free_;
  std::uint32_t next_ = 0;
};

bool in_device_pool(format::MemoryKind kind) {
  return kind != format::MemoryKind::managed && kind != format::MemoryKind::host_pinned;
}

}  // namespace

namespace {

// Which caching allocator's library a stack passes through (index + 1 into
// kCachingAllocatorLibraries; 0 none), and whether it passes through PyTorch.
struct StackOrigin {
  std::uint8_t caching_allocator = 0;
  bool torch = false;
};

StackOrigin origin_of(const std::vector<StackFrame>& frames) {
  StackOrigin origin;
  for (const StackFrame& f : frames) {
    if (f.py) {
      // torch/nn/modules/module.py and the like: Python code of PyTorch.
      if (f.file.find("/torch/") != std::string_view::npos) origin.torch = true;
      continue;
    }
    if (f.module.empty()) continue;
    // Most frames name neither: a substring test first, fnmatch only where
    // one of the libraries' names occurs.
    constexpr std::string_view kHints[] = {"torch", "c10", "cupy", "rmm", "xla", "jax", "tensorflow"};
    if (std::none_of(std::begin(kHints), std::end(kHints),
                     [&](std::string_view hint) { return f.module.find(hint) != std::string_view::npos; })) {
      continue;
    }
    const std::string module(f.module);
    if (module.find("/libtorch") != std::string::npos || module.find("/libc10") != std::string::npos) {
      origin.torch = true;
    }
    if (origin.caching_allocator != 0) continue;
    for (std::size_t i = 0; i < std::size(kCachingAllocatorLibraries); ++i) {
      if (::fnmatch(std::string(kCachingAllocatorLibraries[i].pattern).c_str(), module.c_str(), 0) == 0) {
        origin.caching_allocator = static_cast<std::uint8_t>(i + 1);
        break;
      }
    }
  }
  return origin;
}

}  // namespace

struct ReplayTraceBuilder::State {
  ReplayTrace trace;
  SlotTable slots;
  std::vector<std::unordered_map<std::uint64_t, std::uint32_t>> live;  // per device: ptr -> slot
  std::vector<std::uint64_t> last_stream;                               // per device
  std::unordered_map<std::uint64_t, StackOrigin> stacks;                // stack id -> origin

  std::uint16_t device_index(int dev) {
    for (std::size_t i = 0; i < trace.devices.size(); ++i) {
      if (trace.devices[i].dev == dev) return static_cast<std::uint16_t>(i);
    }
    if (trace.devices.size() >= UINT16_MAX) throw TraceError(trace.path + ": more than 65535 devices");
    trace.devices.push_back({dev, 0, 0});
    live.emplace_back();
    last_stream.push_back(0);
    return static_cast<std::uint16_t>(trace.devices.size() - 1);
  }

  void free_slot(std::uint16_t device, std::uint32_t slot, const TraceEvent& e) {
    ReplayOp op;
    op.type = e.stream ? ReplayOp::Type::free_async : ReplayOp::Type::free;
    op.device = device;
    op.slot = slot;
    op.stream = e.stream.value_or(0);
    trace.ops.push_back(op);
    slots.give_back(slot);
  }

  void header(const TraceHeader& h) {
    ReplayOrigin& origin = trace.origin;
    origin.argv = h.argv;
    if (!h.config_json.empty()) {
      const nlohmann::json config = nlohmann::json::parse(h.config_json, nullptr, false);
      if (config.is_object() && config.value("source", std::string()) == "torch_snapshot") {
        origin.torch_snapshot = true;
        // PyTorch >= 2.1 snapshots keep the setting the run had
        // (allocator_settings.PYTORCH_CUDA_ALLOC_CONF, "" for the defaults).
        const auto settings = config.find("allocator_settings");
        if (settings != config.end() && settings->is_object()) {
          const auto conf = settings->find("PYTORCH_CUDA_ALLOC_CONF");
          if (conf != settings->end() && conf->is_string()) {
            origin.torch_alloc_conf = conf->get<std::string>();
            origin.run_setting_known = true;
          }
        }
      }
    }
    // PyTorch 2.6+ reads PYTORCH_ALLOC_CONF, then the older name.
    if (origin.torch_snapshot) return;
    // A trace of ours: the preload records these variables when they are set.
    origin.run_setting_known = true;
    origin.torch_alloc_conf = h.env("PYTORCH_ALLOC_CONF").value_or(h.env("PYTORCH_CUDA_ALLOC_CONF").value_or(""));
    // "forceUncachedAllocator": any value, even empty, turns the cache off.
    origin.torch_uncached = h.env("PYTORCH_NO_CUDA_MEMORY_CACHING").has_value();
  }

  // Past `limit` allocations only the count goes on (what was built is
  // dropped): `report` replays small traces only, and need not hold a large
  // one's operations.
  std::uint64_t limit = UINT64_MAX;
  bool over_limit = false;

  void alloc(const TraceEvent& e) {
    if (!in_device_pool(e.memory_kind)) {
      ++trace.skipped_kind;
      return;
    }
    if (over_limit) {
      ++trace.allocs;
      return;
    }
    const std::uint16_t device = device_index(e.dev);
    auto& by_ptr = live[device];
    if (const auto it = by_ptr.find(e.ptr); it != by_ptr.end()) {
      // The free of the previous allocation here was lost (a dropped
      // event); it must have happened before this alloc.
      ++trace.lost_frees;
      free_slot(device, it->second, e);
      by_ptr.erase(it);
    }
    ReplayOp op;
    op.type = e.stream ? ReplayOp::Type::alloc_async : ReplayOp::Type::alloc;
    op.device = device;
    op.slot = slots.take();
    op.size = e.size;
    op.stream = e.stream.value_or(0);
    if (e.stream) last_stream[device] = *e.stream;
    trace.ops.push_back(op);
    by_ptr.emplace(e.ptr, op.slot);
    if (++trace.allocs > limit) {
      over_limit = true;
      trace.ops = {};
      live.assign(live.size(), {});
      slots = SlotTable{};
    }

    ReplayOrigin& origin = trace.origin;
    constexpr std::uint64_t k2MiB = std::uint64_t{2} << 20;
    if (e.size >= k2MiB && e.size % k2MiB == 0) ++origin.allocs_in_2mib_multiples;
    if (e.stack == 0) return;
    ++origin.allocs_with_stack;
    const auto it = stacks.find(e.stack);
    if (it == stacks.end()) return;
    if (it->second.torch) origin.torch_frames = true;
    if (it->second.caching_allocator != 0) {
      ++origin.allocs_from_caching_allocator;
      if (origin.caching_allocator.empty()) {
        origin.caching_allocator = kCachingAllocatorLibraries[it->second.caching_allocator - 1].framework;
      }
    }
  }

  void free(const TraceEvent& e) {
    if (!in_device_pool(e.memory_kind)) {
      ++trace.skipped_kind;
      return;
    }
    if (over_limit) return;
    const std::uint16_t device = device_index(e.dev);
    auto& by_ptr = live[device];
    const auto it = by_ptr.find(e.ptr);
    if (it == by_ptr.end()) {
      ++trace.unknown_frees;
      return;
    }
    free_slot(device, it->second, e);
    by_ptr.erase(it);
    ++trace.frees;
  }

  // Where each mark name's occurrences fall in `ops` (names folded; the
  // first few distinct names only: step marks recur from the start).
  static constexpr std::size_t kMaxMarkNames = 16;
  std::vector<std::pair<std::string, std::vector<std::size_t>>> marks;

  void mark(const TraceEvent& e) {
    // A range's end (`pop`) begins nothing, as for the growth report; nor
    // does a CUDA graph launch (a mark naming its executable graph).
    if (over_limit || (e.kind != "push" && e.kind != "instant") || e.exec != 0) return;
    std::string folded = fold_numbers(e.name);
    for (auto& [name, at] : marks) {
      if (name == folded) {
        at.push_back(trace.ops.size());
        return;
      }
    }
    if (marks.size() < kMaxMarkNames) marks.emplace_back(std::move(folded), std::vector<std::size_t>{trace.ops.size()});
  }

  void oom(const TraceEvent& e) {
    if (over_limit) return;
    const std::uint16_t device = device_index(e.dev);
    trace.ooms.push_back({e.t, e.dev, e.size});
    ReplayDevice& d = trace.devices[device];
    if (d.usable_at_oom == 0) d.usable_at_oom = e.reserved + e.device_free;
    // The request as the run made it: on the stream its allocations used
    // last (the event does not name one), freed again at once.
    ReplayOp op;
    op.type = ReplayOp::Type::probe;
    op.device = device;
    op.slot = slots.take();
    op.size = e.size;
    op.stream = last_stream[device];
    trace.ops.push_back(op);
    slots.give_back(op.slot);
  }
};

ReplayTraceBuilder::ReplayTraceBuilder(std::string path) : state_(std::make_unique<State>()) {
  state_->trace.path = std::move(path);
}

ReplayTraceBuilder::~ReplayTraceBuilder() = default;

void ReplayTraceBuilder::set_allocation_limit(std::uint64_t allocations) { state_->limit = allocations; }

bool ReplayTraceBuilder::over_limit() const { return state_->over_limit; }

void ReplayTraceBuilder::consume(const TraceEvent& e) {
  State& s = *state_;
  switch (e.ev) {
    case format::Event::header:
      if (e.header) s.header(*e.header);
      break;
    case format::Event::device: s.trace.devices[s.device_index(e.dev)].total = e.total; break;
    case format::Event::stack: s.stacks[e.id] = origin_of(e.frames); break;
    case format::Event::alloc: s.alloc(e); break;
    case format::Event::free: s.free(e); break;
    case format::Event::oom: s.oom(e); break;
    case format::Event::mark: s.mark(e); break;
    default: break;
  }
}

ReplayTrace ReplayTraceBuilder::finish(const TraceReader& reader, std::uint64_t peak_reserved,
                                       std::uint64_t peak_allocated) {
  ReplayTrace& trace = state_->trace;
  trace.pool_mode = reader.header().pool;
  if (trace.origin.argv.empty()) trace.origin.argv = reader.header().argv;
  // Devices in ordinal order, whatever order the trace met them in.
  std::vector<std::uint16_t> order(trace.devices.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint16_t>(i);
  std::sort(order.begin(), order.end(),
            [&](std::uint16_t a, std::uint16_t b) { return trace.devices[a].dev < trace.devices[b].dev; });
  std::vector<std::uint16_t> new_index(order.size());
  std::vector<ReplayDevice> sorted(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    new_index[order[i]] = static_cast<std::uint16_t>(i);
    sorted[i] = trace.devices[order[i]];
  }
  trace.devices = std::move(sorted);
  for (ReplayOp& op : trace.ops) op.device = new_index[op.device];

  trace.slots = state_->slots.count();
  // The steps: the most frequent mark, the first seen on a tie.
  constexpr std::size_t kMinSteps = 3;
  const std::vector<std::size_t>* steps = nullptr;
  for (const auto& [name, at] : state_->marks) {
    if (at.size() >= kMinSteps && (!steps || at.size() > steps->size())) {
      steps = &at;
      trace.step_mark = name;
    }
  }
  if (steps && !state_->over_limit) trace.step_starts = *steps;
  trace.trace_peak_reserved = peak_reserved;
  trace.trace_peak_allocated = peak_allocated;
  trace.truncated = reader.stats().truncated;
  return std::move(trace);
}

ReplayTrace load_replay_trace(const std::string& path) {
  TraceReader reader(path);
  Analysis analysis;  // the trace's own figures
  ReplayTraceBuilder builder(path);
  while (const TraceEvent* e = reader.next()) {
    analysis.consume(*e);
    builder.consume(*e);
  }
  return builder.finish(reader, analysis.total().reserved.peak, analysis.total().allocated.peak);
}

namespace {

// Reserved memory, kept exactly from the pool's segment callbacks (they also
// fire inside the out-of-memory ladder, between a release and a retry).
struct ReservedTracker {
  std::vector<std::size_t> current;
  std::vector<std::size_t> peak;
  std::size_t total = 0;
  std::size_t total_peak = 0;
  bool total_peak_moved = false;
};

class ReplayObserver final : public pool::PoolObserver {
 public:
  ReplayObserver(ReservedTracker& tracker, std::size_t index) : tracker_(tracker), index_(index) {}
  void on_segment_alloc(int, pool::DevicePtr, std::size_t size) override {
    const std::size_t now = tracker_.current[index_] += size;
    tracker_.peak[index_] = std::max(tracker_.peak[index_], now);
    tracker_.total += size;
    if (tracker_.total > tracker_.total_peak) {
      tracker_.total_peak = tracker_.total;
      tracker_.total_peak_moved = true;
    }
  }
  void on_segment_free(int, pool::DevicePtr, std::size_t size) override {
    tracker_.current[index_] -= size;
    tracker_.total -= size;
  }

 private:
  ReservedTracker& tracker_;
  std::size_t index_;
};

// All devices' pools as one: the figures of the pooled fragmentation
// metrics, and the counters of what the pools asked of the device.
pool::PoolStats pooled_stats(const std::vector<std::unique_ptr<pool::DevicePool>>& pools) {
  pool::PoolStats sum;
  for (const auto& p : pools) {
    const pool::PoolStats s = p->stats();
    sum.upstream_allocs += s.upstream_allocs;
    sum.upstream_frees += s.upstream_frees;
    sum.synchronizes += s.synchronizes;
    sum.allocated += s.allocated;
    sum.requested += s.requested;
    sum.reserved += s.reserved;
    sum.cached_free += s.cached_free;
    sum.pending_free += s.pending_free;
    sum.largest_free = std::max(sum.largest_free, s.largest_free);
    sum.free_blocks += s.free_blocks;
    sum.inactive_split += s.inactive_split;
  }
  return sum;
}

pool::FragmentationMetrics pooled_fragmentation(const std::vector<std::unique_ptr<pool::DevicePool>>& pools) {
  return pool::fragmentation_of(pooled_stats(pools));
}

}  // namespace

ReplayResult replay(const ReplayTrace& trace, const ReplayOptions& options) {
  const std::size_t n = trace.devices.size();
  ReservedTracker reserved;
  reserved.current.assign(n, 0);
  reserved.peak.assign(n, 0);
  std::vector<std::unique_ptr<pool::SimulatedUpstream>> upstreams;
  std::vector<std::unique_ptr<ReplayObserver>> observers;
  std::vector<std::unique_ptr<pool::DevicePool>> pools;
  ReplayResult result;
  result.devices.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const ReplayDevice& d = trace.devices[i];
    std::size_t capacity = options.capacity.value_or(d.total > 0 ? d.total : kUnlimited);
    if (i < options.device_capacities.size() && options.device_capacities[i] != 0) {
      capacity = options.device_capacities[i];
    }
    upstreams.push_back(std::make_unique<pool::SimulatedUpstream>(capacity, /*vm=*/true,
                                                                options.config.expandable_page_size));
    observers.push_back(std::make_unique<ReplayObserver>(reserved, i));
    pools.push_back(std::make_unique<pool::DevicePool>(*upstreams[i], options.config, d.dev, observers[i].get()));
    result.devices[i].dev = d.dev;
    result.devices[i].capacity = capacity;
  }

  struct Live {
    pool::DevicePtr ptr = 0;
    std::size_t size = 0;
    std::size_t block = 0;
    bool failed = false;
  };
  std::vector<Live> slots(trace.slots);
  std::vector<std::size_t> allocated(n, 0), allocated_blocks(n, 0);
  std::size_t total_allocated = 0, total_blocks = 0;

  const bool device_wide = options.device_wide;
  const bool stream_ordered = options.stream_ordered && !device_wide;
  // The steady state begins with the step after the first quarter (as the
  // workload programs count it: tests/apps/workload_device.h); the pool's
  // counters there and at the end give what its steps cost.
  ReplayResult::SteadySteps& steady = result.steady;
  steady.steps = trace.step_starts.size();
  steady.steady = steady.steps - steady.steps / 4;
  const std::size_t steady_from = steady.steps > 0 ? trace.step_starts[steady.steps / 4] : trace.ops.size();
  pool::PoolStats at_steady;
  for (std::size_t index = 0; index <= trace.ops.size(); ++index) {
    if (index == steady_from && steady.steps > 0) at_steady = pooled_stats(pools);
    if (index == trace.ops.size()) break;
    const ReplayOp& op = trace.ops[index];
    pool::DevicePool& p = *pools[op.device];
    DeviceReplay& dr = result.devices[op.device];
    Live& live = slots[op.slot];
    ReplayOp::Type type = op.type;
    std::uint64_t stream = op.stream;
    if (device_wide && type == ReplayOp::Type::alloc_async) type = ReplayOp::Type::alloc;
    if (device_wide && type == ReplayOp::Type::free_async) type = ReplayOp::Type::free;
    if (stream_ordered && type == ReplayOp::Type::alloc) type = ReplayOp::Type::alloc_async, stream = 0;
    if (stream_ordered && type == ReplayOp::Type::free) type = ReplayOp::Type::free_async, stream = 0;
    switch (type) {
      case ReplayOp::Type::probe: {
        // Served or not, it leaves nothing live: the run never had it.
        ++result.probes;
        dr.peak_demand = std::max(dr.peak_demand, allocated[op.device] + op.size);
        const pool::Allocation a = device_wide ? p.allocate(op.size) : p.allocate_async(op.size, stream);
        if (!a.ok()) {
          ++result.failed_probes;
          ++dr.failed_probes;
          break;
        }
        if (a.ptr != 0) {
          const pool::FreeResult f = device_wide ? p.free(a.ptr) : p.free_async(a.ptr, stream);
          if (f.status != pool::FreeStatus::ok) ++result.invalid_frees;
        }
        break;
      }
      case ReplayOp::Type::alloc:
      case ReplayOp::Type::alloc_async: {
        reserved.total_peak_moved = false;
        const pool::Allocation a =
            type == ReplayOp::Type::alloc ? p.allocate(op.size) : p.allocate_async(op.size, stream);
        ++result.allocs;
        if (!a.ok()) {
          live = Live{0, 0, 0, true};
          ++result.ooms;
          ++dr.ooms;
          break;
        }
        live = Live{a.ptr, op.size, a.block, false};
        allocated[op.device] += op.size;
        allocated_blocks[op.device] += a.block;
        total_allocated += op.size;
        total_blocks += a.block;
        dr.peak_allocated = std::max(dr.peak_allocated, allocated[op.device]);
        dr.peak_demand = std::max(dr.peak_demand, allocated[op.device]);
        dr.peak_allocated_blocks = std::max(dr.peak_allocated_blocks, allocated_blocks[op.device]);
        result.peak_allocated = std::max(result.peak_allocated, total_allocated);
        result.peak_allocated_blocks = std::max(result.peak_allocated_blocks, total_blocks);
        if (reserved.total_peak_moved) result.at_peak = pooled_fragmentation(pools);
        break;
      }
      case ReplayOp::Type::free:
      case ReplayOp::Type::free_async: {
        if (live.failed) {
          ++result.frees_of_failed;
          live = Live{};
          break;
        }
        if (live.ptr != 0) {  // a zero-byte allocation has no pointer to free
          const pool::FreeResult f =
              type == ReplayOp::Type::free ? p.free(live.ptr) : p.free_async(live.ptr, stream);
          if (f.status != pool::FreeStatus::ok) ++result.invalid_frees;
        }
        allocated[op.device] -= live.size;
        allocated_blocks[op.device] -= live.block;
        total_allocated -= live.size;
        total_blocks -= live.block;
        live = Live{};
        break;
      }
    }
  }

  if (steady.steps > 0) {
    const pool::PoolStats at_end = pooled_stats(pools);
    steady.upstream_allocs = at_end.upstream_allocs - at_steady.upstream_allocs;
    steady.upstream_frees = at_end.upstream_frees - at_steady.upstream_frees;
    steady.synchronizes = at_end.synchronizes - at_steady.synchronizes;
  }
  result.peak_reserved = reserved.total_peak;
  result.at_end = pooled_fragmentation(pools);
  for (std::size_t i = 0; i < n; ++i) {
    DeviceReplay& dr = result.devices[i];
    dr.peak_reserved = reserved.peak[i];
    dr.end = pools[i]->stats();
    result.upstream_allocs += dr.end.upstream_allocs;
    result.upstream_frees += dr.end.upstream_frees;
    result.synchronizes += dr.end.synchronizes;
    result.orderings += dr.end.orderings;
  }
  return result;
}

MinCapacity find_min_capacity(const ReplayTrace& trace, const pool::PoolConfig& config, std::size_t granularity) {
  ReplayOptions options;
  options.config = config;
  return find_min_capacity(trace, options, granularity);
}

MinCapacity find_min_capacity(const ReplayTrace& trace, const ReplayOptions& base, std::size_t granularity,
                              const ReplayResult* given_unlimited) {
  MinCapacity out;
  ReplayOptions options = base;
  options.capacity = kUnlimited;
  options.device_capacities.clear();
  std::optional<ReplayResult> own_unlimited;
  if (given_unlimited == nullptr) {
    own_unlimited = replay(trace, options);
    ++out.replays;
  }
  const ReplayResult& unlimited = given_unlimited != nullptr ? *given_unlimited : *own_unlimited;
  std::size_t peak_live = 0, peak_demand = 0, peak_reserved = 0;
  for (const DeviceReplay& d : unlimited.devices) {
    peak_live = std::max(peak_live, d.peak_allocated);
    peak_demand = std::max(peak_demand, d.peak_demand);
    peak_reserved = std::max(peak_reserved, d.peak_reserved);
  }
  out.peak_live = peak_live;
  out.peak_demand = peak_demand;
  if (!served_everything(unlimited)) return out;  // not even an unlimited device: nothing to search
  if (peak_demand == 0) {
    out.found = true;
    return out;
  }
  auto runs = [&](std::size_t capacity) {
    options.capacity = capacity;
    ++out.replays;
    return served_everything(replay(trace, options));
  };
  // Invariant: `low` fails, `high` runs. Below the peak of live bytes
  // nothing can run; the unlimited replay's peak usually runs (but policy
  // may depend on the capacity, so check, and widen if it does not).
  std::size_t low = peak_demand > granularity ? (peak_demand - 1) / granularity * granularity : 0;
  std::size_t high = (peak_reserved + granularity - 1) / granularity * granularity;
  high = std::max(high, low + granularity);
  for (int widen = 0; !runs(high); ++widen) {
    if (widen == 8) return out;
    low = high;
    high *= 2;
  }
  while (high - low > granularity) {
    const std::size_t mid = low + (high - low) / granularity / 2 * granularity;
    if (runs(mid)) high = mid;
    else low = mid;
  }
  out.capacity = high;
  out.found = true;
  return out;
}

std::optional<std::size_t> parse_capacity(std::string_view text) {
  std::size_t start = 0;
  std::size_t end = text.size();
  while (start < end && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  while (end > start && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (text.substr(start, end - start) == "unlimited") return pool::kUnlimited;
  return parse_size(text);  // units.h: the one size syntax of every option
}

pool::PoolConfigParse parse_replay_pool_conf(std::string_view text) {
  if (text == "pytorch") return pool::PoolConfigParse{pool::pytorch_pool_config(), {}};
  return pool::parse_pool_config(text);
}

}  // namespace cumemtrace::analyzer
