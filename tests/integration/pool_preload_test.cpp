// libcumemtrace.so's caching pool (CUMEMTRACE_POOL=caching, the default) on
// the simulated device: reuse is never unsafe, a failed request looks
// exactly as without cumemtrace and its `oom` event explains it, the trace
// shows reserved memory as the pool holds it (segment_alloc only on growth,
// `block` on each alloc, `pool` samples), and every route program records
// the same allocations and frees as in passthrough mode.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "integration_support.h"
#include "route_check.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

// The lines a program's allocator decides (alloc, free, error), without the
// segments and out-of-memory lines that depend on the pool mode.
std::vector<json> application_events(const std::vector<json>& events) {
  std::vector<json> out;
  for (const json& e : events) {
    if (e["ev"] == "alloc" || e["ev"] == "free" || e["ev"] == "error") out.push_back(e);
  }
  return out;
}

// `out` without its lines that contain `marker`. Memory information is what
// a program is told differently under the caching pool, on the sim as on a
// real GPU: the driver counts every 2 MiB page that holds a live allocation
// as used (tests/sim/README.md), while the pool adds the cached bytes its
// segments hold unused to the free memory it reports.
std::string without_lines_containing(const std::string& out, const std::string& marker) {
  std::istringstream in(out);
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.find(marker) == std::string::npos) kept += line + '\n';
  }
  return kept;
}


// Empty if reserved memory covers every pooled block whenever it is live:
// segments never overlap, a segment_free names memory held, each alloc with
// a `block` (≥ its size) lies inside a segment held on its device, and each
// alloc without one (passthrough: a pool fallback, managed or pinned memory)
// has its segment twin just before it.
std::string check_pool_segments(const std::vector<json>& trace) {
  std::ostringstream why;
  std::map<int, std::map<std::uint64_t, std::uint64_t>> held;  // dev → base → size
  // Inside held memory: one segment, or adjacent ones (an expandable
  // range's pages are mapped run by run, each its own segment_alloc, and a
  // block may span several).
  auto inside = [&](int dev, std::uint64_t ptr, std::uint64_t size) {
    auto& segs = held[dev];
    auto it = segs.upper_bound(ptr);
    if (it == segs.begin()) return false;
    --it;
    std::uint64_t end = it->first + it->second;
    if (ptr >= end) return false;
    while (end < ptr + size) {
      const auto next = segs.find(end);
      if (next == segs.end()) return false;
      end += next->second;
    }
    return true;
  };
  const json* previous = nullptr;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const json& l = trace[i];
    const std::string ev = l["ev"];
    if (ev == "segment_alloc" || ev == "segment_free" || ev == "alloc") {
      const int dev = l["dev"];
      const auto ptr = std::stoull(l["ptr"].get<std::string>(), nullptr, 16);
      const auto size = l["size"].get<std::uint64_t>();
      if (ev == "segment_alloc") {
        if (inside(dev, ptr, 1) || inside(dev, ptr + size - 1, 1)) why << "line " << i << ": overlaps a segment\n";
        held[dev][ptr] = size;
      } else if (ev == "segment_free") {
        if (!inside(dev, ptr, size)) why << "line " << i << ": frees memory not held\n";
        auto& segs = held[dev];
        auto it = std::prev(segs.upper_bound(ptr));
        const std::uint64_t base = it->first, top = it->first + it->second;
        segs.erase(it);
        if (base < ptr) segs[base] = ptr - base;
        if (top > ptr + size) segs[ptr + size] = top - (ptr + size);
      } else if (l["kind"] != "vmm") {
        if (l.contains("block")) {
          const auto block = l["block"].get<std::uint64_t>();
          if (block < size) why << "line " << i << ": block smaller than size\n";
          if (!inside(dev, ptr, block)) why << "line " << i << ": block outside reserved memory\n";
        } else if (!previous || (*previous)["ev"] != "segment_alloc" || (*previous)["ptr"] != l["ptr"]) {
          why << "line " << i << ": a passthrough alloc without its segment twin\n";
        }
      }
    }
    previous = &l;
  }
  return why.str();
}

