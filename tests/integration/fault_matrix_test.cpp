// The fault matrix (issue 6, item 3): for each fault, the program behaves
// as without cumemtrace (the same exit status and output as the bare
// program on the simulated device), and everything written before the
// fault is readable (`cumemtrace report` reads the trace, exit 0, no bad
// line, `truncated` exactly when the trace could not be ended, events lost
// to the fault said so, the program's allocations in it). Each row runs an existing robustness program twice,
// bare and under the preload (caching pool, default stacks); the
// fault-specific details of each are tested in robustness_test.cpp,
// pool_preload_test.cpp and launcher_test.cpp, which this does not repeat.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {


// No core files from the programs that fault on purpose.

// Starts `argv` with `env` and ends it: waits (at most a minute), or, for
// the SIGKILL row, kills it a second after it printed "ready".
using Runner = std::function<CommandResult(const std::vector<std::string>&, const EnvChanges&)>;

CommandResult run_to_end(const std::vector<std::string>& argv, const EnvChanges& env) {
  return run_at_most(argv, env);
}

CommandResult kill_when_ready(const std::vector<std::string>& argv, const EnvChanges& env) {
  TempDir scratch;
  const auto running = start_command(argv, env, scratch);
  wait_for_ready(running);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // past the periodic flush
  kill(running.pid, SIGKILL);
  return wait_at_most(running, 30);
}

// What the report must say of a row's trace, beyond "exit 0, no bad line".
struct ReportExpectation {
  // complete: an `end` line and nothing dropped; killed: completed by the
  // report from the pending file, `end` reason killed, nothing dropped;
  // lossy: lines lost to a write error, which either cut the trace or, when
  // a later, shorter line still fitted (the `end` line), left a gap that
  // `end` counts as dropped; racing: an `end` line, and the events of
  // threads that went on allocating while the process exited, too late to
  // precede it, counted as dropped (each such thread's drops follow its last
  // recorded event: at most one allocation of each looks leaked).
  enum class Ending { complete, killed, lossy, racing } ending = Ending::complete;
  std::function<void(const json& report, const CommandResult& traced)> more{};
};

struct Fault {
  std::string name{};
  std::vector<std::string> argv{};
  EnvChanges env{};  // for both runs
  Runner run = run_to_end;
  std::string trace = "t.jsonl";  // in the row's directory
  std::optional<ReportExpectation> report{};  // nullopt: no trace may be written
  int cumemtrace_lines = 0;  // lines cumemtrace adds to stderr (its warnings)
};

// "allocs N frees M" as exit_paths prints it.
std::pair<int, int> printed_counts(const std::string& out) {
  int allocs = -1, frees = -1;
  std::sscanf(out.c_str(), "allocs %d frees %d", &allocs, &frees);
  return {allocs, frees};
}

void expect_counts(const json& report, int allocs, int frees) {
  EXPECT_EQ(report["allocs"], allocs);
  EXPECT_EQ(report["frees"], frees);
  EXPECT_EQ(report["leaked_count"], allocs - frees);
}

