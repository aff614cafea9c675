// `cumemtrace export --format torch-snapshot`: the trace as the pickle of
// `torch.cuda.memory._dump_snapshot()`, for PyTorch's memory_viz
// (pytorch.org/memory_viz) and anything else that reads snapshots (our own
// `import-torch` among them). EXPORT_FORMATS.md gives the mapping.
//
// What the snapshot must hold, from PyTorch's own sources:
//  - the dict's keys and their order: torch/csrc/cuda/memory_snapshot.cpp
//    (_memory_snapshot_pickled): a segment is {device, address, total_size,
//    allocated_size, active_size, requested_size, stream, segment_type,
//    segment_pool_id, is_expandable, frames, blocks}, a block {address, size,
//    requested_size, state, frames}, a trace entry {action, addr (an oom:
//    device_free), size, stream, time_us, frames}, a frame {name, filename,
//    line}; frames innermost first, C++ frames with their source file's name
//    or "??" and line 0.
//  - what memory_viz reads: torch/utils/viz/MemoryViz.js. annotate_snapshot
//    gives each block the address of the one before it plus its size (the
//    blocks must tile their segment, free ones included); MemoryView (the
//    Allocator State History) walks the trace backwards from the segments and
//    looks up the segment of every block it meets, so every allocation must
//    lie in a segment while it lives; annotate_snapshot merges a
//    free_requested followed at once by its free_completed into one `free`;
//    process_alloc_data (the two timelines) pairs alloc with
//    free_completed and segment_alloc with segment_free by address.
//  - the actions: c10/cuda/CUDACachingAllocator.h, TraceEntry::Action.
//
// One pass over the trace. The dict's keys may come in any order, so
// device_traces comes first, and device 0's entries are written as they are
// read; `segments`, the state at the end, last. device_traces lists one
// device after another, and the pickle memo numbers values in the order
// they are written, so the other devices' entries wait in one temporary
// file each, in a compact form (about 15 bytes an entry), and become pickle
// at the end, after device 0's. Memory: the live allocations and segments
// and the stacks.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumemtrace/address_map.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/units.h"
#include "analyze/report_figures.h"
#include "export/pickle_writer.h"

namespace cumemtrace::analyzer {

namespace {

using pickle_out::ListBatches;
using pickle_out::PickleWriter;

// Beyond this device number an event is left out (a corrupt `dev`): the
// snapshot has a list for every device up to the highest.
constexpr int kMaxDevice = 1023;
constexpr std::uint32_t kNotWritten = 0xffffffffu;
// PyTorch's small pool hands out blocks of up to 1 MiB from 2 MiB segments
// (kSmallBuffer in CUDACachingAllocator.cpp); larger segments are its large pool's.
constexpr std::uint64_t kSmallSegment = std::uint64_t{2} << 20;

enum class Record : std::uint8_t { alloc, free, segment_alloc, segment_free, oom, snapshot };

// The mark `import-torch` writes for PyTorch's `snapshot` action (the moment
// _snapshot() ran): it goes back as one.
constexpr std::string_view kSnapshotMark = "torch.cuda.memory._snapshot";

// One device's entries, in a temporary file until the end.
class Spill {
 public:
  Spill() : file_(std::tmpfile(), &std::fclose) {
    if (!file_) throw std::runtime_error(std::string("cannot create a temporary file: ") + std::strerror(errno));
    buffer_.resize(kBuffer);
  }
  void add(Record r, std::uint64_t addr, std::uint64_t size, std::uint64_t stream, std::uint64_t time_us,
           std::uint64_t stack) {
    if (buffer_.size() - used_ < kMaxRecord) flush();
    char* p = buffer_.data() + used_;
    *p++ = static_cast<char>(r);
    for (std::uint64_t v : {addr, size, stream, time_us, stack}) {
      while (v >= 0x80) {
        *p++ = static_cast<char>((v & 0x7f) | 0x80);
        v >>= 7;
      }
      *p++ = static_cast<char>(v);
    }
    used_ = static_cast<std::size_t>(p - buffer_.data());
    entries_ += r == Record::free ? 2 : 1;  // free_requested and free_completed
  }
  std::uint64_t entries() const { return entries_; }

