// Every route to device memory (issue 3): each program in tests/apps/route_*
// runs under libcumemtrace.so on the simulated device, writes a manifest of
// what it did, and its trace must say exactly that, event by event, each
// allocation once, with the api the program called.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "integration_support.h"
#include "route_check.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

const std::string kProbes = CUMEMTRACE_APPS_DIR "/probes";

class Routes : public ::testing::Test {
 protected:
  // Runs tests/apps/<app> MANIFEST ARGS... under the preload on the sim, in
  // passthrough mode unless `env` says otherwise: the manifest then names
  // every segment (each call's twin). The caching pool's runs of the same
  // programs are in pool_preload_test.cpp.
  CommandResult traced(const std::string& app, EnvChanges env = {},
                       const std::vector<std::string>& args = {}) {
    env.insert(env.begin(), {"CUMEMTRACE_POOL", "passthrough"});
    env.emplace_back("LD_PRELOAD", CUMEMTRACE_PRELOAD);
    env.emplace_back("CUMEMTRACE_OUTPUT", trace_);
    return untraced(app, env, args);
  }

  CommandResult untraced(const std::string& app, EnvChanges env = {},
                         const std::vector<std::string>& args = {}) {
    std::vector<std::string> argv = {kApps + "/" + app, manifest_};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, sim_environment(env));
  }

  std::vector<json> trace() const { return read_json_lines(trace_); }
  std::vector<json> manifest() const { return read_json_lines(manifest_); }

  // The whole check for a single-threaded program.
  void expect_trace_matches_manifest() {
    const auto lines = trace();
    const auto done = manifest();
    EXPECT_EQ(compare_events(expected_events(done), memory_events(lines)), "");
    EXPECT_EQ(check_trace_frame(lines, done), "");
    EXPECT_EQ(check_address_order(lines), "");
  }

  TempDir dir_;
  const std::string trace_ = dir_ / "trace.jsonl";
  const std::string manifest_ = dir_ / "manifest.jsonl";
};

TEST_F(Routes, RuntimeLinkedDynamicallyIsRecordedOnceWithItsApi) {
  const auto r = traced("route_runtime");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The sim's runtime reaches cuMemAlloc_v2 & co. through cuGetProcAddress;
  // none of those nested calls may appear.
  expect_trace_matches_manifest();
}

TEST_F(Routes, DriverLinkedDirectlyIncludingTheLegacyAbi) {
  const auto r = traced("route_driver");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
}

TEST_F(Routes, EntryPointsHonourVersionAndPerThreadFlags) {
  const auto r = traced("route_entry_points");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
  // Memory functions are ours; everything else is the driver's own pointer.
  const auto modules = resolved_modules(manifest());
  const std::map<std::string, std::string> expected = {
      {"cuMemAlloc@12000", "libcumemtrace.so"},
      {"cuMemAlloc@2000", "libcumemtrace.so"},
      {"cuGetProcAddress@12000", "libcumemtrace.so"},
      {"cuGetProcAddress@11030", "libcumemtrace.so"},
      {"cuStreamSynchronize@12000/ptsz", "libcuda.so.1"},
      {"cuCtxGetDevice@13000", "libcuda.so.1"}};
  EXPECT_EQ(modules, expected);
}

TEST_F(Routes, EntryPointsAnswerAsTheDriverDoesWithoutCumemtrace) {
  // The program checks every status and failure code itself.
  const auto r = untraced("route_entry_points");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& [name, module] : resolved_modules(manifest())) {
    EXPECT_EQ(module, "libcuda.so.1") << name;
  }
}

TEST_F(Routes, FrameworkThatDlopensTheLibrariesAndDlsymsEverything) {
  const auto r = traced("route_framework");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
  const auto modules = resolved_modules(manifest());
  EXPECT_EQ(modules.at("cudaMalloc"), "libcumemtrace.so");
  EXPECT_EQ(modules.at("cuMemAlloc_v2"), "libcumemtrace.so");
  EXPECT_EQ(modules.at("cuGetProcAddress_v2"), "libcumemtrace.so");
  EXPECT_EQ(modules.at("cudaStreamSynchronize"), "libcudart.so.13");
  // The RTLD_DEFAULT cudaMalloc (ours) found the privately loaded runtime.
  int global = 0;
  for (const auto& m : manifest()) global += m["ev"] == "alloc" && m["size"] == 512;
  EXPECT_EQ(global, 1);
}

TEST_F(Routes, StreamOrderedAllocationRecordsTheStream) {
  const auto r = traced("route_stream_ordered");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
}

TEST_F(Routes, VirtualMemoryHandlesAndMappings) {
  const auto r = traced("route_vmm");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
}

TEST_F(Routes, StaticallyLinkedRuntimeIsSeenThroughCuGetProcAddress) {
  const auto r = traced("route_static_runtime");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
}

