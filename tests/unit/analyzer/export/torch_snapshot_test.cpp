// `cumemtrace export --format torch-snapshot`: the pickle holds only the
// opcodes PyTorch's own snapshots hold, in frames as Python's unpickler
// needs them; its blocks tile their segments and every allocation lies in a
// segment while it lives (what MemoryViz.js relies on); and `import-torch`
// of it gives back the figures of the trace it came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "torch/pickle_reader.h"
#include "torch/snapshot_import.h"

namespace cumemtrace::analyzer {
namespace {

using testing::TempDir;
using testing::write_file;

// The opcodes of the six real snapshots of ../shared/traces/torch, found with
//   /usr/bin/python3 -c 'import pickletools, glob; print(sorted({op.name
//     for f in glob.glob("/work/shared/traces/torch/*.pickle")
//     for op, arg, pos in pickletools.genops(open(f, "rb").read())}))'
// which printed APPEND APPENDS BINFLOAT BINGET BININT BININT1 BININT2
// BINUNICODE EMPTY_DICT EMPTY_LIST FRAME LONG1 LONG_BINGET MARK MEMOIZE
// NEWFALSE PROTO SETITEMS SHORT_BINUNICODE STOP TUPLE2.
const std::map<unsigned char, const char*> kPyTorchOpcodes = {
    {'a', "APPEND"},     {'e', "APPENDS"},    {'G', "BINFLOAT"},    {'h', "BINGET"},
    {'J', "BININT"},     {'K', "BININT1"},    {'M', "BININT2"},     {'X', "BINUNICODE"},
    {'}', "EMPTY_DICT"}, {']', "EMPTY_LIST"}, {0x95, "FRAME"},      {0x8a, "LONG1"},
    {'j', "LONG_BINGET"}, {'(', "MARK"},      {0x94, "MEMOIZE"},    {0x89, "NEWFALSE"},
    {0x80, "PROTO"},     {'u', "SETITEMS"},   {0x8c, "SHORT_BINUNICODE"}, {'.', "STOP"},
    {0x86, "TUPLE2"}};

std::uint64_t le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

// Walks the opcode stream: each opcode's argument is skipped by its known
// length, FRAME lengths must end on an opcode boundary right before the next
// FRAME (or the end), STOP must be the last byte. Returns the opcodes seen.
std::set<unsigned char> opcodes_of(const std::string& p) {
  std::set<unsigned char> seen;
  std::size_t i = 0, frame_end = 0;
  bool in_frame = false;
  while (i < p.size()) {
    if (in_frame && i == frame_end) in_frame = false;
    const auto op = static_cast<unsigned char>(p[i++]);
    seen.insert(op);
    if (in_frame && op == 0x95) ADD_FAILURE() << "FRAME inside a frame at byte " << i - 1;
    std::size_t arg = 0;
    switch (op) {
      case 0x80: case 'K': case 'h': arg = 1; break;
      case 'M': arg = 2; break;
      case 'J': case 'j': arg = 4; break;
      case 'G': arg = 8; break;
      case 0x95:
        frame_end = i + 8 + le(p, i, 8);
        in_frame = true;
        arg = 8;
        break;
      case 0x8a: case 0x8c: arg = 1 + static_cast<unsigned char>(p[i]); break;
      case 'X': arg = 4 + le(p, i, 4); break;
      case '(': case '}': case ']': case 'u': case 'a': case 'e': case 0x94: case 0x89: case 0x86: case '.': break;
      default: ADD_FAILURE() << "opcode 0x" << std::hex << int(op) << " at byte " << std::dec << i - 1; return seen;
    }
    i += arg;
    if (in_frame && i > frame_end) ADD_FAILURE() << "an opcode straddles the frame ending at byte " << frame_end;
    if (op == '.' && i != p.size()) ADD_FAILURE() << "STOP at byte " << i - 1 << " of " << p.size();
  }
  EXPECT_FALSE(in_frame && i != frame_end) << "the last frame runs past the end";
  return seen;
}

std::string export_file(const std::string& path, TorchSnapshotSummary* summary = nullptr) {
  TraceReader reader(path);
  std::ostringstream out;
  const TorchSnapshotSummary s = export_torch_snapshot(reader, out);
  if (summary) *summary = s;
  return out.str();
}

std::string golden(const std::string& name) { return std::string(CUMEMTRACE_GOLDEN_TRACES) + "/" + name; }

const char* const kGoldenTraces[] = {"normal_leak.jsonl", "python_frames.jsonl",      "training_loop.jsonl",
                                     "two_devices.jsonl", "oom_fragmentation.jsonl",  "shared_helper.jsonl",
                                     "job.rank0.jsonl",   "python_frames_v2.jsonl"};

// A trace of `allocs` live-then-freed allocations with many distinct
// stacks: more than one APPENDS batch and many frames of 64 KiB.
std::string big_trace(const TempDir& dir, int allocs) {
  std::ostringstream t;
  t << testing::header_line() << "\n";
  t << R"({"ev":"segment_alloc","t":1,"dev":0,"ptr":"0x7f0000000000","size":1073741824,"api":"cuMemAlloc_v2"})" << "\n";
  for (int i = 0; i < allocs; ++i) {
    if (i % 7 == 0) {
      t << R"({"ev":"stack","id":)" << i + 1 << R"(,"frames":[{"ip":"0x1","fn":"f)" << i
        << R"(","module":"/a.so","off":"0x1"},{"py":true,"fn":"step","file":"/w/train.py","line":)" << i << "}]}\n";
    }
    char ptr[32];
    std::snprintf(ptr, sizeof ptr, "0x%llx", 0x7f0000000000ULL + 4096ULL * static_cast<unsigned>(i));
    t << R"({"ev":"alloc","t":)" << 10 + 2 * i << R"(,"tid":1,"api":"cudaMalloc","kind":"device","dev":0,"ptr":")"
      << ptr << R"(","size":4000,"block":4096,"stack":)" << (i / 7) * 7 + 1 << "}\n";
    if (i % 3 != 0) {
      t << R"({"ev":"free","t":)" << 11 + 2 * i << R"(,"tid":1,"api":"cudaFree","kind":"device","dev":0,"ptr":")"
        << ptr << R"(","size":4000,"stack":0})" << "\n";
    }
  }
  t << testing::end_line(100000000) << "\n";
  const std::string path = dir / "big.jsonl";
  write_file(path, t.str());
  return path;
}