  // Reads the records back in order: fn(Record, addr, size, stream, time_us, stack).
  template <typename Fn>
  void replay(Fn&& fn) {
    flush();
    std::rewind(file_.get());
    std::string chunk(kBuffer, '\0');
    std::string pending;
    for (;;) {
      const std::size_t n = std::fread(chunk.data(), 1, chunk.size(), file_.get());
      pending.append(chunk.data(), n);
      std::size_t pos = 0;
      // A record takes at most kMaxRecord bytes: until the end of the file,
      // only records wholly read are decoded.
      while (pos < pending.size() && (n == 0 || pending.size() - pos >= kMaxRecord)) {
        const auto r = static_cast<Record>(pending[pos++]);
        std::uint64_t v[5];
        for (auto& x : v) x = get_varint(pending, pos);
        fn(r, v[0], v[1], v[2], v[3], v[4]);
      }
      pending.erase(0, pos);
      if (n == 0) break;
    }
    if (std::ferror(file_.get())) throw std::runtime_error("cannot read back a temporary file");
  }

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 20;
  static constexpr std::size_t kMaxRecord = 51;
  static std::uint64_t get_varint(const std::string& s, std::size_t& pos) {
    std::uint64_t v = 0;
    for (int shift = 0; pos < s.size() && shift < 64; shift += 7) {
      const auto byte = static_cast<unsigned char>(s[pos++]);
      v |= std::uint64_t{byte & 0x7fu} << shift;
      if (byte < 0x80) break;
    }
    return v;
  }
  void flush() {
    if (used_ == 0) return;
    if (std::fwrite(buffer_.data(), 1, used_, file_.get()) != used_) {
      throw std::runtime_error(std::string("cannot write a temporary file: ") + std::strerror(errno));
    }
    used_ = 0;
  }

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  std::string buffer_;  // its first used_ bytes wait to be written
  std::size_t used_ = 0;
  std::uint64_t entries_ = 0;
};

// A snapshot frame: {name, filename, line}.
struct Frame {
  std::string name;
  std::string filename;
  std::uint64_t line = 0;
};

// Ours to PyTorch's: a Python frame is its function, file and line, as
// PyTorch records them; a native frame is named by its function (else by
// its module and offset, else its address: unnamed frames stay apart) and
// located by its source file where the trace has it, else its module ("??"
// when neither is known, PyTorch's spelling). Line 0: unknown, as PyTorch.
Frame to_snapshot_frame(const StackFrame& f) {
  Frame out;
  out.line = f.line.value_or(0);
  if (f.py) {
    out.name = f.has_fn && !f.fn.empty() ? std::string(f.fn) : "??";
    out.filename = f.file.empty() ? "??" : std::string(f.file);
    return out;
  }
  if (f.has_fn && !f.fn.empty()) {
    out.name = f.fn;
  } else if (!f.module.empty() && f.off) {
    out.name = std::string(detail::base_name(f.module)) + "+" + format_hex(*f.off);
  } else {
    out.name = format_hex(f.ip);
  }
  out.filename = !f.file.empty() ? std::string(f.file) : !f.module.empty() ? std::string(f.module) : "??";
  return out;
}

// The strings repeated in every entry, memoized at their first use.
enum Key : std::uint8_t {
  kAction, kAddr, kDeviceFree, kSize, kStream, kTimeUs, kFrames, kName, kFilename, kLine, kDevice, kAddress,
  kTotalSize, kAllocatedSize, kActiveSize, kRequestedSize, kSegmentType, kSegmentPoolId, kIsExpandable, kBlocks,
  kState, kAlloc, kFreeRequested, kFreeCompleted, kSegmentAllocAction, kSegmentFreeAction, kOom, kLarge, kSmall,
  kActiveAllocated, kInactive, kSegments, kDeviceTraces, kSnapshotAction, kAllocatorSettings, kKeyCount
};
constexpr const char* kKeyText[kKeyCount] = {
    "action", "addr", "device_free", "size", "stream", "time_us", "frames", "name", "filename", "line", "device",
    "address", "total_size", "allocated_size", "active_size", "requested_size", "segment_type", "segment_pool_id",
    "is_expandable", "blocks", "state", "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "oom", "large", "small", "active_allocated", "inactive", "segments", "device_traces", "snapshot",
    "allocator_settings"};

class SnapshotWriter {
 public:
  explicit SnapshotWriter(std::ostream& out) : w_(out) { memo_keys_.fill(kNotWritten); }

