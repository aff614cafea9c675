// tests/apps/known_sequence under `cumemtrace run` on the simulated device:
// the trace is checked event by event against the program's own manifest,
// and the report's numbers against figures worked out by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

// Worked out by hand from the sequence in known_sequence.cpp.
constexpr std::uint64_t kPeakBytes = 44'163'657;  // a+c+d+e+f live after alloc f
constexpr std::uint64_t kLeakedBytes = 2'500'007;  // e (7) and g (2,500,000)
constexpr int kAllocs = 7, kFrees = 5, kLeaked = 2;

struct ManifestOp {
  std::string op;  // "alloc" or "free"
  std::string name;
  std::uint64_t size = 0;
  std::string ptr;
};

std::vector<ManifestOp> read_manifest(const std::string& path) {
  std::ifstream in(path);
  std::vector<ManifestOp> ops;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    ManifestOp m;
    fields >> m.op >> m.name;
    if (m.op == "alloc") fields >> m.size;
    fields >> m.ptr;
    ops.push_back(m);
  }
  return ops;
}

class KnownSequence : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = dir_ / "trace.jsonl";
    manifest_ = dir_ / "manifest.txt";
    // Event by event without `stack` lines: stacks have their own tests
    // (stacks_markers_test.cpp).
    const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", trace_, "--",
                                CUMEMTRACE_APPS_DIR "/known_sequence", manifest_},
                               // Passthrough: the trace is the program's own calls, each
                               // with its segment twin (pool_preload_test.cpp has caching);
                               // no `stack` lines (stacks_markers_test.cpp has them).
                               sim_environment(environment({})));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // SetUp's settings, PyTorch's allocator variables unset (the header
  // records them: they must not leak in from the test's own environment),
  // then `more`.
  static EnvChanges environment(const EnvChanges& more) {
    EnvChanges env = {{"CUMEMTRACE_STACKS", "0"},
                      {"CUMEMTRACE_POOL", "passthrough"},
                      {"PYTORCH_CUDA_ALLOC_CONF", std::nullopt},
                      {"PYTORCH_ALLOC_CONF", std::nullopt},
                      {"PYTORCH_NO_CUDA_MEMORY_CACHING", std::nullopt}};
    for (const auto& change : more) {
      std::erase_if(env, [&](const auto& e) { return e.first == change.first; });
      env.push_back(change);
    }
    return env;
  }

  TempDir dir_;
  std::string trace_, manifest_;
};

TEST_F(KnownSequence, TraceMatchesTheProgramEventByEvent) {
  const auto ops = read_manifest(manifest_);
  ASSERT_EQ(ops.size(), 12u);
  const auto lines = read_json_lines(trace_);

  // header, device, then two lines per operation (passthrough: each alloc has
  // its segment twin), then end. cudaFree(NULL) left no line.
  ASSERT_EQ(lines.size(), 2 + 2 * ops.size() + 1) << "trace:\n" << [&] {
    std::string s;
    for (const auto& l : lines) s += l.dump() + "\n";
    return s;
  }();

  const json& header = lines[0];
  EXPECT_EQ(header["ev"], "header");
  EXPECT_EQ(header["format"], "cumemtrace");
  EXPECT_EQ(header["version"], 1);
  EXPECT_EQ(header["pool"], "passthrough");
  EXPECT_EQ(header["config"]["output"], trace_);
  ASSERT_EQ(header["argv"].size(), 2u);
  EXPECT_EQ(header["argv"][1], manifest_);
  EXPECT_NE(header["exe"].get<std::string>().find("known_sequence"), std::string::npos);
  EXPECT_GT(header["start_unix_ns"].get<std::uint64_t>(), 1'700'000'000'000'000'000ull);
  EXPECT_GT(header["pid"].get<int>(), 0);
  EXPECT_FALSE(header.contains("env")) << "no allocator variable set: " << header;

  const json& device = lines[1];
  EXPECT_EQ(device["ev"], "device");
  EXPECT_EQ(device["dev"], 0);
  EXPECT_EQ(device["total"], 16ull << 30);
  EXPECT_NE(device["name"].get<std::string>().find("imulated"), std::string::npos) << device;

  std::uint64_t last_t = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto t = lines[i]["t"].get<std::uint64_t>();
    EXPECT_GE(t, last_t) << "line " << i + 1;
    last_t = t;
  }

  std::size_t at = 2;
  std::int64_t tid = -1;
  for (const auto& op : ops) {
    SCOPED_TRACE(op.op + " " + op.name + " " + op.ptr);
    if (op.op == "alloc") {
      const json& seg = lines[at++];
      const json& alloc = lines[at++];
      EXPECT_EQ(seg["ev"], "segment_alloc");
      EXPECT_EQ(seg["ptr"], op.ptr);
      EXPECT_EQ(seg["size"], op.size);
      EXPECT_EQ(seg["dev"], 0);
      EXPECT_EQ(seg["api"], "cudaMalloc");
      EXPECT_EQ(alloc["ev"], "alloc");
      EXPECT_EQ(alloc["api"], "cudaMalloc");
      EXPECT_EQ(alloc["kind"], "device");
      EXPECT_EQ(alloc["dev"], 0);
      EXPECT_EQ(alloc["ptr"], op.ptr);
      EXPECT_EQ(alloc["size"], op.size);
      EXPECT_EQ(alloc["stack"], 0);
      EXPECT_FALSE(alloc.contains("stream"));
      if (tid < 0) tid = alloc["tid"];
      EXPECT_EQ(alloc["tid"], tid);
    } else {
      const json& free = lines[at++];
      const json& seg = lines[at++];
      const auto allocated = std::find_if(ops.begin(), ops.end(), [&](const ManifestOp& m) {
        return m.op == "alloc" && m.name == op.name;
      });
      EXPECT_EQ(free["ev"], "free");
      EXPECT_EQ(free["api"], "cudaFree");
      EXPECT_EQ(free["kind"], "device");
      EXPECT_EQ(free["ptr"], op.ptr);
      EXPECT_EQ(free["size"], allocated->size);  // repeats its alloc's size
      EXPECT_EQ(free["tid"], tid);
      EXPECT_EQ(seg["ev"], "segment_free");
      EXPECT_EQ(seg["ptr"], op.ptr);
      EXPECT_EQ(seg["size"], allocated->size);
    }
  }
  EXPECT_GT(tid, 0);

  const json& end = lines.back();
  EXPECT_EQ(end["ev"], "end");
  EXPECT_EQ(end["reason"], "exit");
  EXPECT_EQ(end["live"], kLeaked);
  EXPECT_EQ(end["live_bytes"], kLeakedBytes);
  EXPECT_EQ(end["dropped"], 0);
}