// A segment freed while an allocation in it is live (its free came later,
// or was lost), and a segment_alloc over a live one (its free lost).
std::string orphan_trace(const TempDir& dir) {
  const std::string path = dir / "orphans.jsonl";
  write_file(path, testing::join_lines({
      testing::header_line(),
      R"({"ev":"segment_alloc","t":1000,"dev":0,"ptr":"0x7f0000000000","size":2097152,"api":"cudaMalloc"})",
      testing::alloc_line(2000, "0x7f0000000000", 1000),
      testing::alloc_line(3000, "0x7f0000100000", 2000),
      R"({"ev":"segment_free","t":4000,"dev":0,"ptr":"0x7f0000000000","size":2097152})",
      testing::free_line(5000, "0x7f0000000000", 1000),
      R"({"ev":"segment_alloc","t":6000,"dev":0,"ptr":"0x7f0000200000","size":1048576,"api":"cudaMalloc"})",
      testing::alloc_line(7000, "0x7f0000200000", 512),
      R"({"ev":"segment_alloc","t":8000,"dev":0,"ptr":"0x7f0000200000","size":1048576,"api":"cudaMalloc"})",
      testing::end_line(9000)}));
  return path;
}

TEST(TorchSnapshotExport, WritesOnlyTheOpcodesOfPyTorchsSnapshotsInWholeFrames) {
  TempDir dir;
  std::vector<std::string> traces;
  for (const char* name : kGoldenTraces) traces.push_back(golden(name));
  traces.push_back(big_trace(dir, 2500));
  for (const std::string& path : traces) {
    SCOPED_TRACE(path);
    const std::string p = export_file(path);
    ASSERT_GE(p.size(), 3u);
    EXPECT_EQ(static_cast<unsigned char>(p[0]), 0x80);
    EXPECT_EQ(p[1], 4) << "protocol 4, as the snapshots";
    for (unsigned char op : opcodes_of(p)) {
      EXPECT_TRUE(kPyTorchOpcodes.count(op)) << "opcode 0x" << std::hex << int(op) << " is in no PyTorch snapshot";
    }
  }
  // The big one spans frames of about 64 KiB, as Python writes them.
  const std::string p = export_file(traces.back());
  EXPECT_GT(p.size(), std::size_t{3} << 16);
  EXPECT_EQ(static_cast<unsigned char>(p[2]), 0x95);
  EXPECT_LE(le(p, 3, 8), std::size_t{70} << 10);
}