class PoolPreload : public ::testing::Test {
 protected:
  // tests/apps/<app> ARGS... under the preload in the default mode (caching).
  CommandResult traced(const std::string& app, EnvChanges env = {}, std::vector<std::string> args = {}) {
    env.insert(env.begin(), {"CUMEMTRACE_POOL", std::nullopt});
    env.emplace_back("LD_PRELOAD", CUMEMTRACE_PRELOAD);
    env.emplace_back("CUMEMTRACE_OUTPUT", trace_);
    return untraced(app, env, args);
  }
  CommandResult untraced(const std::string& app, const EnvChanges& env = {}, std::vector<std::string> args = {}) {
    args.insert(args.begin(), kApps + "/" + app);
    return run_command(args, sim_environment(env));
  }
  std::vector<json> trace() const { return read_json_lines(trace_); }

  TempDir dir_;
  const std::string trace_ = dir_ / "trace.jsonl";
  const std::string manifest_ = dir_ / "manifest.jsonl";
};

TEST_F(PoolPreload, FreedBlockIsNotReusedWhileTheDeviceMayStillWriteIt) {
  // Four 50 ms memsets queued on a non-blocking stream before cudaFree.
  const EnvChanges slow = {{"SIMCUDA_ASYNC_LATENCY_US", "50000"}};
  const auto r = traced("pool_reuse_after_free", slow, {"4"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // The pool did hand A's memory out again (after waiting), so the test
  // tested something: a pool that skipped the wait fails with "overwritten".
  EXPECT_EQ(r.out, "reused: 1\npattern: intact\n");
  const auto lines = trace();
  EXPECT_EQ(lines.front()["pool"], "caching");
  EXPECT_EQ(lines_of(lines, "segment_alloc").size(), 1u) << "the second request reused the first block";
  EXPECT_EQ(check_address_order(lines), "");
  EXPECT_EQ(check_pool_segments(lines), "");
}

// Each thread's per-thread default stream is a stream of its own, also for a
// thread started after another exited (it used to get the exited thread's
// thread-local storage, and with it that thread's stream in the pool).
TEST_F(PoolPreload, AThreadsPerThreadStreamIsNotAnExitedThreads) {
  const EnvChanges slow = {{"SIMCUDA_ASYNC_LATENCY_US", "50000"}};
  const auto r = traced("pool_thread_streams", slow, {"4"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // A's memory did go to B (after an ordering of the device), so the test
  // tested something: a pool that took B's stream for A's handed it over
  // at once, and A's queued memsets overwrote B's pattern.
  EXPECT_EQ(r.out, "reused: 1\npattern: intact\n");
  EXPECT_EQ(check_pool_segments(trace()), "");
}

// Issue 30: cudaFree'd memory comes back through an ordering of the device
// (no wait), and its pages go back only once no queued work can touch them:
// a pool that unmapped A's pages while the write to A was queued would make
// the sim raise an illegal address at the synchronisation.
TEST_F(PoolPreload, PagesAreNotGivenBackWhileQueuedWorkMayTouchThem) {
  const EnvChanges slow = {{"SIMCUDA_ASYNC_LATENCY_US", "100000"}};
  const auto r = traced("pool_give_back", slow);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "queued work ran\ndone\n");
  const auto lines = trace();
  EXPECT_EQ(check_pool_segments(lines), "");
  // A's pages could not be unmapped under the queued write, but their
  // memory moved to the 40 MiB request by aliasing (mapped at both
  // addresses until the write completed; stream order puts C's use after
  // it): 90 MiB after C, 110 after D, the peak of live memory. Unmapped
  // pages only (before aliasing moves) would have grown the range to 120.
  std::uint64_t reserved = 0, peak = 0;
  for (const json& l : lines) {
    if (l["ev"] == "segment_alloc") reserved += l["size"].get<std::uint64_t>();
    if (l["ev"] == "segment_free") reserved -= l["size"].get<std::uint64_t>();
    peak = std::max(peak, reserved);
  }
  EXPECT_EQ(peak, std::uint64_t{110} << 20);
}

// The same, with the queued write on a non-blocking stream the program
// destroyed before the pool made room: cuStreamDestroy returns while the
// stream's work still runs, so the orderings must go on waiting for it.
TEST_F(PoolPreload, PagesAreNotGivenBackWhileADestroyedStreamsWorkMayTouchThem) {
  const EnvChanges slow = {{"SIMCUDA_ASYNC_LATENCY_US", "100000"}};
  const auto r = traced("pool_destroyed_stream", slow);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "queued work ran\ndone\n");
  EXPECT_EQ(check_pool_segments(trace()), "");
}

// Issue 30, item 4: what a program reads of the device's memory pool
// (cudaMemPoolGetAttribute, PyTorch's memory_allocated() under
// backend:cudaMallocAsync) is what it reads bare, although the pool serves
// its stream-ordered memory from its own ranges, not the driver's pool.
TEST_F(PoolPreload, MemoryPoolAttributesReadAsBare) {
  const auto bare = untraced("pool_mempool_stats");
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto pooled = traced("pool_mempool_stats");
  ASSERT_EQ(pooled.exit_code, 0) << pooled.err;
  auto parse = [](const std::string& out) {
    std::vector<std::map<std::string, std::string>> points;
    for (const std::string& line : cumemtrace::testing::lines_of(out)) {
      std::istringstream in(line);
      std::map<std::string, std::string> f;
      std::string word;
      in >> f["point"];
      while (in >> word) f[word.substr(0, word.find('='))] = word.substr(word.find('=') + 1);
      points.push_back(f);
    }
    return points;
  };
  const auto want = parse(bare.out), got = parse(pooled.out);
  ASSERT_EQ(got.size(), want.size()) << pooled.out;
  ASSERT_EQ(got.size(), 6u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].at("point"));
    EXPECT_EQ(got[i].at("used"), want[i].at("used"));
    EXPECT_EQ(got[i].at("used_high"), want[i].at("used_high"));
    EXPECT_GE(std::stoull(got[i].at("reserved")), std::stoull(got[i].at("used")));
    EXPECT_GE(std::stoull(got[i].at("reserved_high")), std::stoull(got[i].at("used_high")));
  }
  EXPECT_EQ(want[1].at("used"), std::to_string(1024 + (3 << 20) + 512 + (140 << 20) + 512))
      << "each allocation counted at its size rounded up to 512 bytes";
}