  void key(Key k) {
    if (memo_keys_[k] != kNotWritten) {
      w_.get(memo_keys_[k]);
      return;
    }
    w_.string(kKeyText[k]);
    memo_keys_[k] = w_.memoize();
  }

  // The frame list of `stack` (its memo after the first time), [] for none.
  void frames(std::uint64_t stack) {
    StackEntry* found = find_stack(stack);
    if (!found || found->frames.empty()) {
      if (empty_frames_ == kNotWritten) {
        w_.empty_list();
        empty_frames_ = w_.memoize();
      } else {
        w_.get(empty_frames_);
      }
      return;
    }
    StackEntry& s = *found;
    if (s.memo != kNotWritten) {
      w_.get(s.memo);
      return;
    }
    w_.empty_list();
    s.memo = w_.memoize();
    ++summary.stacks;
    ListBatches batches(w_, s.frames.size());
    for (std::uint32_t id : s.frames) {
      batches.before_item();
      frame(id);
      batches.after_item();
    }
  }

  void add_stack(const TraceEvent& e) {
    StackEntry& s = stack_slot(e.id);
    s.frames.clear();
    s.memo = kNotWritten;
    for (const StackFrame& f : e.frames) s.frames.push_back(intern(to_snapshot_frame(f)));
  }

  // One device_traces entry (a free: `completed` tells its second half).
  void entry(Record r, std::uint64_t addr, std::uint64_t size, std::uint64_t stream, std::uint64_t t,
             std::uint64_t stack, bool completed) {
    Key action = kAlloc;
    switch (r) {
      case Record::alloc: action = kAlloc; break;
      case Record::free: action = completed ? kFreeCompleted : kFreeRequested; break;
      case Record::segment_alloc: action = kSegmentAllocAction; break;
      case Record::segment_free: action = kSegmentFreeAction; break;
      case Record::oom: action = kOom; break;
      case Record::snapshot: action = kSnapshotAction; break;
    }
    const Key where = r == Record::oom ? kDeviceFree : kAddr;  // PyTorch's oom carries the device's free memory there
    const Key keys[] = {kAction, action, where, kSize, kStream, kTimeUs};
    if (std::all_of(std::begin(keys), std::end(keys), [&](Key k) { return memo_keys_[k] != kNotWritten; })) {
      // Every key memoized: the entry's bytes written at once (the
      // writer's calls one by one were half of the export's time).
      using P = PickleWriter;
      char* p = w_.reserve(8 + 6 * 5 + 4 * 11);
      p = P::put_op(p, pickle_out::kEmptyDict);
      p = P::put_op(p, pickle_out::kMark);
      p = P::put_get(p, memo_keys_[kAction]);
      p = P::put_get(p, memo_keys_[action]);
      p = P::put_get(p, memo_keys_[where]);
      p = P::put_unsigned(p, addr);
      p = P::put_get(p, memo_keys_[kSize]);
      p = P::put_unsigned(p, size);
      p = P::put_get(p, memo_keys_[kStream]);
      p = P::put_unsigned(p, stream);
      p = P::put_get(p, memo_keys_[kTimeUs]);
      p = P::put_unsigned(p, t);
      w_.commit(p);
    } else {
      w_.empty_dict();
      w_.mark();
      key(kAction);
      key(action);
      key(where);
      w_.unsigned_integer(addr);
      key(kSize);
      w_.unsigned_integer(size);
      key(kStream);
      w_.unsigned_integer(stream);
      key(kTimeUs);
      w_.unsigned_integer(t);
    }
    if (stack != 0) {  // PyTorch leaves `frames` out where it has no context
      key(kFrames);
      frames(stack);
    }
    w_.setitems();
  }

  PickleWriter& pickle() { return w_; }
  TorchSnapshotSummary summary;

