// The caching pool never makes a program fail that runs bare (issue 18):
// - memory it caches goes back when a route outside the pool runs out of
//   memory (cuMemCreate after cudaMalloc'd memory was freed), and the
//   failure that remains is explained by an `oom` event;
// - a caller that is itself a caching allocator (PyTorch's libc10_cuda.so)
//   gets the driver's memory, not the pool's, so nothing is cached twice;
// - IPC handles of pool memory either open exactly the program's allocation
//   in another process or are refused with the documented code, an `error`
//   event and one warning that names the fix; passthrough shares everything;
// - cuMemGetAddressRange and the range attributes name the program's block.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {



class PoolSharing : public ::testing::Test {
 protected:
  CommandResult bare(const std::vector<std::string>& argv, EnvChanges env = {}) {
    return run_command(argv, sim_environment(env));
  }
  // Each run writes a trace of its own (trace() reads the latest).
  CommandResult traced(const std::vector<std::string>& argv, EnvChanges env = {}) {
    env.insert(env.begin(), {{"CUMEMTRACE_POOL", std::nullopt}, {"CUMEMTRACE_POOL_STEP_ASIDE", std::nullopt},
                             {"CUMEMTRACE_POOL_CONF", std::nullopt}});
    env.emplace_back("LD_PRELOAD", CUMEMTRACE_PRELOAD);
    trace_ = dir_ / ("trace-" + std::to_string(++runs_) + ".jsonl");
    env.emplace_back("CUMEMTRACE_OUTPUT", trace_);
    return run_command(argv, sim_environment(env));
  }
  std::vector<json> trace() const { return read_json_lines(trace_); }

  TempDir dir_;
  int runs_ = 0;
  std::string trace_;
};

const EnvChanges kOneGiB = {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}};

// 45 x 20 MiB from the program itself (pooled), freed; then cuMemCreate of
// 800 MiB. The pool kept the segments, so the driver's first answer is
// out-of-memory; the pool gives them back and the call is retried.
TEST_F(PoolSharing, OutOfMemoryOnARouteOutsideThePoolGivesTheCacheBackAndRetries) {
  const std::vector<std::string> argv = {kApps + "/pool_other_routes", "main"};
  const CommandResult plain = bare(argv, kOneGiB);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_NE(plain.out.find("cuMemCreate(800 MiB): CUDA_SUCCESS"), std::string::npos) << plain.out;
  const CommandResult r = traced(argv, kOneGiB);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out) << "the same answers as bare, the runtime's last error included";
  EXPECT_EQ(r.err, "");

  const auto lines = trace();
  const auto allocs = lines_of(lines, "alloc");
  std::size_t pooled = 0;
  for (const json& a : allocs) pooled += a.contains("block") ? 1 : 0;
  EXPECT_EQ(pooled, 45u) << "the program's own cudaMalloc calls came from the pool";
  // The pool's segments went back before the cuMemCreate that succeeded.
  std::size_t vmm_line = 0, last_segment_free = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i]["ev"] == "alloc" && lines[i]["kind"] == "vmm" && !vmm_line) vmm_line = i;
    if (lines[i]["ev"] == "segment_free" && !vmm_line) last_segment_free = i;
  }
  ASSERT_GT(vmm_line, 0u) << "the 800 MiB cuMemCreate is recorded";
  EXPECT_GT(last_segment_free, 0u) << "the pool gave its cache back first";
  EXPECT_EQ(lines[vmm_line]["size"], 800u << 20);
  // Only the request no device of 1 GiB holds failed, and says why.
  const auto ooms = lines_of(lines, "oom");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0]["api"], "cuMemCreate");
  EXPECT_EQ(ooms[0]["size"], 2048u << 20);
  EXPECT_EQ(ooms[0]["cause"], "capacity");
  EXPECT_EQ(ooms[0]["cached_free"], 0) << "nothing left cached when it failed";
  EXPECT_EQ(ooms[0]["device_total"], 1024u << 20);
}

// The same through a library named as PyTorch's caching allocator is: the
// pool steps aside, the driver serves and frees each segment, and the
// program is told what it is told bare (all memory free after the frees).
TEST_F(PoolSharing, ACachingAllocatorsCallsGoToTheDriver) {
  const std::vector<std::string> argv = {kApps + "/pool_other_routes", "library"};
  const CommandResult plain = bare(argv, kOneGiB);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const CommandResult r = traced(argv, kOneGiB);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  const auto lines = trace();
  EXPECT_EQ(lines.front()["config"]["pool_step_aside"], "auto");
  const auto allocs = lines_of(lines, "alloc");
  std::size_t device = 0;
  for (const json& a : allocs) {
    if (a["kind"] != "device") continue;
    ++device;
    EXPECT_FALSE(a.contains("block")) << "recorded as in passthrough mode: " << a;
  }
  EXPECT_EQ(device, 45u);
  // Each segment is the driver's, freed back to it at once: no cached
  // memory stood in the way of the cuMemCreate.
  for (const json& s : lines_of(lines, "segment_alloc")) EXPECT_EQ(s["api"], "cudaMalloc") << s;
  EXPECT_EQ(lines_of(lines, "segment_free").size(), 45u);
}