TEST_F(PoolPreload, FragmentedDeviceFailsAsWithoutCumemtraceAndSaysWhy) {
  const EnvChanges small = {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}};
  const auto bare = untraced("pool_fragmentation", small);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto r = traced("pool_fragmentation", small);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The code, the last-error state (once, then cleared) and the next request
  // that fits: identical to the real runtime's.
  const std::string info = "cudaMemGetInfo: ";
  EXPECT_EQ(without_lines_containing(r.out, info), without_lines_containing(bare.out, info));
  EXPECT_NE(r.out.find("cudaMalloc(100 MiB): cudaErrorMemoryAllocation\n"
                       "cudaPeekAtLastError: cudaErrorMemoryAllocation\n"
                       "cudaGetLastError: cudaErrorMemoryAllocation\n"
                       "cudaGetLastError again: cudaSuccess\n"
                       "cudaMalloc(1 MiB) after: cudaSuccess\n"),
            std::string::npos)
      << r.out;
  // Without cumemtrace, half the bytes are unused but every 2 MiB page
  // holds a live 1 MiB block, so the driver has no page free (the 100 MiB
  // request fails there for the same reason: no free pages).
  EXPECT_NE(bare.out.find("cudaMemGetInfo: free 0 MiB of 1024 MiB, free <= total: 1"), std::string::npos)
      << bare.out;
  // Under the pool, half the device is cached free in holes of segments
  // that hold live blocks: the free memory the program is told of is the
  // pool's cache.
  EXPECT_NE(r.out.find("cudaMemGetInfo: free 512 MiB of 1024 MiB, free <= total: 1"), std::string::npos) << r.out;

  const auto lines = trace();
  const auto ooms = lines_of(lines, "oom");
  ASSERT_EQ(ooms.size(), 1u);
  const json& oom = ooms[0];
  EXPECT_EQ(oom["api"], "cudaMalloc");
  EXPECT_EQ(oom["dev"], 0);
  EXPECT_EQ(oom["size"], 100 * kMiB);
  EXPECT_EQ(oom["block"], 100 * kMiB);
  EXPECT_EQ(oom["allocated"], 512 * kMiB);
  EXPECT_EQ(oom["reserved"], 1024 * kMiB);
  EXPECT_EQ(oom["cached_free"], 512 * kMiB);
  EXPECT_EQ(oom["largest_free"], kMiB);
  EXPECT_EQ(oom["device_free"], 0);
  EXPECT_EQ(oom["device_total"], 1024 * kMiB);
  EXPECT_EQ(oom["cause"], "fragmentation");
  // The failed request's call stack, written before the oom line.
  ASSERT_GT(oom["stack"].get<std::uint64_t>(), 0u);
  bool stack_written = false;
  for (const json& line : lines_of(lines, "stack")) stack_written |= line["id"] == oom["stack"];
  EXPECT_TRUE(stack_written);
  EXPECT_GT(oom["tid"].get<long>(), 0);
  // Written before the error was returned: before the next allocation.
  std::size_t at_oom = 0, next_alloc = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i]["ev"] == "oom") at_oom = i;
    if (at_oom && !next_alloc && lines[i]["ev"] == "alloc") next_alloc = i;
  }
  EXPECT_GT(next_alloc, at_oom);
  EXPECT_EQ(lines[next_alloc]["size"], kMiB);
  EXPECT_TRUE(lines[next_alloc].contains("block")) << "the fitting request came from the pool";
  EXPECT_EQ(lines.back()["live"], 0);
  EXPECT_EQ(check_pool_segments(lines), "");
}