 private:
  struct StackEntry {
    std::vector<std::uint32_t> frames;
    std::uint32_t memo = kNotWritten;
  };
  // Stack ids are small and dense in the preload's traces: looked up in a
  // vector (a hash lookup per entry was a tenth of the export's time).
  static constexpr std::uint64_t kDenseStacks = std::uint64_t{1} << 20;
  StackEntry& stack_slot(std::uint64_t id) {
    if (id >= kDenseStacks) return stacks_[id];
    if (id >= dense_stacks_.size()) dense_stacks_.resize(id + 1);
    return dense_stacks_[id];
  }
  StackEntry* find_stack(std::uint64_t id) {
    if (id < kDenseStacks) return id < dense_stacks_.size() ? &dense_stacks_[id] : nullptr;
    const auto it = stacks_.find(id);
    return it == stacks_.end() ? nullptr : &it->second;
  }

  std::uint32_t intern(Frame f) {
    std::string k = f.name;
    k += '\0';
    k += f.filename;
    k += '\0';
    k += std::to_string(f.line);
    const auto [it, inserted] = frame_ids_.try_emplace(std::move(k), static_cast<std::uint32_t>(frames_.size()));
    if (inserted) {
      frames_.push_back(std::move(f));
      frame_memo_.push_back(kNotWritten);
    }
    return it->second;
  }

  void frame(std::uint32_t id) {
    if (frame_memo_[id] != kNotWritten) {
      w_.get(frame_memo_[id]);
      return;
    }
    const Frame& f = frames_[id];
    w_.empty_dict();
    frame_memo_[id] = w_.memoize();
    w_.mark();
    key(kName);
    w_.string(f.name);
    key(kFilename);
    w_.string(f.filename);
    key(kLine);
    w_.unsigned_integer(f.line);
    w_.setitems();
  }

  PickleWriter w_;
  std::array<std::uint32_t, kKeyCount> memo_keys_{};
  std::uint32_t empty_frames_ = kNotWritten;
  std::vector<StackEntry> dense_stacks_;
  std::unordered_map<std::uint64_t, StackEntry> stacks_;  // ids from kDenseStacks on
  std::unordered_map<std::string, std::uint32_t> frame_ids_;
  std::vector<Frame> frames_;
  std::vector<std::uint32_t> frame_memo_;
};

// Where one device's entries go. Device 0's are written into the pickle as
// they come (its list is the first of device_traces, which comes first in
// the dict): no temporary file for a one-device trace. The other devices'
// wait in a Spill, to be written after it.
class DeviceSink {
 public:
  explicit DeviceSink(SnapshotWriter* direct) : direct_(direct) {
    if (!direct_) spill_ = std::make_unique<Spill>();
  }
  void add(Record r, std::uint64_t addr, std::uint64_t size, std::uint64_t stream, std::uint64_t t,
           std::uint64_t stack) {
    if (spill_) {
      spill_->add(r, addr, size, stream, t, stack);
      return;
    }
    // A free is requested and completed at once: nothing of ours waits
    // for other streams (MemoryViz.js shows the pair as one `free`).
    put(r, addr, size, stream, t, stack, false);
    if (r == Record::free) put(r, addr, size, stream, t, stack, true);
  }
  std::uint64_t entries() const { return spill_ ? spill_->entries() : entries_; }

  // Device 0: ends the open batch. The count was unknown, so each batch is
  // MARK ... APPENDS, even the last of one item.
  void finish_direct() {
    if (in_batch_ > 0) direct_->pickle().appends();
    in_batch_ = 0;
  }
  // Another device: its list's items.
  void write_spilled(SnapshotWriter& s) {
    ListBatches batches(s.pickle(), spill_->entries());
    auto one = [&](Record r, std::uint64_t addr, std::uint64_t size, std::uint64_t stream, std::uint64_t t,
                   std::uint64_t stack, bool completed) {
      batches.before_item();
      s.entry(r, addr, size, stream, t, stack, completed);
      batches.after_item();
    };
    spill_->replay([&](Record r, std::uint64_t addr, std::uint64_t size, std::uint64_t stream, std::uint64_t t,
                       std::uint64_t stack) {
      one(r, addr, size, stream, t, stack, false);
      if (r == Record::free) one(r, addr, size, stream, t, stack, true);
    });
  }

