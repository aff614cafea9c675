#include "torch/snapshot_import.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/trace_format.h"
#include "torch/reserved_ranges.h"
#include "torch/snapshot_values.h"
#include "torch/stack_interner.h"

namespace cumemtrace::analyzer {

namespace {

using snapshot::Action;
using snapshot::as_u64;
using snapshot::emit;
using snapshot::parse_action;
using snapshot::Json;
using snapshot::ReservedRanges;
using snapshot::StackInterner;
using snapshot::to_json;
using pickle::Type;
using pickle::Value;

// The names our events give to what PyTorch's allocator did.
constexpr const char* kAllocApi = "CUDACachingAllocator.malloc";
constexpr const char* kFreeApi = "CUDACachingAllocator.free";
// PyTorch obtains ordinary segments with cudaMalloc, and maps physical
// memory into expandable segments with cuMemMap (expandable_segments:True).
constexpr const char* kSegmentApi = "cudaMalloc";
constexpr const char* kSegmentFreeApi = "cudaFree";
constexpr const char* kMapApi = "cuMemMap";
constexpr const char* kUnmapApi = "cuMemUnmap";
constexpr std::uint64_t kNsPerUs = 1000;
// Without time_us, events are spaced this far apart, in trace order.
constexpr std::uint64_t kSyntheticStepNs = 1000;

// One entry of a device trace, decoded.
struct Entry {
  Action action = Action::alloc;
  int dev = 0;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::optional<Value> frames;
  std::uint64_t t = 0;
  std::optional<std::uint64_t> block;  // alloc: the block size, when the final state tells it
};

struct LiveBlock {
  std::uint64_t size = 0;                // requested
  std::optional<std::uint64_t> block;    // PyTorch's block, when known
  std::optional<Value> frames;           // where it was allocated, when known
  std::uint64_t stream = 0;
};

struct DeviceState {
  ReservedRanges reserved;
  std::unordered_map<std::uint64_t, LiveBlock> live;
  std::uint64_t allocated = 0;  // sum of live sizes
  std::map<std::uint64_t, bool> expandable;  // segment start -> is_expandable
};

class Converter {
 public:
  Converter(const Value& root, const TorchImportOptions& options, std::string& out)
      : root_(root), options_(options), out_(out), stacks_(out, options.max_frames) {}

  TorchImportStats run() {
    if (!root_.is(Type::dict)) {
      throw TorchImportError("not a PyTorch memory snapshot: the pickle holds a " +
                             std::string(pickle::type_name(root_.type())) + ", not a dict");
    }
    const std::optional<Value> traces = root_.get("device_traces");
    const std::optional<Value> segments = root_.get("segments");
    if (!traces || !traces->is(Type::list)) {
      throw TorchImportError("not a PyTorch memory snapshot: no 'device_traces' list");
    }
    if (!segments || !segments->is(Type::list)) {
      throw TorchImportError("not a PyTorch memory snapshot: no 'segments' list");
    }
    read_entries(*traces);
    read_final_state(*segments);
    undo_trace();
    write_header();
    write_seed();
    for (Entry& e : entries_) replay(e);
    write_end();
    stats_.stacks = stacks_.count();
    return stats_;
  }

 private:
  void skip(const std::string& why) {
    if (stats_.skipped_events++ == 0) stats_.first_skip_reason = why;
  }
  void inconsistent(const std::string& why) {
    if (stats_.inconsistencies++ == 0) stats_.first_inconsistency = why;
  }
  DeviceState& device(int dev) { return devices_[dev]; }