TEST_F(PoolPreload, TraceShowsThePoolsSegmentsBlocksAndSamples) {
  const auto r = traced("known_sequence", {}, {manifest_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = trace();
  const json& header = lines.front();
  EXPECT_EQ(header["pool"], "caching");
  EXPECT_EQ(header["config"]["pool"], "caching");
  EXPECT_EQ(header["config"]["pool_sample_ms"], 100);
  EXPECT_TRUE(header["config"]["max_split_size"].is_null());
  EXPECT_EQ(header["config"]["segment_policy"], "tight");

  const auto allocs = lines_of(lines, "alloc");
  ASSERT_EQ(allocs.size(), 7u);
  for (const json& a : allocs) EXPECT_TRUE(a.contains("block")) << a;
  // Only growth is a segment: fewer segments than allocations here, and
  // reserved memory covers every block.
  EXPECT_LT(lines_of(lines, "segment_alloc").size(), allocs.size());
  EXPECT_EQ(check_pool_segments(lines), "");
  EXPECT_EQ(check_address_order(lines), "");

  // Samples: the first allocation's, and the final one before `end`.
  const auto samples = lines_of(lines, "pool");
  ASSERT_GE(samples.size(), 2u);
  for (const char* field : {"dev", "allocated", "reserved", "cached_free", "largest_free", "free_blocks",
                            "inactive_split"}) {
    EXPECT_TRUE(samples.back().contains(field)) << field;
  }
  EXPECT_EQ(lines[lines.size() - 2]["ev"], "pool");
  const json& last = samples.back();
  EXPECT_EQ(last["reserved"].get<std::uint64_t>(),
            last["allocated"].get<std::uint64_t>() + last["cached_free"].get<std::uint64_t>());

  // What the application did is what passthrough mode records.
  const auto report = run_command({CUMEMTRACE_CLI, "report", trace_, "--format", "json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const json j = json::parse(report.out);
  EXPECT_EQ(j["peak_allocated"], 44'163'657);  // known_sequence_test.cpp's figures
  EXPECT_EQ(j["leaked_bytes"], 2'500'007);
  EXPECT_GE(j["peak_reserved"].get<std::uint64_t>(), j["peak_allocated"].get<std::uint64_t>());
}

TEST_F(PoolPreload, SamplesComeAtMostEverySampleInterval) {
  const auto r = traced("route_threads", {{"SIMCUDA_MALLOC_LATENCY_US", "50"}, {"CUMEMTRACE_POOL_SAMPLE_MS", "2"}},
                        {manifest_, "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = trace();
  EXPECT_EQ(lines.front()["config"]["pool_sample_ms"], 2);
  const auto samples = lines_of(lines, "pool");
  ASSERT_GE(samples.size(), 3u) << "the run lasts long enough for several samples";
  // All but the final sample (written at exit) at least the interval
  // apart, however the program's threads are preempted between deciding to sample
  // and writing the line.
  for (std::size_t i = 1; i + 1 < samples.size(); ++i) {
    const auto previous = samples[i - 1]["t"].get<std::int64_t>();
    const auto gap = samples[i]["t"].get<std::int64_t>() - previous;
    EXPECT_GE(gap, 2'000'000) << "sample " << i;
  }
}

// With ordinary segments (the fallback where the device has no virtual
// memory management); the default, expandable segments, is the next test.
TEST_F(PoolPreload, DeviceResetGivesBackEverySegmentThePoolHeld) {
  const EnvChanges small = {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}};
  const auto bare = untraced("pool_reset", small);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EnvChanges ordinary = small;
  ordinary.emplace_back("CUMEMTRACE_POOL_CONF", "expandable_segments:false");
  const auto r = traced("pool_reset", ordinary);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, bare.out);
  // The 6 MiB stream-ordered block survived the reset; freed, it leaves all.
  EXPECT_NE(r.out.find("after the reset: free 1018 MiB of 1024 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cudaFreeAsync of the stream-ordered block: cudaSuccess"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("after freeing it: free 1024 MiB of 1024 MiB"), std::string::npos) << r.out;

  const auto lines = trace();
  EXPECT_EQ(check_pool_segments(lines), "");
  // The reset's own lines: the live cudaMalloc block's free (not the
  // stream-ordered one's), then a segment_free for each segment of the
  // context's memory (the live block's, the cached one), leaving reserved
  // only the stream's segment, from cuMemAllocAsync.
  std::size_t reset_free = 0;
  std::uint64_t stream_segment = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i]["ev"] == "free" && lines[i]["api"] == "cudaDeviceReset") {
      EXPECT_EQ(reset_free, 0u) << "a second free at the reset, line " << i;
      reset_free = i;
    }
    if (lines[i]["ev"] == "segment_alloc" && lines[i]["api"] == "cuMemAllocAsync") {
      stream_segment = lines[i]["size"].get<std::uint64_t>();
    }
  }
  ASSERT_GT(reset_free, 0u);
  EXPECT_EQ(lines[reset_free]["size"], kMiB);
  EXPECT_EQ(stream_segment, 20 * kMiB);
  std::int64_t reserved = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > reset_free && lines[i]["ev"] != "segment_free") {
      EXPECT_EQ(reserved, static_cast<std::int64_t>(stream_segment)) << "after the reset's lines, at line " << i;
      break;
    }
    if (lines[i]["ev"] == "segment_alloc") reserved += lines[i]["size"].get<std::int64_t>();
    if (lines[i]["ev"] == "segment_free") reserved -= lines[i]["size"].get<std::int64_t>();
  }
  // The block freed after the reset, its segment given back.
  std::size_t async_free = 0;
  for (std::size_t i = reset_free; i < lines.size(); ++i) {
    if (lines[i]["ev"] == "free" && lines[i]["api"] == "cudaFreeAsync") async_free = i;
  }
  ASSERT_GT(async_free, reset_free);
  EXPECT_EQ(lines[async_free]["size"], 6 * kMiB);
  EXPECT_EQ(lines.back()["live"], 0);
  EXPECT_EQ(lines.back()["ev"], "end");
}