 private:
  void put(Record r, std::uint64_t addr, std::uint64_t size, std::uint64_t stream, std::uint64_t t,
           std::uint64_t stack, bool completed) {
    PickleWriter& w = direct_->pickle();
    if (in_batch_ == 0) w.mark();
    direct_->entry(r, addr, size, stream, t, stack, completed);
    ++entries_;
    if (++in_batch_ == ListBatches::kBatchSize) {
      w.appends();
      in_batch_ = 0;
      w.boundary();
    }
  }

  SnapshotWriter* direct_;
  std::unique_ptr<Spill> spill_;
  std::uint64_t entries_ = 0;
  std::uint64_t in_batch_ = 0;
};

struct LiveSegment;

struct LiveAlloc {
  std::uint64_t size = 0;   // requested
  std::uint64_t block = 0;  // what it holds of its segment
  std::uint64_t stack = 0;
  std::uint64_t stream = 0;
  int dev = 0;
  bool own_segment = false;  // in no segment of the trace: given one of its own
  bool held = false;         // in the trace's segment that starts at `holder`
  std::uint64_t holder = 0;
  // That segment (a map node: it stays put until the segment goes, and
  // drop_segment moves its allocations first): no lookup per free.
  LiveSegment* holder_segment = nullptr;
};

struct LiveSegment {
  std::uint64_t size = 0;
  int dev = 0;
  bool own = false;  // an allocation's own segment
  std::uint64_t allocations = 0;  // live ones it holds
  bool freed = false;  // its segment_free came while it held some: written after the last goes
};

class Exporter {
 public:
  Exporter(TraceReader& reader, std::ostream& out) : reader_(reader), s_(out) {}

  TorchSnapshotSummary run() {
    start_us_ = reader_.header().start_unix_ns / 1000;
    begin();
    while (const TraceEvent* e = reader_.next()) {
      using format::Event;
      switch (e->ev) {
        case Event::stack: s_.add_stack(*e); break;
        case Event::alloc: on_alloc(*e); break;
        case Event::free: on_free(*e); break;
        case Event::segment_alloc: on_segment_alloc(*e); break;
        case Event::segment_free: on_segment_free(*e); break;
        case Event::mark:
          // On the device of the last event: PyTorch writes it into each
          // device's trace, the importer makes one mark of each.
          if (e->kind == "instant" && e->name == kSnapshotMark) {
            if (DeviceSink* d = device(last_dev_)) d->add(Record::snapshot, 0, 0, 0, time_us(e->t), 0);
          }
          break;
        case Event::oom:
          if (DeviceSink* d = device(e->dev)) {
            d->add(Record::oom, e->device_free, e->size, e->stream.value_or(0), time_us(e->t), e->stack);
          }
          break;
        default: break;
      }
    }
    write();
    return s_.summary;
  }

 private:
  std::uint64_t time_us(std::uint64_t t) const { return start_us_ + t / 1000; }

  DeviceSink* device(int dev) {
    if (dev < 0 || dev > kMaxDevice) {
      ++s_.summary.skipped_events;
      return nullptr;
    }
    last_dev_ = dev;
    if (static_cast<std::size_t>(dev) >= sinks_.size()) sinks_.resize(static_cast<std::size_t>(dev) + 1);
    auto& sink = sinks_[static_cast<std::size_t>(dev)];
    if (!sink) sink = std::make_unique<DeviceSink>(nullptr);
    return sink.get();
  }

  // The segment of `dev` that holds [ptr, ptr+size), if any.
  std::map<std::uint64_t, LiveSegment>::iterator segment_holding(int dev, std::uint64_t ptr, std::uint64_t size) {
    auto it = segments_.upper_bound(ptr);
    if (it == segments_.begin()) return segments_.end();
    --it;
    const LiveSegment& seg = it->second;
    if (seg.dev != dev || seg.own || seg.freed || ptr - it->first + size > seg.size) return segments_.end();
    return it;
  }