std::vector<Fault> faults() {
  std::vector<Fault> rows;
  // Disk full: the program's own RLIMIT_FSIZE of 64 KiB, SIGXFSZ ignored and
  // at its default (our write must never raise it on the program).
  for (const std::string xfsz : {"ignore", "default"}) {
    rows.push_back({.name = "disk full, SIGXFSZ " + xfsz,
                    .argv = {kApps + "/survive_signals", "fill", "65536", xfsz},
                    .report = ReportExpectation{.ending = ReportExpectation::Ending::lossy,
                                                .more = [](const json& report, const CommandResult&) {
                                                  EXPECT_GT(report["allocs"].get<long>(), 100);
                                                  EXPECT_LE(report["allocs"].get<long>(), 2000);
                                                }},
                    .cumemtrace_lines = 1});
  }
  // An output directory the program may not write into: nothing is written,
  // one warning, the program unchanged.
  rows.push_back({.name = "unwritable output directory",
                  .argv = {kApps + "/exit_paths", "atexit-after"},
                  .trace = "ro/t.jsonl",
                  .cumemtrace_lines = 1});
  rows.push_back({.name = "SIGKILL",
                  .argv = {kApps + "/survive_signals", "wait"},
                  .run = kill_when_ready,
                  .report = ReportExpectation{.ending = ReportExpectation::Ending::killed,
                                              .more = [](const json& report, const CommandResult&) {
                                                expect_counts(report, 6, 2);
                                              }}});
  for (const std::string mode : {"segv", "segv-handler"}) {
    rows.push_back({.name = "SIGSEGV (" + mode + ")",
                    .argv = {kApps + "/survive_signals", mode},
                    .report = ReportExpectation{.more = [](const json& report, const CommandResult&) {
                      expect_counts(report, 6, 2);
                      EXPECT_EQ(report["end"]["reason"], "signal");
                    }}});
  }
  // exit() from a fifth thread while four allocate: the frees after the
  // last complete pair may be missing, never an event half-written.
  rows.push_back({.name = "exit() from another thread",
                  .argv = {kApps + "/exit_paths", "thread-exit"},
                  .report = ReportExpectation{.ending = ReportExpectation::Ending::racing,
                                              .more = [](const json& report, const CommandResult&) {
                    EXPECT_GE(report["allocs"].get<long>(), 2000);
                    EXPECT_LE(report["leaked_count"].get<long>(), 4) << "at most one per allocating thread";
                    EXPECT_EQ(report["end"]["reason"], "exit");
                  }}});
  for (const std::string mode : {"static-dtor", "main-pthread-exit"}) {
#if defined(__SANITIZE_THREAD__)
    // Under ThreadSanitizer a program whose main thread ends in pthread_exit
    // never exits: TSan's own background thread outlives every program
    // thread (exit_paths main-pthread-exit alone, without cumemtrace, hangs
    // too). The plain and ASan runs check this row.
    if (mode == "main-pthread-exit") continue;
#endif
    rows.push_back({.name = "exit from " + mode,
                    .argv = {kApps + "/exit_paths", mode},
                    .report = ReportExpectation{.more = [](const json& report, const CommandResult& traced) {
                      const auto [allocs, frees] = printed_counts(traced.out);
                      expect_counts(report, allocs, frees);
                    }}});
  }
  rows.push_back({.name = "cudaDeviceReset mid-run",
                  .argv = {kApps + "/pool_reset"},
                  .env = {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}},
                  .report = ReportExpectation{.more = [](const json& report, const CommandResult&) {
                    // live, cached (freed), stream-ordered, fresh: the reset
                    // frees the live one, the program the rest.
                    expect_counts(report, 4, 4);
                  }}});
  // A child that never touches CUDA exits normally (its exit runs our
  // destructor in the child) between the parent's allocations.
  rows.push_back({.name = "child that never touches CUDA",
                  .argv = {kApps + "/fork_child"},
                  .report = ReportExpectation{.more = [](const json& report, const CommandResult&) {
                    expect_counts(report, 2, 2);
                  }}});
  return rows;
}

// `err` without the lines cumemtrace wrote ("cumemtrace: ...").
std::string program_lines(const std::string& err, int* ours) {
  std::istringstream in(err);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("cumemtrace: ")) {
      ++*ours;
    } else {
      kept += line + "\n";
    }
  }
  return kept;
}

EnvChanges preloaded(EnvChanges env, const std::string& trace) {
  env.push_back({"LD_PRELOAD", CUMEMTRACE_PRELOAD});
  env.push_back({"CUMEMTRACE_OUTPUT", trace});
  env.push_back({"CUMEMTRACE_POOL", std::nullopt});
  env.push_back({"CUMEMTRACE_STACKS", std::nullopt});
  return sim_environment(env);
}

TEST(FaultMatrix, EachFaultBehavesAsWithoutCumemtraceAndLeavesAReadableTrace) {
  ASSERT_TRUE(kNoCores);
  std::size_t rows = 0;
  for (const Fault& fault : faults()) {
    TempDir dir;
    std::string trace = dir / fault.trace;
    if (fault.trace.starts_with("ro/")) {
      fs::create_directory(dir / "ro");
      fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
      // Root writes into a read-only directory anyway, not into /proc.
      if (geteuid() == 0) trace = "/proc/cumemtrace-fault-matrix.jsonl";
    }
    SCOPED_TRACE(fault.name);
    ++rows;
    const auto bare = fault.run(fault.argv, sim_environment(fault.env));
    const auto traced = fault.run(fault.argv, preloaded(fault.env, trace));

    // The program's half: status, output, its own error output.
    EXPECT_EQ(traced.exit_code, bare.exit_code) << traced.err;
    EXPECT_EQ(traced.out, bare.out);
    int ours = 0, ours_bare = 0;
    EXPECT_EQ(program_lines(traced.err, &ours), program_lines(bare.err, &ours_bare));
    EXPECT_EQ(ours, fault.cumemtrace_lines) << traced.err;
    EXPECT_EQ(ours_bare, 0);

    // The trace's half.
    if (!fault.report) {
      EXPECT_FALSE(fs::exists(trace));
      continue;
    }
    const auto r = run_command({CUMEMTRACE_CLI, "report", "--format", "json", trace});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json report = json::parse(r.out);
    EXPECT_EQ(report["bad_lines"], 0);
    EXPECT_EQ(report["has_end"], !report["truncated"].get<bool>());
    switch (fault.report->ending) {
      case ReportExpectation::Ending::complete:
        EXPECT_EQ(report["truncated"], false);
        EXPECT_EQ(report["end"]["dropped"], 0);
        break;
      case ReportExpectation::Ending::killed:
        EXPECT_EQ(report["truncated"], false);
        EXPECT_EQ(report["end"]["reason"], "killed");
        EXPECT_EQ(report["end"]["dropped"], 0);
        EXPECT_FALSE(fs::exists(trace + ".pending"));
        break;
      case ReportExpectation::Ending::racing:
        EXPECT_EQ(report["truncated"], false);
        break;
      case ReportExpectation::Ending::lossy:
        EXPECT_TRUE(report["truncated"] == true || report["end"]["dropped"].get<long>() > 0) << report["end"];
        break;
    }
    if (fault.report->more) fault.report->more(report, traced);
  }
  EXPECT_GE(rows, 10u);
}