// With expandable segments the pool's large blocks live in cuMemMap'd pages,
// which a reset leaves alone: the pool itself unmaps the device-wide range
// (its blocks were cudaMalloc's) and keeps the stream's.
TEST_F(PoolPreload, DeviceResetWithExpandableSegmentsKeepsOnlyTheStreamsPages) {
  const EnvChanges small = {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}};
  const auto bare = untraced("pool_reset", small);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto r = traced("pool_reset", small);  // the default: expandable segments
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, bare.out);
  const auto lines = trace();
  EXPECT_EQ(check_pool_segments(lines), "");
  // Right after the reset's own lines (its free of the live block, then a
  // segment_free for each device-wide page): only the stream's 6 MiB.
  std::int64_t reserved = 0, after_reset = -1;
  bool in_reset = false;
  for (const json& l : lines) {
    if (l["ev"] == "free" && l["api"] == "cudaDeviceReset") in_reset = true;
    else if (in_reset && l["ev"] != "segment_free") {
      after_reset = reserved;
      in_reset = false;
    }
    if (l["ev"] == "segment_alloc") {
      EXPECT_EQ(l["api"], "cuMemMap") << "expandable segments only: " << l;
      reserved += l["size"].get<std::int64_t>();
    }
    if (l["ev"] == "segment_free") reserved -= l["size"].get<std::int64_t>();
  }
  EXPECT_EQ(after_reset, static_cast<std::int64_t>(6 * kMiB)) << "the stream's pages survive the reset";
  // Left at exit: only the page that `fresh` took after the reset, cached.
  EXPECT_EQ(reserved, static_cast<std::int64_t>(2 * kMiB));
}