// PyTorch without its cache (PYTORCH_NO_CUDA_MEMORY_CACHING, set by
// `cumemtrace run --torch-tensors`) allocates per tensor: the pool is then
// the cache and serves it. CUMEMTRACE_POOL_STEP_ASIDE=off does the same for
// every caller.
TEST_F(PoolSharing, ThePoolServesPyTorchWithoutItsCacheAndWhenStepAsideIsOff) {
  const std::vector<std::string> argv = {kApps + "/pool_other_routes", "library"};
  for (const EnvChanges& env : {EnvChanges{{"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"}},
                                EnvChanges{{"CUMEMTRACE_POOL_STEP_ASIDE", "off"}}}) {
    EnvChanges all = kOneGiB;
    all.insert(all.end(), env.begin(), env.end());
    SCOPED_TRACE(env.front().first);
    const CommandResult r = traced(argv, all);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_NE(r.out.find("cuMemCreate(800 MiB): CUDA_SUCCESS"), std::string::npos) << r.out;
    std::size_t pooled = 0;
    for (const json& a : lines_of(trace(), "alloc")) pooled += a.contains("block") ? 1 : 0;
    EXPECT_EQ(pooled, 45u);
  }
}

// A list of patterns replaces the built-in one.
TEST_F(PoolSharing, StepAsidePatternsNameTheLibrariesToLeaveAlone) {
  const std::vector<std::string> argv = {kApps + "/pool_other_routes", "main"};
  EnvChanges env = kOneGiB;
  env.emplace_back("CUMEMTRACE_POOL_STEP_ASIDE", "*/pool_other_routes");
  const CommandResult r = traced(argv, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::size_t pooled = 0;
  for (const json& a : lines_of(trace(), "alloc")) pooled += a.contains("block") ? 1 : 0;
  EXPECT_EQ(pooled, 0u) << "the program itself matched the pattern";
}

struct IpcOutcome {
  int ok = -1, refused = -1, corrupt = -1;
};

IpcOutcome ipc_outcome(const std::string& out) {
  IpcOutcome o;
  const auto at = out.find("ipc_share: ok=");
  if (at != std::string::npos) std::sscanf(out.c_str() + at, "ipc_share: ok=%d refused=%d corrupt=%d", &o.ok, &o.refused, &o.corrupt);
  return o;
}

// Two processes (the child execs, as torch.multiprocessing's spawn does,
// and inherits LD_PRELOAD): every buffer the parent could export opens in
// the child at exactly the parent's allocation, and the others are refused
// as documented. Never a byte of a neighbour.
TEST_F(PoolSharing, IpcOnPoolMemoryOpensExactlyTheAllocationOrIsRefused) {
  for (const char* api : {"runtime", "driver"}) {
    SCOPED_TRACE(api);
    const std::vector<std::string> argv = {kApps + "/ipc_share", "--api", api, "--allow-refusal"};
    const CommandResult plain = bare(argv);
    ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
    const IpcOutcome b = ipc_outcome(plain.out);
    EXPECT_EQ(b.refused, 0) << plain.out;
    EXPECT_EQ(b.corrupt, 0);

    const CommandResult r = traced(argv);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const IpcOutcome o = ipc_outcome(r.out);
    EXPECT_EQ(o.corrupt, 0) << r.out;
    EXPECT_EQ(o.ok + o.refused, b.ok) << r.out;
    EXPECT_GT(o.refused, 0) << "pool blocks inside larger segments: " << r.out;
    // cudaErrorInvalidValue and CUDA_ERROR_INVALID_VALUE are both 1; the
    // runtime's refusal is its last error exactly once, as the runtime's own.
    const bool runtime = std::string(api) == "runtime";
    EXPECT_NE(r.out.find(runtime ? "refused code=1 last_error=once" : "refused code=1\n"), std::string::npos)
        << r.out;
    // One warning naming the fix, however many refusals.
    std::size_t warnings = 0;
    for (std::size_t at = 0; (at = r.err.find("cumemtrace: warning:", at)) != std::string::npos; ++at) ++warnings;
    EXPECT_EQ(warnings, 1u) << r.err;
    EXPECT_NE(r.err.find("--pool passthrough"), std::string::npos) << r.err;
    // An error event per refusal, in the parent's trace.
    std::size_t errors = 0;
    for (const json& e : lines_of(trace(), "error")) {
      EXPECT_EQ(e["what"], "ipc_pooled_memory");
      EXPECT_EQ(e["api"], std::string(std::string(api) == "runtime" ? "cudaIpcGetMemHandle" : "cuIpcGetMemHandle"));
      ++errors;
    }
    EXPECT_EQ(errors, static_cast<std::size_t>(o.refused));
  }
}

TEST_F(PoolSharing, PassthroughSharesEveryBufferAsBare) {
  for (const char* api : {"runtime", "driver"}) {
    SCOPED_TRACE(api);
    const std::vector<std::string> argv = {kApps + "/ipc_share", "--api", api};
    const CommandResult r = traced(argv, {{"CUMEMTRACE_POOL", "passthrough"}});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const IpcOutcome o = ipc_outcome(r.out);
    EXPECT_EQ(o.refused, 0) << r.out;
    EXPECT_EQ(o.corrupt, 0) << r.out;
    EXPECT_EQ(o.ok, 6) << r.out;
  }
}

// The driver's questions about an allocation, for pool memory.
TEST_F(PoolSharing, AddressRangesAndAttributesNameTheProgramsBlock) {
  const std::vector<std::string> argv = {kApps + "/pool_ranges"};
  const CommandResult plain = bare(argv);
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  const CommandResult r = traced(argv);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, plain.out) << "what a program can ask about its allocations is what it is told bare";
}

}  // namespace