// The header's `env` (README.md, "Additions to the trace format"): PyTorch's
// allocator variables as the process had them, those set and nothing else.
TEST_F(KnownSequence, HeaderRecordsThePyTorchAllocatorVariablesThatAreSet) {
  const std::string trace = dir_ / "env.jsonl";
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", trace, "--", CUMEMTRACE_APPS_DIR "/known_sequence",
                              dir_ / "env_manifest.txt"},
                             sim_environment(environment({
                                 {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:128"},
                                 {"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"},
                                 {"TEST_API_TOKEN", "not to be recorded"},
                             })));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json header = read_json_lines(trace).front();
  ASSERT_EQ(header["ev"], "header");
  EXPECT_EQ(header["env"], (json{{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:128"},
                                 {"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"}}))
      << header;
}

TEST_F(KnownSequence, JsonReportHasTheExactNumbers) {
  const auto r = run_command({CUMEMTRACE_CLI, "report", "--format", "json", trace_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(r.out);
  EXPECT_EQ(report["peak_allocated"], kPeakBytes);
  EXPECT_EQ(report["peak_reserved"], kPeakBytes);  // passthrough: reserved == allocated
  EXPECT_EQ(report["allocs"], kAllocs);
  EXPECT_EQ(report["frees"], kFrees);
  EXPECT_EQ(report["leaked_bytes"], kLeakedBytes);
  EXPECT_EQ(report["leaked_count"], kLeaked);
  EXPECT_EQ(report["truncated"], false);

  // The peak happened at the alloc of 'f'.
  const auto lines = read_json_lines(trace_);
  const auto ops = read_manifest(manifest_);
  const auto f = std::find_if(ops.begin(), ops.end(), [](const ManifestOp& m) { return m.name == "f"; });
  const auto alloc_f = std::find_if(lines.begin(), lines.end(), [&](const json& l) {
    return l["ev"] == "alloc" && l["ptr"] == f->ptr;
  });
  ASSERT_NE(alloc_f, lines.end());
  EXPECT_EQ(report["peak_allocated_t"], (*alloc_f)["t"]);
}

TEST_F(KnownSequence, TextReportStatesPeakCountsAndLeaks) {
  const auto r = run_command({CUMEMTRACE_CLI, "report", trace_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected : {"44163657", "2500007", "allocations:     7", "frees:           5",
                               "2 allocations"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << "missing " << expected << " in:\n" << r.out;
  }
}

}  // namespace