std::uint64_t u64(const pickle::Value& dict, const char* key) {
  const auto v = dict.get(key);
  EXPECT_TRUE(v && v->as_int()) << key;
  return v && v->as_int() ? static_cast<std::uint64_t>(*v->as_int()) : 0;
}
std::string str(const pickle::Value& dict, const char* key) {
  const auto v = dict.get(key);
  EXPECT_TRUE(v && v->as_string()) << key;
  return v && v->as_string() ? std::string(*v->as_string()) : "";
}

TEST(TorchSnapshotExport, BlocksTileSegmentsAndEveryAllocationLivesInASegment) {
  TempDir dir;
  std::vector<std::string> traces;
  for (const char* name : kGoldenTraces) traces.push_back(golden(name));
  traces.push_back(big_trace(dir, 1200));
  traces.push_back(orphan_trace(dir));
  for (const std::string& path : traces) {
    SCOPED_TRACE(path);
    const pickle::Document doc = pickle::Document::parse(export_file(path));
    const pickle::Value root = doc.root();
    const auto segments = root.get("segments");
    const auto traces_list = root.get("device_traces");
    ASSERT_TRUE(segments && segments->is(pickle::Type::list));
    ASSERT_TRUE(traces_list && traces_list->is(pickle::Type::list));
    // MemoryViz.js's annotate_snapshot: a block's address is the one before
    // plus its size, from the segment's address.
    std::map<std::pair<std::uint64_t, int>, std::uint64_t> segments_at_end;  // (address, dev) -> size
    for (std::size_t s = 0; s < segments->size(); ++s) {
      const pickle::Value seg = segments->item(s);
      const std::uint64_t address = u64(seg, "address"), total = u64(seg, "total_size");
      std::uint64_t cursor = address, allocated = 0, requested = 0;
      const auto blocks = seg.get("blocks");
      ASSERT_TRUE(blocks && blocks->is(pickle::Type::list));
      for (std::size_t b = 0; b < blocks->size(); ++b) {
        const pickle::Value block = blocks->item(b);
        EXPECT_EQ(u64(block, "address"), cursor);
        const std::uint64_t size = u64(block, "size");
        EXPECT_GT(size, 0u);
        EXPECT_LE(u64(block, "requested_size"), size);
        ASSERT_TRUE(block.get("frames") && block.get("frames")->is(pickle::Type::list));
        const std::string state = str(block, "state");
        EXPECT_TRUE(state == "active_allocated" || state == "inactive") << state;
        if (state == "active_allocated") {
          allocated += size;
          requested += u64(block, "requested_size");
        }
        cursor += size;
      }
      EXPECT_EQ(cursor, address + total) << "the blocks of segment " << s << " do not tile it";
      EXPECT_EQ(u64(seg, "allocated_size"), allocated);
      EXPECT_EQ(u64(seg, "requested_size"), requested);
      segments_at_end[{address, static_cast<int>(u64(seg, "device"))}] = total;
    }
    // Forward through each device's entries: every alloc inside a live
    // segment, every free of a live block, the live segments at the end
    // those of `segments`.
    for (std::size_t d = 0; d < traces_list->size(); ++d) {
      const pickle::Value entries = traces_list->item(d);
      std::map<std::uint64_t, std::uint64_t> live_segments, live_blocks;
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const pickle::Value e = entries.item(i);
        const std::string action = str(e, "action");
        if (action == "snapshot") continue;
        if (action == "oom") {
          EXPECT_TRUE(e.get("device_free")) << "PyTorch's oom has device_free";
          continue;
        }
        const std::uint64_t addr = u64(e, "addr"), size = u64(e, "size");
        EXPECT_TRUE(e.get("time_us"));
        if (action == "segment_alloc") {
          EXPECT_TRUE(live_segments.emplace(addr, size).second);
        } else if (action == "segment_free") {
          EXPECT_EQ(live_segments.erase(addr), 1u);
        } else if (action == "alloc") {
          auto seg = live_segments.upper_bound(addr);
          ASSERT_NE(seg, live_segments.begin()) << "alloc at " << addr << " in no segment (entry " << i << ")";
          --seg;
          EXPECT_LE(addr + size, seg->first + seg->second) << "alloc at " << addr << " past its segment";
          live_blocks[addr] = size;
        } else if (action == "free_requested") {
          ASSERT_LT(i + 1, entries.size());
          const pickle::Value next = entries.item(i + 1);
          EXPECT_EQ(str(next, "action"), "free_completed") << "MemoryViz.js merges the pair only when adjacent";
          EXPECT_EQ(u64(next, "addr"), addr);
        } else if (action == "free_completed") {
          EXPECT_EQ(live_blocks.erase(addr), 1u) << "free of a block not live";
        } else {
          ADD_FAILURE() << "unknown action " << action;
        }
      }
      for (const auto& [addr, size] : live_segments) {
        EXPECT_EQ((segments_at_end[{addr, static_cast<int>(d)}]), size) << "segment " << addr << " of device " << d;
      }
    }
  }
}