  // A segment of the trace goes: a segment_free, the one its lost free left
  // behind. Allocations still live in it (a trace that lost their frees)
  // would be blocks in no segment, which memory_viz cannot draw: each gets a
  // segment of its own from here on.
  // `next`: a segment_alloc at the same start (the free of this one was
  // lost), written here; the allocations that fit in it stay in it.
  void drop_segment(std::map<std::uint64_t, LiveSegment>::iterator it, std::uint64_t t, std::uint64_t stack,
                    const LiveSegment* next = nullptr) {
    const std::uint64_t start = it->first;
    const LiveSegment seg = it->second;
    device(seg.dev)->add(Record::segment_free, start, seg.size, 0, time_us(t), stack);
    segments_.erase(it);
    if (next) {
      segments_[start] = *next;
      device(next->dev)->add(Record::segment_alloc, start, next->size, 0, time_us(t), stack);
    }
    if (seg.allocations == 0) return;
    std::vector<std::uint64_t> orphans;
    live_.for_each([&](std::uint64_t ptr, const LiveAlloc& a) {
      if (a.held && a.holder == start && a.dev == seg.dev) orphans.push_back(ptr);
    });
    std::sort(orphans.begin(), orphans.end());
    for (std::uint64_t ptr : orphans) {
      LiveAlloc& a = *live_.find(ptr);
      if (next && next->dev == a.dev && ptr - start + a.block <= next->size) {
        LiveSegment& moved_to = segments_[start];
        ++moved_to.allocations;
        a.holder_segment = &moved_to;
        continue;
      }
      a.held = false;
      a.own_segment = true;
      ++s_.summary.own_segments;
      const std::uint64_t size = std::max<std::uint64_t>(a.block, 1);
      segments_[ptr] = LiveSegment{size, a.dev, true};
      device(a.dev)->add(Record::segment_alloc, ptr, size, 0, time_us(t), 0);
    }
  }

  void release(std::uint64_t ptr, const LiveAlloc& a, const TraceEvent& e) {
    DeviceSink* d = device(a.dev);
    d->add(Record::free, ptr, a.size, e.stream.value_or(a.stream), time_us(e.t), e.stack);
    if (a.own_segment) {
      d->add(Record::segment_free, ptr, std::max<std::uint64_t>(a.block, 1), 0, time_us(e.t), e.stack);
      segments_.erase(ptr);
    } else if (a.held) {
      LiveSegment& holder = *a.holder_segment;
      if (holder.allocations > 0 && --holder.allocations == 0 && holder.freed) {
        d->add(Record::segment_free, a.holder, holder.size, 0, time_us(e.t), 0);
        segments_.erase(a.holder);
      }
    }
  }

  void on_alloc(const TraceEvent& e) {
    DeviceSink* d = device(e.dev);
    if (!d) return;
    // The same address twice without a free between (a lost free): the old
    // one is freed here, as the analysis counts it.
    if (const LiveAlloc* old = live_.find(e.ptr)) {
      release(e.ptr, *old, e);
      live_.erase(e.ptr);
    }
    LiveAlloc a{e.size, e.block.value_or(e.size), e.stack, e.stream.value_or(0), e.dev, false};
    if (const auto holder = segment_holding(e.dev, e.ptr, a.block); holder != segments_.end()) {
      a.held = true;
      a.holder = holder->first;
      a.holder_segment = &holder->second;
      ++holder->second.allocations;
    } else {
      // No segment of the trace holds it (a passthrough trace without
      // segment lines, host memory): memory_viz needs one, so it is its own.
      a.own_segment = true;
      ++s_.summary.own_segments;
      const std::uint64_t size = std::max<std::uint64_t>(a.block, 1);  // a segment of 0 bytes holds nothing
      segments_[e.ptr] = LiveSegment{size, e.dev, true};
      d->add(Record::segment_alloc, e.ptr, size, 0, time_us(e.t), e.stack);
    }
    d->add(Record::alloc, e.ptr, a.size, a.stream, time_us(e.t), e.stack);
    live_.insert(e.ptr, a);
  }

  void on_free(const TraceEvent& e) {
    // Not live: the analysis ignores it too.
    if (!live_.erase_with(e.ptr, [&](const LiveAlloc& a) { release(e.ptr, a, e); })) ++s_.summary.unknown_frees;
  }

