// import-torch: a PyTorch snapshot becomes a trace whose seeded start state,
// events, stacks and peaks are exactly what the snapshot says.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "pickle_builder.h"
#include "torch/snapshot_import.h"
#include "torch/pickle_reader.h"

namespace cumemtrace::analyzer {
namespace {

using cumemtrace::testing::PickleDict;
using cumemtrace::testing::PickleList;
using cumemtrace::testing::PickleValue;
using cumemtrace::testing::to_pickle;
using namespace cumemtrace::analyzer::testing;
using Json = nlohmann::json;

using testing::MiB;

struct Converted {
  TorchImportStats stats;
  std::string text;
  std::vector<Json> lines;

  std::vector<Json> of(const std::string& ev) const {
    std::vector<Json> out;
    for (const Json& j : lines) {
      if (j["ev"] == ev) out.push_back(j);
    }
    return out;
  }
};

Converted convert(const pickle::Document& doc) {
  Converted c;
  c.stats = import_torch_snapshot(doc.root(), TorchImportOptions{"test.pickle"}, c.text);
  std::size_t start = 0;
  while (start < c.text.size()) {
    const std::size_t end = c.text.find('\n', start);
    c.lines.push_back(Json::parse(c.text.substr(start, end - start)));
    start = end + 1;
  }
  return c;
}
Converted convert(const PickleValue& snapshot) { return convert(pickle::Document::parse(to_pickle(snapshot))); }

// The analyzer's own reading of a converted trace.
struct Analysed {
  MemoryTotals total;
  std::map<int, DeviceInfo> devices;
  ReaderStats stats;
};
Analysed analyse(const std::string& text) {
  TempDir dir;
  write_file(dir / "t.jsonl", text);
  TraceReader reader(dir / "t.jsonl");
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  return {analysis.total(), analysis.devices(), reader.stats()};
}

PickleValue event(const char* action, std::int64_t addr, std::int64_t size, std::int64_t time_us = -1) {
  PickleDict e{{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0}, {"frames", PickleList{}}};
  if (time_us >= 0) e.emplace_back("time_us", time_us);
  return e;
}
PickleValue segment(std::int64_t address, std::int64_t total, PickleList blocks, bool expandable = false) {
  return PickleDict{{"device", 0}, {"address", address}, {"total_size", total}, {"stream", 0},
                    {"is_expandable", expandable}, {"blocks", std::move(blocks)}};
}
PickleValue block(std::int64_t address, std::int64_t size, const char* state) {
  return PickleDict{{"address", address}, {"size", size}, {"requested_size", size}, {"state", state}};
}

// tests/unit/analyzer/torch/fixture/make_fixture.py documents each event; the
// figures below are worked out by hand from it.
TEST(TorchImport, TheFixtureConvertsExactly) {
  const Converted c = convert(pickle::Document::load_file(CUMEMTRACE_TORCH_FIXTURE));
  ASSERT_FALSE(c.lines.empty());
  const Json& header = c.lines.front();
  EXPECT_EQ(header["ev"], "header");
  EXPECT_EQ(header["pool"], "caching");
  EXPECT_EQ(header["start_unix_ns"], (1'700'000'000'000'000ull + 10) * 1000);
  EXPECT_EQ(header["config"]["times"], "time_us");
  EXPECT_EQ(header["config"]["allocator_settings"]["max_split_size"], -1);
  EXPECT_EQ(c.lines.back()["ev"], "end");
  EXPECT_EQ(c.lines.back()["live"], 4);
  EXPECT_EQ(c.lines.back()["live_bytes"], 1000 + 1'000'000 + 4 * MiB + 2 * MiB);

  EXPECT_EQ(c.stats.seeded_segments, 2u);  // A and C
  EXPECT_EQ(c.stats.seeded_segment_bytes, 4 * MiB);
  EXPECT_EQ(c.stats.seeded_allocs, 3u);  // A, A+1024 (freed in the trace), B+5MiB (pending free)
  EXPECT_EQ(c.stats.seeded_alloc_bytes, 1000u + 512 + 1'000'000);
  EXPECT_EQ(c.stats.inconsistencies, 0u) << c.stats.first_inconsistency;
  EXPECT_EQ(c.stats.skipped_events, 0u) << c.stats.first_skip_reason;
  EXPECT_EQ(c.stats.free_requests, 3u);
  EXPECT_EQ(c.stats.devices, 2u);

  // The seed comes first, at t=0, in address order.
  const std::vector<Json> allocs = c.of("alloc");
  ASSERT_EQ(allocs.size(), 6u);
  EXPECT_EQ(allocs[0]["ptr"], "0x7f0010000000");
  EXPECT_EQ(allocs[0]["size"], 1000);
  EXPECT_EQ(allocs[0]["block"], 1024);
  EXPECT_EQ(allocs[0]["t"], 0);
  EXPECT_EQ(allocs[1]["ptr"], "0x7f0010000400");
  EXPECT_FALSE(allocs[1].contains("block")) << "freed in the trace: PyTorch's block size is unknown";
  EXPECT_EQ(allocs[1]["stack"], 0);
  EXPECT_EQ(allocs[2]["ptr"], "0x7f0020500000");
  EXPECT_EQ(allocs[2]["block"], MiB);
  // Then the trace: B is live at the end, so its block size is known.
  EXPECT_EQ(allocs[3]["ptr"], "0x7f0020000000");
  EXPECT_EQ(allocs[3]["size"], 4 * MiB);
  EXPECT_EQ(allocs[3]["block"], 5 * MiB);
  EXPECT_EQ(allocs[3]["t"], 11000);  // time_us - first time_us, in ns
  // Device 1's events merged in by time.
  EXPECT_EQ(allocs[4]["dev"], 1);
  EXPECT_EQ(allocs[4]["stream"], "0x5000");
  EXPECT_EQ(allocs[4]["t"], 16000);
  EXPECT_EQ(allocs[5]["t"], 20000);

  // Stacks: allocator frames dropped, frames interned, Python file:line kept.
  const std::vector<Json> stacks = c.of("stack");
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(allocs[0]["stack"], stacks[0]["id"]);
  ASSERT_EQ(stacks[0]["frames"].size(), 1u);
  EXPECT_EQ(stacks[0]["frames"][0]["fn"], "train_step");
  EXPECT_EQ(stacks[0]["frames"][0]["file"], "/home/u/train.py");
  EXPECT_EQ(stacks[0]["frames"][0]["line"], 7);
  // A .py file's frame is a Python frame, written as TRACE_FORMAT.md has it.
  EXPECT_EQ(stacks[0]["frames"][0]["py"], true);
  EXPECT_FALSE(stacks[0]["frames"][0].contains("ip"));
  ASSERT_EQ(stacks[1]["frames"].size(), 3u);
  EXPECT_EQ(stacks[1]["frames"][0]["fn"], "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)");
  EXPECT_FALSE(stacks[1]["frames"][0].contains("file")) << "a file of ?? is PyTorch's unknown";
  EXPECT_FALSE(stacks[1]["frames"][0].contains("py")) << "a C++ frame is native";
  EXPECT_EQ(stacks[1]["frames"][0]["ip"], "0x0");
  EXPECT_EQ(stacks[1]["frames"][1]["fn"], "forward");
  EXPECT_EQ(stacks[1]["frames"][1]["py"], true);

  const std::vector<Json> frees = c.of("free");
  ASSERT_EQ(frees.size(), 2u);
  EXPECT_EQ(frees[0]["ptr"], "0x7f0010000400");
  EXPECT_EQ(frees[0]["size"], 512);
  EXPECT_EQ(frees[1]["size"], 2 * MiB);

  const std::vector<Json> segment_frees = c.of("segment_free");
  ASSERT_EQ(segment_frees.size(), 1u);
  EXPECT_EQ(segment_frees[0]["ptr"], "0x7f0030000000");
  EXPECT_EQ(segment_frees[0]["api"], "cudaFree");
  ASSERT_EQ(c.of("mark").size(), 1u);

  const std::vector<Json> ooms = c.of("oom");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0]["size"], 64 * MiB);
  EXPECT_EQ(ooms[0]["device_free"], MiB);
  EXPECT_EQ(ooms[0]["allocated"], 1000 + 1'000'000 + 4 * MiB);
  EXPECT_EQ(ooms[0]["reserved"], 22 * MiB);
  EXPECT_EQ(ooms[0]["largest_free"], 14 * MiB);  // B's tail, after its 5 MiB and 1 MiB blocks
  EXPECT_EQ(ooms[0]["cause"], "capacity");

  // Nothing in the trace goes negative or misses its partner.
  const Analysed a = analyse(c.text);
  EXPECT_EQ(a.stats.bad_lines, 0u);
  EXPECT_FALSE(a.stats.truncated);
  EXPECT_EQ(a.total.unknown_frees, 0u);
  EXPECT_EQ(a.total.unknown_segment_frees, 0u);
  EXPECT_EQ(a.total.duplicate_allocs, 0u);
  EXPECT_EQ(a.total.reserved.peak, 26 * MiB);  // seed 4 + B 20 + D 2, before C is freed
  EXPECT_EQ(a.devices.at(0).memory.reserved.peak, 24 * MiB);
  EXPECT_EQ(a.total.allocated.peak, 1000 + 1'000'000 + 4 * MiB + 2 * MiB + 2 * MiB);
  EXPECT_EQ(a.total.allocated.current, 1000 + 1'000'000 + 4 * MiB + 2 * MiB);
}

TEST(TorchImport, ExpandableSegmentsMapAndUnmapInPieces) {
  const std::int64_t E = 0x7f5000000000;
  const Converted c = convert(PickleDict{
      {"segments", PickleList{segment(E, 2 * MiB, PickleList{block(E, 2 * MiB, "active_allocated")}, true)}},
      {"device_traces", PickleList{PickleList{
                            event("segment_map", E, 4 * MiB, 1),
                            event("alloc", E, 2 * MiB, 2),
                            event("segment_unmap", E + 2 * MiB, 2 * MiB, 3),
                        }}},
  });
  EXPECT_EQ(c.stats.inconsistencies, 0u) << c.stats.first_inconsistency;
  EXPECT_EQ(c.stats.seeded_segments, 0u);
  const std::vector<Json> grows = c.of("segment_alloc");
  const std::vector<Json> shrinks = c.of("segment_free");
  ASSERT_EQ(grows.size(), 2u);
  ASSERT_EQ(shrinks.size(), 1u);
  EXPECT_EQ(grows[0]["api"], "cuMemMap");
  EXPECT_EQ(grows[0]["size"], 4 * MiB);
  // Unmapping the top half: the 4 MiB range goes, its lower half comes back.
  EXPECT_EQ(shrinks[0]["api"], "cuMemUnmap");
  EXPECT_EQ(shrinks[0]["size"], 4 * MiB);
  EXPECT_EQ(grows[1]["ptr"], "0x7f5000000000");
  EXPECT_EQ(grows[1]["size"], 2 * MiB);
  const Analysed a = analyse(c.text);
  EXPECT_EQ(a.total.reserved.peak, 4 * MiB);
  EXPECT_EQ(a.total.reserved.current, 2 * MiB);
  EXPECT_EQ(a.total.unknown_segment_frees, 0u);
}

TEST(TorchImport, WithoutTimesEventsAreCountedInOrder) {
  const Converted c = convert(PickleDict{
      {"segments", PickleList{segment(0x1000000, 2 * MiB, PickleList{})}},
      {"device_traces", PickleList{PickleList{event("alloc", 0x1000000, 512), event("free_requested", 0x1000000, 512),
                                              event("free_completed", 0x1000000, 512)}}},
  });
  EXPECT_TRUE(c.stats.synthetic_times);
  EXPECT_EQ(c.lines.front()["config"]["times"], "event_order");
  EXPECT_EQ(c.of("alloc").at(0)["t"], 0);
  EXPECT_EQ(c.of("free").at(0)["t"], 2000);
  EXPECT_EQ(c.of("segment_alloc").at(0)["t"], 0) << "reserved before the trace";
}

TEST(TorchImport, ContradictionsAreCountedAndKeptConsistent) {
  const Converted c = convert(PickleDict{
      {"segments", PickleList{segment(0x1000000, 2 * MiB, PickleList{})}},
      {"device_traces", PickleList{PickleList{
                            event("alloc", 0x1000000, 512, 1),
                            event("free_completed", 0x1000000, 512, 2),
                            event("free_completed", 0x1000000, 512, 3),  // a second free
                            event("teleport", 0, 0, 4),
                            PickleDict{{"action", "alloc"}},  // no addr
                        }}},
  });
  EXPECT_EQ(c.stats.skipped_events, 2u);
  EXPECT_NE(c.stats.first_skip_reason.find("unknown action 'teleport'"), std::string::npos);
  EXPECT_GE(c.stats.inconsistencies, 1u);
  const Analysed a = analyse(c.text);
  EXPECT_EQ(a.total.unknown_frees, 0u);
  EXPECT_EQ(a.total.allocated.current, 0u);
}

TEST(TorchImport, RefusesWhatIsNotASnapshot) {
  auto message = [](const PickleValue& v) {
    try {
      convert(v);
    } catch (const TorchImportError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message(PickleList{1, 2}), "not a PyTorch memory snapshot: the pickle holds a list, not a dict");
  EXPECT_EQ(message(PickleDict{{"segments", PickleList{}}}), "not a PyTorch memory snapshot: no 'device_traces' list");
  EXPECT_EQ(message(PickleDict{{"segments", PickleList{PickleDict{{"address", 1}}}}, {"device_traces", PickleList{}}}),
            "not a PyTorch memory snapshot: segments[0] has no address and total_size");
}

// Corrupted snapshots either fail to read or convert to a consistent trace
// (whatever the values' types); never a crash.
TEST(TorchImport, CorruptedSnapshotsNeverCrash) {
  const std::string whole = read_file(CUMEMTRACE_TORCH_FIXTURE);
  std::mt19937 rng(7);
  int converted = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string bytes = whole;
    for (int f = 1 + static_cast<int>(rng() % 3); f > 0; --f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    try {
      const pickle::Document doc = pickle::Document::parse(bytes);
      std::string text;
      import_torch_snapshot(doc.root(), TorchImportOptions{"x"}, text);
      ++converted;
    } catch (const pickle::PickleError&) {
    } catch (const TorchImportError&) {
    }
  }
  EXPECT_GT(converted, 0);
}

// The command line: exit codes and one-line errors.
TEST(TorchImportCli, ConvertsRefusesAndCompresses) {
  TempDir dir;
  CommandResult ok = run_command({cli_path(), "import-torch", CUMEMTRACE_TORCH_FIXTURE, "-o", dir / "t.jsonl.zst"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  CommandResult report = run_command({cli_path(), "report", dir / "t.jsonl.zst", "--format", "json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(Json::parse(report.out)["peak_reserved"], 26 * MiB);

  write_file(dir / "evil.pickle", std::string("\x80\x02" "cos\nsystem\n(X\x02\x00\x00\x00idtR.", 24));
  CommandResult evil = run_command({cli_path(), "import-torch", dir / "evil.pickle", "-o", dir / "evil.jsonl"});
  EXPECT_EQ(evil.exit_code, 2);
  EXPECT_EQ(evil.err, "cumemtrace: " + dir / "evil.pickle" +
                          ": offset 2: refused pickle opcode GLOBAL: it loads or calls code, and a memory snapshot "
                          "holds only plain data\n");
  EXPECT_FALSE(file_exists(dir / "evil.jsonl"));

  write_file(dir / "list.pickle", to_pickle(PickleList{1}));
  CommandResult list = run_command({cli_path(), "import-torch", dir / "list.pickle", "-o", dir / "list.jsonl"});
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_NE(list.err.find("not a PyTorch memory snapshot"), std::string::npos) << list.err;

  CommandResult missing = run_command({cli_path(), "import-torch", dir / "absent.pickle", "-o", dir / "x.jsonl"});
  EXPECT_EQ(missing.exit_code, 2);
}

}  // namespace
}  // namespace cumemtrace::analyzer