  void read_entries(const Value& traces) {
    std::vector<std::optional<std::uint64_t>> times;  // time_us per entry
    for (std::size_t d = 0; d < traces.size(); ++d) {
      const Value list = traces.item(d);
      if (!list.is(Type::list)) throw TorchImportError("device_traces[" + std::to_string(d) + "] is not a list");
      if (d > static_cast<std::size_t>(std::numeric_limits<int>::max())) break;
      const int dev = static_cast<int>(d);
      if (list.size() > 0) device(dev);
      for (std::size_t i = 0; i < list.size(); ++i) {
        ++stats_.trace_events;
        const Value item = list.item(i);
        const std::string where = "device_traces[" + std::to_string(d) + "][" + std::to_string(i) + "]";
        std::optional<std::string_view> action_name;
        if (auto a = item.get("action")) action_name = a->as_string();
        if (!action_name) {
          skip(where + " has no 'action'");
          continue;
        }
        const std::optional<Action> action = parse_action(*action_name);
        if (!action) {
          skip(where + ": unknown action '" + std::string(*action_name) + "'");
          continue;
        }
        Entry e;
        e.action = *action;
        e.dev = dev;
        // PyTorch writes an oom's free device memory as `device_free` in
        // place of `addr` (memory_snapshot.cpp, _memory_snapshot_pickled);
        // older snapshots as `addr`.
        std::optional<Value> addr_value = item.get("addr");
        if (*action == Action::oom) {
          if (auto device_free = item.get("device_free")) addr_value = device_free;
        }
        const std::optional<std::uint64_t> addr = as_u64(addr_value);
        const std::optional<std::uint64_t> size = as_u64(item.get("size"));
        if (!addr || !size) {
          skip(where + ": 'addr' and 'size' must be non-negative integers");
          continue;
        }
        e.addr = *addr;
        e.size = *size;
        e.stream = as_u64(item.get("stream")).value_or(0);
        e.frames = item.get("frames");
        times.push_back(as_u64(item.get("time_us")));
        entries_.push_back(std::move(e));
      }
    }
    assign_times(times);
  }