  void on_segment_alloc(const TraceEvent& e) {
    DeviceSink* d = device(e.dev);
    if (!d) return;
    const LiveSegment next{e.size, e.dev, false};
    if (const auto old = segments_.find(e.ptr); old != segments_.end() && !old->second.own) {
      // Its segment_free was lost: freed here, as the analysis counts it.
      // Between the two entries its allocations are in no segment.
      drop_segment(old, e.t, e.stack, &next);
      return;
    }
    segments_[e.ptr] = next;
    d->add(Record::segment_alloc, e.ptr, e.size, 0, time_us(e.t), e.stack);
  }

  void on_segment_free(const TraceEvent& e) {
    const auto it = segments_.find(e.ptr);
    if (it == segments_.end() || it->second.own || it->second.freed) {
      ++s_.summary.unknown_segment_frees;
      return;
    }
    if (it->second.allocations > 0) {
      // Allocations still live in it (their frees come later, or were
      // lost): memory_viz draws every block in a segment, so the segment
      // stays until the last of them goes.
      it->second.freed = true;
      ++s_.summary.deferred_segment_frees;
      return;
    }
    drop_segment(it, e.t, e.stack);
  }

  void begin();
  void write();
  void write_segments();
  void write_allocator_settings();
  void plain_value(const nlohmann::ordered_json& v, int depth);