TEST_F(Routes, SemanticsAreTheSameWithAndWithoutCumemtrace) {
  const EnvChanges small = {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}};
  const auto bare = untraced("route_semantics", small);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto r = traced("route_semantics", small);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Every return code, the last-error state after the OOM, memory info.
  EXPECT_EQ(r.out, bare.out);
  EXPECT_NE(r.out.find("cudaGetLastError: cudaErrorMemoryAllocation\ncudaGetLastError again: cudaSuccess"),
            std::string::npos)
      << r.out;
  // The 4 KiB allocation is the only one left: the driver counts the whole
  // 2 MiB page it lives in as used (tests/sim/README.md).
  EXPECT_NE(r.out.find("free <= total: 1, in use: 2097152"), std::string::npos) << r.out;
  // Unknown and double frees are errors; accounting is intact (frame check).
  expect_trace_matches_manifest();
}

TEST_F(Routes, DevicesAreKeptApartAndResetsDropWhatTheyFree) {
  const auto r = traced("route_devices", {{"SIMCUDA_DEVICE_COUNT", "2"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
}

TEST_F(Routes, SixteenThreadsLoseAndDuplicateNothing) {
  // Each allocation sleeps inside the driver, so threads overlap in the
  // hooks between the real call and the record.
  const auto r = traced("route_threads", {{"SIMCUDA_MALLOC_LATENCY_US", "50"}}, {"2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = trace();
  const auto done = manifest();
  ASSERT_GT(done.size(), 16u * 100) << "the program did too little to test anything";

  // Per thread, exactly the program's own sequence of allocs and frees.
  const auto differences = compare_events_per_thread(done, lines);
  EXPECT_EQ(differences.size(), 16u);
  for (const auto& [tid, diff] : differences) {
    SCOPED_TRACE("thread " + std::to_string(tid));
    EXPECT_TRUE(diff.empty()) << diff.substr(0, 2000);
  }
  // Every alloc and free has its segment twin right next to it.
  const auto events = memory_events(lines);
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i]["ev"] == "alloc") {
      ASSERT_GT(i, 0u);
      EXPECT_EQ(events[i - 1]["ev"], "segment_alloc");
      EXPECT_EQ(events[i - 1]["ptr"], events[i]["ptr"]);
    } else if (events[i]["ev"] == "free") {
      ASSERT_LT(i + 1, events.size());
      EXPECT_EQ(events[i + 1]["ev"], "segment_free");
      EXPECT_EQ(events[i + 1]["ptr"], events[i]["ptr"]);
    }
  }
  EXPECT_EQ(check_trace_frame(lines, done), "");
  EXPECT_EQ(check_address_order(lines), "");
}

TEST_F(Routes, DlsymKeepsTheCallersIdentityAndAnswersAsGlibc) {
  const EnvChanges probes = {{"LD_LIBRARY_PATH", std::string(SIMCUDA_LIBRARY_DIR) + ":" + kProbes}};
  const std::vector<std::string> local = {kProbes + "/libroute_probe_local.so"};
  const auto bare = untraced("route_dlsym", probes, local);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto r = traced("route_dlsym", probes, local);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "dlsym: ok\n");
  expect_trace_matches_manifest();
  EXPECT_EQ(resolved_modules(manifest()).at("cuMemAlloc_v2@GLIBC_2.2.5"), "libcumemtrace.so");
}

TEST_F(Routes, DlsymCalledBeforeOurInitialisation) {
  // A second preload's constructor runs before ours and calls dlsym.
  EnvChanges env = {{"LD_PRELOAD", std::string(CUMEMTRACE_PRELOAD) + " " + kProbes +
                                       "/libroute_probe_early.so"},
                    {"CUMEMTRACE_OUTPUT", trace_},
                    {"CUMEMTRACE_POOL", "passthrough"}};
  const auto r = untraced("route_runtime", env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_trace_matches_manifest();
}

// NVIDIA's runtimes stop at the driver's private export tables on the sim,
// but first look up ~440 driver functions through our dlsym and
// cuGetProcAddress hooks (all flags and versions, "" at version 0): they
// must behave exactly as without cumemtrace.
TEST_F(Routes, NvidiasStaticRuntimeBehavesAsWithoutCumemtrace) {
  const auto bare = untraced("route_real_runtime_static");
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto r = traced("route_real_runtime_static");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, bare.out);
}

TEST_F(Routes, NvidiasSharedRuntimeBehavesAsWithoutCumemtrace) {
  // The toolkit's libcudart.so.13 with the sim's libcuda.so.1.
  TempDir driver_only;
  ASSERT_EQ(::symlink(SIMCUDA_LIBRARY_DIR "/libcuda.so.1", (driver_only / "libcuda.so.1").c_str()), 0);
  const EnvChanges env = {
      {"LD_LIBRARY_PATH", driver_only.dir() + ":" + std::string(CUDA_TOOLKIT_LIBRARY_DIR)}};
  const auto bare = untraced("route_real_runtime_shared", env);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto r = traced("route_real_runtime_shared", env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, bare.out);
}

}  // namespace