  // t from time_us when every event has it: per device clamped to be
  // non-decreasing (the ring buffer is in event order, whatever the clock
  // says), then devices merged by time. Otherwise t counts events.
  void assign_times(const std::vector<std::optional<std::uint64_t>>& times) {
    stats_.synthetic_times = std::any_of(times.begin(), times.end(), [](const auto& t) { return !t; });
    if (stats_.synthetic_times) {
      for (std::size_t i = 0; i < entries_.size(); ++i) entries_[i].t = i * kSyntheticStepNs;
      return;
    }
    if (entries_.empty()) return;
    std::uint64_t base = std::numeric_limits<std::uint64_t>::max();
    for (const auto& t : times) base = std::min(base, *t);
    start_unix_ns_ = base > std::numeric_limits<std::uint64_t>::max() / kNsPerUs ? 0 : base * kNsPerUs;
    std::uint64_t last = 0;
    int last_dev = -1;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].dev != last_dev) last = 0;
      last_dev = entries_[i].dev;
      const std::uint64_t us = *times[i] - base;
      const std::uint64_t ns = us > std::numeric_limits<std::uint64_t>::max() / kNsPerUs
                                   ? std::numeric_limits<std::uint64_t>::max()
                                   : us * kNsPerUs;
      last = std::max(last, ns);
      entries_[i].t = last;
    }
    std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.t < b.t; });
  }

  void read_final_state(const Value& segments) {
    for (std::size_t s = 0; s < segments.size(); ++s) {
      const Value seg = segments.item(s);
      const std::string where = "segments[" + std::to_string(s) + "]";
      const std::optional<std::uint64_t> address = as_u64(seg.get("address"));
      const std::optional<std::uint64_t> total = as_u64(seg.get("total_size"));
      if (!seg.is(Type::dict) || !address || !total) {
        throw TorchImportError("not a PyTorch memory snapshot: " + where + " has no address and total_size");
      }
      const std::optional<std::uint64_t> dev_number = as_u64(seg.get("device"));
      const int dev = dev_number && *dev_number <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
                          ? static_cast<int>(*dev_number)
                          : 0;
      DeviceState& state = device(dev);
      if (!state.reserved.add(*address, *total).removed.empty()) inconsistent(where + " overlaps another segment");
      bool expandable = false;
      if (auto e = seg.get("is_expandable")) expandable = e->as_bool().value_or(false);
      state.expandable[*address] = expandable;
      const std::uint64_t stream = as_u64(seg.get("stream")).value_or(0);
      const std::optional<Value> blocks = seg.get("blocks");
      if (!blocks) continue;
      for (std::size_t b = 0; b < blocks->size(); ++b) {
        const Value block = blocks->item(b);
        std::optional<std::string_view> block_state;
        if (auto st = block.get("state")) block_state = st->as_string();
        // active_allocated, active_pending_free: still allocated by the
        // application's count (free_completed has not happened).
        if (!block_state || !block_state->starts_with("active")) continue;
        const std::optional<std::uint64_t> addr = as_u64(block.get("address"));
        const std::optional<std::uint64_t> size = as_u64(block.get("size"));
        if (!addr || !size) {
          inconsistent(where + ": a block without address or size");
          continue;
        }
        LiveBlock live;
        live.block = *size;
        live.size = as_u64(block.get("requested_size")).value_or(*size);
        live.frames = block.get("frames");
        live.stream = stream;
        state.live[*addr] = live;
      }
    }
  }

  // Walks the trace backwards from the final state: what remains is the
  // state when the trace began. On the way, each alloc whose block survives
  // to the end learns that block's size.
  void undo_trace() {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      Entry& e = *it;
      DeviceState& state = device(e.dev);
      switch (e.action) {
        case Action::alloc: {
          const auto live = state.live.find(e.addr);
          if (live == state.live.end()) {
            inconsistent("the block allocated at " + format_hex(e.addr) + " is neither freed later nor live at the end");
            break;
          }
          e.block = live->second.block;
          state.live.erase(live);
          break;
        }
        case Action::free_completed: {
          LiveBlock block;
          block.size = e.size;
          block.stream = e.stream;
          if (!state.live.try_emplace(e.addr, block).second) {
            inconsistent("the block at " + format_hex(e.addr) + " is freed while live at the end");
          }
          break;
        }
        case Action::segment_alloc:
        case Action::segment_map:
          if (state.reserved.remove(e.addr, e.size).removed.empty()) {
            inconsistent("the segment at " + format_hex(e.addr) + " is neither freed later nor reserved at the end");
          }
          break;
        case Action::segment_free:
        case Action::segment_unmap: state.reserved.add(e.addr, e.size); break;
        default: break;
      }
    }
  }

  void write_header() {
    Json config;
    config["source"] = "torch_snapshot";
    config["snapshot"] = options_.source;
    config["allocator"] = "PyTorch CUDACachingAllocator";
    config["times"] = stats_.synthetic_times ? "event_order" : "time_us";
    std::size_t budget = 4096;
    const std::optional<Value> settings = root_.get("allocator_settings");
    config["allocator_settings"] = settings ? to_json(*settings, 0, budget) : Json(nullptr);
    Json h;
    h["ev"] = "header";
    h["format"] = format::kFormatName;
    h["version"] = format::kVersion;
    h["pid"] = 0;
    h["ppid"] = 0;
    h["host"] = "";
    h["exe"] = "";
    h["argv"] = Json::array();
    h["start_unix_ns"] = start_unix_ns_;
    h["pool"] = "caching";
    h["config"] = std::move(config);
    emit(h, out_);
    stats_.devices = devices_.size();
    for (const auto& [dev, state] : devices_) {
      Json d;
      d["ev"] = "device";
      d["t"] = 0;
      d["dev"] = dev;
      d["name"] = "CUDA device " + std::to_string(dev) + " (PyTorch snapshot)";
      d["total"] = 0;  // a snapshot does not record the device's capacity
      emit(d, out_);
    }
  }

  // The state when the trace began, at t=0, in address order.
  void write_seed() {
    for (auto& [dev, state] : devices_) {
      for (const auto& [start, size] : state.reserved.ranges()) {
        write_segment(Action::segment_alloc, dev, start, size, 0);
        ++stats_.seeded_segments;
        stats_.seeded_segment_bytes += size;
      }
      std::vector<std::pair<std::uint64_t, LiveBlock>> blocks(state.live.begin(), state.live.end());
      std::sort(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [addr, block] : blocks) {
        write_alloc(dev, addr, block, 0);
        state.allocated += block.size;
        ++stats_.seeded_allocs;
        stats_.seeded_alloc_bytes += block.size;
      }
    }
  }

  void replay(Entry& e) {
    DeviceState& state = device(e.dev);
    last_t_ = e.t;
    switch (e.action) {
      case Action::alloc: {
        LiveBlock block{e.size, e.block, e.frames, e.stream};
        const auto [it, inserted] = state.live.try_emplace(e.addr, block);
        if (!inserted) {
          inconsistent("alloc at the live address " + format_hex(e.addr));
          state.allocated -= it->second.size;
          it->second = block;
        }
        state.allocated += e.size;
        write_alloc(e.dev, e.addr, block, e.t);
        ++stats_.allocs;
        break;
      }
      case Action::free_completed: {
        const auto it = state.live.find(e.addr);
        if (it == state.live.end()) {
          inconsistent("free of " + format_hex(e.addr) + ", which is not live");
          break;
        }
        Json line = memory_op("free", e.t, e.dev, kFreeApi, e.addr, it->second.size, stacks_.intern(e.frames));
        line["stream"] = format_hex(e.stream);
        emit(line, out_);
        state.allocated -= it->second.size;
        state.live.erase(it);
        ++stats_.frees;
        break;
      }
      case Action::segment_alloc:
      case Action::segment_map: {
        const ReservedRanges::Change change = state.reserved.add(e.addr, e.size);
        if (!change.removed.empty()) inconsistent("segment at " + format_hex(e.addr) + " over a reserved one");
        apply(change, e.dev, e.t);
        write_segment(e.action, e.dev, e.addr, e.size, e.t);
        ++stats_.segment_allocs;
        break;
      }
      case Action::segment_free:
      case Action::segment_unmap: {
        const ReservedRanges::Change change = state.reserved.remove(e.addr, e.size);
        if (change.removed.empty()) {
          inconsistent("segment_free of " + format_hex(e.addr) + ", which is not reserved");
          break;
        }
        apply(change, e.dev, e.t, e.action == Action::segment_unmap);
        ++stats_.segment_frees;
        break;
      }
      case Action::free_requested: ++stats_.free_requests; break;
      case Action::snapshot: {
        Json line;
        line["ev"] = "mark";
        line["t"] = e.t;
        line["tid"] = 0;
        line["name"] = "torch.cuda.memory._snapshot";
        line["kind"] = "instant";
        emit(line, out_);
        ++stats_.marks;
        break;
      }
      case Action::oom: write_oom(e, state); break;
    }
  }

  // Writes the segment_free / segment_alloc lines a change of the reserved
  // ranges stands for.
  void apply(const ReservedRanges::Change& change, int dev, std::uint64_t t, bool unmap = false) {
    for (const auto& [start, size] : change.removed) {
      write_segment(unmap ? Action::segment_unmap : Action::segment_free, dev, start, size, t);
    }
    for (const auto& [start, size] : change.added) {
      write_segment(unmap ? Action::segment_map : Action::segment_alloc, dev, start, size, t);
    }
  }

  void write_segment(Action action, int dev, std::uint64_t start, std::uint64_t size, std::uint64_t t) {
    const bool grows = action == Action::segment_alloc || action == Action::segment_map;
    bool expandable = action == Action::segment_map || action == Action::segment_unmap;
    if (!expandable) {
      // A seeded range inside an expandable segment was mapped, not cudaMalloc'd.
      const auto& flags = device(dev).expandable;
      auto it = flags.upper_bound(start);
      if (it != flags.begin()) expandable = std::prev(it)->second;
    }
    Json line;
    line["ev"] = grows ? "segment_alloc" : "segment_free";
    line["t"] = t;
    line["dev"] = dev;
    line["ptr"] = format_hex(start);
    line["size"] = size;
    line["api"] = grows ? (expandable ? kMapApi : kSegmentApi) : (expandable ? kUnmapApi : kSegmentFreeApi);
    emit(line, out_);
  }

  Json memory_op(const char* ev, std::uint64_t t, int dev, const char* api, std::uint64_t ptr, std::uint64_t size,
                 std::uint64_t stack) {
    Json line;
    line["ev"] = ev;
    line["t"] = t;
    line["tid"] = 0;
    line["api"] = api;
    line["kind"] = "device";
    line["dev"] = dev;
    line["ptr"] = format_hex(ptr);
    line["size"] = size;
    line["stack"] = stack;
    return line;
  }

  void write_alloc(int dev, std::uint64_t addr, const LiveBlock& block, std::uint64_t t) {
    Json line = memory_op("alloc", t, dev, kAllocApi, addr, block.size, stacks_.intern(block.frames));
    if (block.block) line["block"] = *block.block;
    line["stream"] = format_hex(block.stream);
    emit(line, out_);
  }

  // PyTorch's oom entry: `size` is the rounded request, `addr` the device's
  // free memory as cudaMemGetInfo said. The rest comes from the state now.
  void write_oom(const Entry& e, const DeviceState& state) {
    const std::uint64_t reserved = state.reserved.total();
    const std::uint64_t cached_free = reserved > state.allocated ? reserved - state.allocated : 0;
    const std::uint64_t largest = largest_free(state);
    const std::uint64_t device_free = e.addr;
    Json line;
    line["ev"] = "oom";
    line["t"] = e.t;
    line["tid"] = 0;
    line["api"] = kAllocApi;
    line["dev"] = e.dev;
    line["size"] = e.size;
    line["block"] = e.size;
    line["allocated"] = state.allocated;
    line["reserved"] = reserved;
    line["cached_free"] = cached_free;
    line["largest_free"] = largest;
    line["device_free"] = device_free;
    // The capacity is not recorded; this is what the process could reach.
    line["device_total"] = reserved + device_free;
    line["cause"] = cached_free + device_free >= e.size && largest < e.size ? "fragmentation" : "capacity";
    line["stack"] = stacks_.intern(e.frames);
    line["stream"] = format_hex(e.stream);
    emit(line, out_);
    ++stats_.ooms;
  }

  // The largest gap between live blocks inside one reserved range (blocks
  // whose PyTorch size is unknown count their requested size).
  static std::uint64_t largest_free(const DeviceState& state) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> used;
    used.reserve(state.live.size());
    for (const auto& [addr, b] : state.live) used.emplace_back(addr, addr + b.block.value_or(b.size));
    std::sort(used.begin(), used.end());
    std::uint64_t largest = 0;
    auto u = used.begin();
    for (const auto& [start, size] : state.reserved.ranges()) {
      const std::uint64_t end = start + size;
      while (u != used.end() && u->second <= start) ++u;
      std::uint64_t cursor = start;
      for (auto v = u; v != used.end() && v->first < end; ++v) {
        if (v->first > cursor) largest = std::max(largest, v->first - cursor);
        cursor = std::max(cursor, v->second);
      }
      if (end > cursor) largest = std::max(largest, end - cursor);
    }
    return largest;
  }

  void write_end() {
    std::uint64_t live = 0, live_bytes = 0;
    for (const auto& [dev, state] : devices_) {
      live += state.live.size();
      live_bytes += state.allocated;
    }
    stats_.live_at_end = live;
    stats_.live_bytes_at_end = live_bytes;
    Json line;
    line["ev"] = "end";
    line["t"] = last_t_;
    line["reason"] = "snapshot";  // the state was captured here; the program went on
    line["live"] = live;
    line["live_bytes"] = live_bytes;
    line["dropped"] = 0;
    emit(line, out_);
  }

  const Value& root_;
  const TorchImportOptions& options_;
  std::string& out_;
  StackInterner stacks_;
  std::vector<Entry> entries_;
  std::map<int, DeviceState> devices_;
  TorchImportStats stats_;
  std::uint64_t start_unix_ns_ = 0;
  std::uint64_t last_t_ = 0;
};

}  // namespace

TorchImportStats import_torch_snapshot(const pickle::Value& root, const TorchImportOptions& options,
                                       std::string& out) {
  return Converter(root, options, out).run();
}

}  // namespace cumemtrace::analyzer