// Out-of-memory storms: 8 threads, 100 rounds each, on a 1 GiB device, each
// round asking for more than the device holds and then for a block of
// three tenths of it until the request succeeds (tests/apps/oom_storm.cpp).
// Every code and last-error state the program sees is the bare run's; the
// trace has one `oom` line per failed request and every allocation made.
// The output without the lines whose presence or count depend on
// scheduling (how often a near-capacity request met three holders).
std::vector<std::string> scheduling_free(const std::string& out) {
  std::vector<std::string> kept;
  for (const std::string& line : lines_of(out)) {
    if (!line.starts_with("near-capacity failure")) kept.push_back(line);
  }
  return kept;
}

TEST(FaultMatrix, OutOfMemoryStormsLookAsWithoutCumemtraceAndEachFailureIsAnOomLine) {
  constexpr int kThreads = 8, kRounds = 100, kMiB = 1 << 20;
  const EnvChanges small = {{"SIMCUDA_DEVICE_MEMORY", "1GiB"}};
  const std::vector<std::string> argv = {kApps + "/oom_storm", std::to_string(kThreads), std::to_string(kRounds)};
  const auto bare = run_to_end(argv, sim_environment(small));
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  TempDir dir;
  const auto traced = run_to_end(argv, preloaded(small, dir / "t.jsonl"));
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.err, "");
  EXPECT_EQ(scheduling_free(traced.out), scheduling_free(bare.out));

  const std::string oom = "cudaErrorMemoryAllocation peek cudaErrorMemoryAllocation get cudaErrorMemoryAllocation "
                          "then cudaSuccess";
  const long half = kThreads * kRounds / 2;
  const std::vector<std::string> expected = {
      "near-capacity success: get cudaSuccess, free cudaSuccess x " + std::to_string(2 * half),
      "too-much cudaMalloc: " + oom + " x " + std::to_string(half),
      "too-much cudaMallocAsync: " + oom + " x " + std::to_string(half)};
  EXPECT_EQ(scheduling_free(bare.out), expected) << bare.out;
  long contended = -1;
  for (const std::string& line : lines_of(traced.out)) {
    if (line.starts_with("near-capacity failures ")) contended = std::stol(line.substr(23));
    if (line.starts_with("near-capacity failure: ")) {
      EXPECT_EQ(line, "near-capacity failure: " + oom);
    }
  }
  for (const std::string& line : lines_of(bare.out)) {
    if (line.starts_with("near-capacity failure: ")) {
      EXPECT_EQ(line, "near-capacity failure: " + oom);
    }
  }
  ASSERT_GT(contended, 0) << "the storm met full devices: " << traced.out;

  // One `oom` line per failed request, each allocation and free once.
  std::map<std::string, long> ooms, allocs, frees;
  for (const json& l : read_json_lines(dir / "t.jsonl")) {
    if (l["ev"] == "oom") {
      ++ooms[l["api"]];
      EXPECT_EQ(l["dev"], 0);
      EXPECT_EQ(l["device_total"], 1024 * kMiB);
      if (l["size"] == 1025 * kMiB) continue;
      EXPECT_LE(l["size"].get<long>(), 1024L * kMiB / 10 * 3) << l;
    }
    if (l["ev"] == "alloc") ++allocs[l["api"]];
    if (l["ev"] == "free") ++frees[l["api"]];
  }
  EXPECT_EQ(ooms["cudaMalloc"], half + contended);
  EXPECT_EQ(ooms["cudaMallocAsync"], half);
  EXPECT_EQ(allocs, (std::map<std::string, long>{{"cudaMalloc", 2 * half}}));
  EXPECT_EQ(frees, (std::map<std::string, long>{{"cudaFree", 2 * half}}));
  const auto r = run_command({CUMEMTRACE_CLI, "report", "--format", "json", dir / "t.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(r.out);
  EXPECT_EQ(report["bad_lines"], 0);
  EXPECT_EQ(report["truncated"], false);
  EXPECT_EQ(report["ooms"], 2 * half + contended);
  EXPECT_EQ(report["leaked_count"], 0);
}

}  // namespace