struct Figures {
  std::uint64_t peak_allocated = 0, peak_reserved = 0, reserved_at_end = 0, live = 0, live_bytes = 0, allocs = 0,
                frees = 0, ooms = 0;
  std::map<int, std::uint64_t> device_peaks;
  std::multiset<std::tuple<std::uint64_t, std::uint64_t, std::vector<std::uint64_t>>> leaks;  // bytes, count, ptrs
};

Figures figures_of(const std::string& trace) {
  TraceReader reader(trace);
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  Figures f;
  const MemoryTotals& t = analysis.total();
  f.peak_allocated = t.allocated.peak;
  f.peak_reserved = t.reserved.peak;
  f.reserved_at_end = t.reserved.current;
  f.live = t.live_allocations;
  f.live_bytes = t.allocated.current;
  f.allocs = t.allocs;
  f.frees = t.frees - t.unknown_frees;
  f.ooms = t.ooms;
  for (const auto& [dev, d] : analysis.devices()) f.device_peaks[dev] = d.memory.allocated.peak;
  for (const LeakGroup& g : analysis.leaks(100)) {
    std::vector<std::uint64_t> ptrs;
    for (const LeakExample& x : g.examples) ptrs.push_back(x.ptr);
    std::sort(ptrs.begin(), ptrs.end());
    f.leaks.emplace(g.bytes, g.count, ptrs);
  }
  return f;
}

// import-torch of the export: the same peaks, live set and leaks (grouped by
// call stack: the groups' sizes and pointers). Reserved memory too, where
// every allocation was in a segment of the trace while it lived; where the
// export gave some their own segment, or kept a freed segment until its
// allocations went, reserved memory has them. Frees of nothing live are
// left out of the export (the analysis ignores them too).
TEST(TorchSnapshotExport, ImportingTheExportGivesBackTheTracesFigures) {
  TempDir dir;
  std::vector<std::string> traces;
  for (const char* name : kGoldenTraces) traces.push_back(golden(name));
  traces.push_back(big_trace(dir, 700));
  traces.push_back(orphan_trace(dir));
  for (const std::string& path : traces) {
    SCOPED_TRACE(path);
    TorchSnapshotSummary summary;
    const pickle::Document doc = pickle::Document::parse(export_file(path, &summary));
    std::string text;
    const TorchImportStats stats = import_torch_snapshot(doc.root(), TorchImportOptions{"export"}, text);
    EXPECT_EQ(stats.inconsistencies, 0u) << stats.first_inconsistency;
    EXPECT_EQ(stats.skipped_events, 0u) << stats.first_skip_reason;
    EXPECT_EQ(stats.seeded_allocs, 0u) << "the export is a whole history: nothing was live before it";
    const std::string back = dir / "back.jsonl";
    write_file(back, text);
    const Figures a = figures_of(path), b = figures_of(back);
    EXPECT_GT(a.allocs, 0u);
    EXPECT_EQ(a.peak_allocated, b.peak_allocated);
    EXPECT_EQ(a.device_peaks, b.device_peaks);
    EXPECT_EQ(a.live, b.live);
    EXPECT_EQ(a.live_bytes, b.live_bytes);
    EXPECT_EQ(a.allocs, b.allocs);
    EXPECT_EQ(a.frees, b.frees);
    EXPECT_EQ(a.ooms, b.ooms);
    EXPECT_EQ(a.leaks, b.leaks);
    if (summary.own_segments == 0 && summary.deferred_segment_frees == 0) {
      EXPECT_EQ(a.peak_reserved, b.peak_reserved);
      EXPECT_EQ(a.reserved_at_end, b.reserved_at_end);
    } else {
      EXPECT_GE(b.peak_reserved, b.peak_allocated);
    }
  }
}

}  // namespace
}  // namespace cumemtrace::analyzer