  TraceReader& reader_;
  SnapshotWriter s_;
  std::uint64_t start_us_ = 0;
  int last_dev_ = 0;
  std::vector<std::unique_ptr<DeviceSink>> sinks_;
  AddressMap<LiveAlloc> live_;  // the analysis' own map: flat, fast
  std::map<std::uint64_t, LiveSegment> segments_;
};

// The dict, its device_traces and device 0's list opened: device 0's
// entries follow as the trace is read.
void Exporter::begin() {
  PickleWriter& w = s_.pickle();
  w.empty_dict();
  w.memoize();
  w.mark();
  s_.key(kDeviceTraces);
  w.empty_list();
  w.memoize();
  w.mark();  // the device lists: their number is known at the end only
  w.empty_list();
  w.memoize();
  sinks_.push_back(std::make_unique<DeviceSink>(&s_));
}

void Exporter::write() {
  PickleWriter& w = s_.pickle();
  sinks_[0]->finish_direct();
  for (std::size_t dev = 0; dev < sinks_.size(); ++dev) {
    if (dev > 0) {
      w.empty_list();
      w.memoize();
      if (sinks_[dev]) sinks_[dev]->write_spilled(s_);
    }
    if (sinks_[dev] && sinks_[dev]->entries() > 0) {
      s_.summary.entries += sinks_[dev]->entries();
      ++s_.summary.devices;
    }
    w.boundary();
  }
  w.appends();
  s_.key(kSegments);
  write_segments();
  write_allocator_settings();
  w.setitems();
  w.finish();
}

// A trace imported from a snapshot keeps the snapshot's allocator_settings
// in its header's config (snapshot_import.cpp): they go back, so that
// `advise` and `replay` know the run's settings again. Other traces have none.
void Exporter::write_allocator_settings() {
  const std::string& config = reader_.header().config_json;
  if (config.empty()) return;
  const auto parsed = nlohmann::ordered_json::parse(config, nullptr, false);
  if (!parsed.is_object()) return;
  const auto it = parsed.find("allocator_settings");
  if (it == parsed.end() || !it->is_object() || it->empty()) return;
  s_.key(kAllocatorSettings);
  plain_value(*it, 0);
}

// A JSON value as Python's pickler writes the same plain value; depth is
// bounded (the importer cut it already).
void Exporter::plain_value(const nlohmann::ordered_json& v, int depth) {
  PickleWriter& w = s_.pickle();
  if (v.is_object() && depth < 8) {
    w.empty_dict();
    if (v.empty()) return;
    w.mark();
    for (const auto& [k, item] : v.items()) {
      w.string(k);
      plain_value(item, depth + 1);
    }
    w.setitems();
  } else if (v.is_array() && depth < 8) {
    w.empty_list();
    ListBatches items(w, v.size());
    for (const auto& item : v) {
      items.before_item();
      plain_value(item, depth + 1);
      items.after_item();
    }
  } else if (v.is_boolean()) {
    v.get<bool>() ? w.boolean_true() : w.boolean_false();
  } else if (v.is_number_unsigned()) {
    w.unsigned_integer(v.get<std::uint64_t>());
  } else if (v.is_number_integer()) {
    w.integer(v.get<std::int64_t>());
  } else if (v.is_number_float()) {
    w.floating(v.get<double>());
  } else if (v.is_string()) {
    w.string(v.get<std::string>());
  } else {
    w.none();
  }
}

// The state at the end: each live segment, its blocks tiling it in address
// order, the live allocations as active_allocated and the gaps as inactive.
void Exporter::write_segments() {
  PickleWriter& w = s_.pickle();
  std::vector<std::pair<std::uint64_t, const LiveAlloc*>> live;
  live.reserve(live_.size());
  live_.for_each([&](std::uint64_t ptr, const LiveAlloc& a) { live.emplace_back(ptr, &a); });
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  struct Block {
    std::uint64_t address, size, requested, stack;
    bool active;
  };
  w.empty_list();
  w.memoize();
  ListBatches segments(w, segments_.size());
  auto next_live = live.begin();
  for (const auto& [start, seg] : segments_) {
    const std::uint64_t end = start + seg.size;
    std::vector<Block> blocks;
    std::uint64_t cursor = start, allocated = 0, requested = 0;
    while (next_live != live.end() && next_live->first < start) ++next_live;
    for (; next_live != live.end() && next_live->first < end; ++next_live) {
      const auto& [ptr, a] = *next_live;
      if (a->dev != seg.dev || ptr < cursor) continue;  // overlaps the one before: a corrupt trace
      if (ptr > cursor) blocks.push_back({cursor, ptr - cursor, 0, 0, false});
      const std::uint64_t size = std::min(std::max(a->block, a->size), end - ptr);
      blocks.push_back({ptr, size, std::min(a->size, size), a->stack, true});
      allocated += size;
      requested += std::min(a->size, size);
      cursor = ptr + size;
    }
    if (cursor < end) blocks.push_back({cursor, end - cursor, 0, 0, false});

    segments.before_item();
    w.empty_dict();
    w.mark();
    s_.key(kDevice);
    w.integer(seg.dev);
    s_.key(kAddress);
    w.unsigned_integer(start);
    s_.key(kTotalSize);
    w.unsigned_integer(seg.size);
    s_.key(kAllocatedSize);
    w.unsigned_integer(allocated);
    s_.key(kActiveSize);
    w.unsigned_integer(allocated);
    s_.key(kRequestedSize);
    w.unsigned_integer(requested);
    s_.key(kStream);
    w.integer(0);
    s_.key(kSegmentType);
    s_.key(seg.size <= kSmallSegment ? kSmall : kLarge);
    s_.key(kSegmentPoolId);  // (0, 0): the default pool, not a private one (CUDA graphs)
    w.integer(0);
    w.integer(0);
    w.tuple2();
    s_.key(kIsExpandable);
    w.boolean_false();
    s_.key(kFrames);
    s_.frames(0);
    s_.key(kBlocks);
    w.empty_list();
    ListBatches items(w, blocks.size());
    for (const Block& b : blocks) {
      items.before_item();
      w.empty_dict();
      w.mark();
      s_.key(kAddress);
      w.unsigned_integer(b.address);
      s_.key(kSize);
      w.unsigned_integer(b.size);
      s_.key(kRequestedSize);
      w.unsigned_integer(b.requested);
      s_.key(kState);
      s_.key(b.active ? kActiveAllocated : kInactive);
      s_.key(kFrames);
      s_.frames(b.stack);
      w.setitems();
      items.after_item();
    }
    w.setitems();
    segments.after_item();
    ++s_.summary.segments;
  }
}

}  // namespace

TorchSnapshotSummary export_torch_snapshot(TraceReader& reader, std::ostream& out) {
  return Exporter(reader, out).run();
}

}  // namespace cumemtrace::analyzer