// Every route program, in caching mode: the same allocs, frees and errors
// as its manifest says (which passthrough mode checks with their segment
// twins in routes_test.cpp), a well-formed trace, and reserved memory that
// covers every block.
struct RouteCase {
  std::string app;
  EnvChanges env;
};

TEST_F(PoolPreload, EveryRouteRecordsTheSameAllocationsAsInPassthroughMode) {
  const std::vector<RouteCase> cases = {
      {"route_runtime", {}},
      {"route_driver", {}},
      {"route_entry_points", {}},
      {"route_framework", {}},
      {"route_stream_ordered", {}},
      {"route_vmm", {}},
      {"route_static_runtime", {}},
      {"route_semantics", {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}}},
      // Resets: its cudaMallocAsync block survives cudaDeviceReset (CUDA 13)
      // and is freed afterwards, because the pool's stream sub-pools take
      // their segments from cuMemAllocAsync (DevicePool::device_reset).
      {"route_devices", {{"SIMCUDA_DEVICE_COUNT", "2"}}},
  };
  for (const RouteCase& c : cases) {
    SCOPED_TRACE(c.app);
    std::remove(trace_.c_str());
    const auto r = traced(c.app, c.env, {manifest_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto lines = trace();
    const auto done = read_json_lines(manifest_);
    EXPECT_EQ(compare_events(application_events(expected_events(done)), application_events(memory_events(lines))),
              "");
    EXPECT_EQ(check_trace_frame(lines, done), "");
    EXPECT_EQ(check_address_order(lines), "");
    EXPECT_EQ(check_pool_segments(lines), "");
    if (c.app == "route_semantics") {
      // Every code as without cumemtrace. Memory information: the driver
      // counts the page of the 1 MiB block, then of the 4 KiB one; the pool
      // tells the program its own bytes (the rest of its 2 MiB segment is
      // cached free).
      const auto bare = untraced(c.app, c.env, {dir_ / "bare.jsonl"});
      const std::string info = "in use: ";
      EXPECT_EQ(without_lines_containing(r.out, info), without_lines_containing(bare.out, info));
      EXPECT_NE(bare.out.find("in use: 2097152\n"), std::string::npos) << bare.out;
      EXPECT_NE(r.out.find("in use: 1048576\n"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("in use: 4096\n"), std::string::npos) << r.out;
    }
  }
}

TEST_F(PoolPreload, SixteenThreadsLoseAndDuplicateNothing) {
  const auto r = traced("route_threads", {{"SIMCUDA_MALLOC_LATENCY_US", "50"}}, {manifest_, "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = trace();
  const auto done = read_json_lines(manifest_);
  const auto differences = compare_events_per_thread(done, lines);
  EXPECT_EQ(differences.size(), 16u);
  for (const auto& [tid, diff] : differences) {
    EXPECT_TRUE(diff.empty()) << "thread " << tid << ": " << diff.substr(0, 2000);
  }
  EXPECT_EQ(check_trace_frame(lines, done), "");
  EXPECT_EQ(check_address_order(lines), "");
  EXPECT_EQ(check_pool_segments(lines), "");
}

TEST_F(PoolPreload, ForkedChildLeavesTheParentsPoolAlone) {
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", dir_ / "t.%p.jsonl", "--", kApps + "/fork_child"},
                             sim_environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<json> lines;
  // Only the parent touched CUDA, so only it wrote a trace.
  int traces = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.dir())) {
    if (entry.path().filename().string().starts_with("t.")) {
      ++traces;
      lines = read_json_lines(entry.path());
    }
  }
  ASSERT_EQ(traces, 1);
  std::vector<std::string> evs;
  for (const auto& l : application_events(lines)) evs.push_back(l["ev"]);
  EXPECT_EQ(evs, (std::vector<std::string>{"alloc", "alloc", "free", "free"}));
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["live"], 0);
  EXPECT_EQ(check_pool_segments(lines), "");
}

}  // namespace
