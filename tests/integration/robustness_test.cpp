// A trace that survives anything (issue 3, items 4, 6, 8): programs from
// tests/apps/robustness_apps.cmake killed, faulting, exiting from odd
// places, forking, exec'ing and filling their disk, on the simulated device
// under the preload; and the options `cumemtrace run` passes on.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {


// No core files from the programs that fault on purpose.

EnvChanges preloaded(const std::string& output, EnvChanges more = {}) {
  more.emplace_back("LD_PRELOAD", CUMEMTRACE_PRELOAD);
  more.emplace_back("CUMEMTRACE_OUTPUT", output);
  return sim_environment(more);
}

std::map<std::string, int> count_events(const std::vector<json>& lines) {
  std::map<std::string, int> n;
  for (const auto& l : lines) ++n[l["ev"].get<std::string>()];
  return n;
}

// survive_signals' pattern: 6 allocations, 2 frees.
void expect_pattern(const std::vector<json>& lines) {
  const auto n = count_events(lines);
  EXPECT_EQ(n.count("alloc") ? n.at("alloc") : 0, 6);
  EXPECT_EQ(n.count("free") ? n.at("free") : 0, 2);
}

json report_of(const std::string& trace) {
  const auto r = run_command({CUMEMTRACE_CLI, "report", "--format", "json", trace});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

std::vector<std::string> files_in(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(prefix)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ---- SIGKILL: the pending file -----------------------------------------------

// Killed at once (nothing flushed yet) or a second later (everything
// flushed): either way the report completes the trace from the pending file
// with every event and `end` (killed).
TEST(Survive, SigkillRightAfterOrLongAfterTheLastAllocationLosesNothing) {
  ASSERT_TRUE(kNoCores);
  for (const std::string name : {"t.jsonl", "t.jsonl.zst"}) {
    for (const int wait_ms : {0, 1000}) {
      TempDir dir;
      const auto running = start_command({kApps + "/survive_signals", "wait"}, preloaded(dir / name), dir);
      wait_for_ready(running);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      kill(running.pid, SIGKILL);
      const auto r = wait_command(running);
      EXPECT_EQ(r.exit_code, 128 + SIGKILL);
      const json report = report_of(dir / name);
      EXPECT_EQ(report["allocs"], 6) << name << " " << wait_ms;
      EXPECT_EQ(report["frees"], 2) << name;
      EXPECT_EQ(report["leaked_count"], 4) << name;
      EXPECT_EQ(report["truncated"], false) << name;
      EXPECT_EQ(report["end"]["reason"], "killed") << name;
      EXPECT_FALSE(fs::exists(dir / (name + ".pending")));
      if (name == "t.jsonl") {
        const auto lines = read_json_lines(dir / name);
        expect_pattern(lines);
        EXPECT_EQ(lines.front()["ev"], "header");
        EXPECT_EQ(lines.back()["ev"], "end");
        EXPECT_EQ(lines.back()["live"], 4);
      }
    }
  }
}

// ---- terminating signals -----------------------------------------------------

TEST(Survive, TerminatingSignalWithoutAHandlerKeepsItsStatusAndEndsTheTrace) {
  for (const int signo : {SIGTERM, SIGINT}) {
    TempDir dir;
    const auto running = start_command({kApps + "/survive_signals", "wait"}, preloaded(dir / "t.jsonl"), dir);
    wait_for_ready(running);
    kill(running.pid, signo);
    const auto r = wait_command(running);
    EXPECT_FALSE(r.exited);
    EXPECT_EQ(r.exit_code, 128 + signo) << "killed by the signal, as without cumemtrace";
    const auto lines = read_json_lines(dir / "t.jsonl");
    expect_pattern(lines);
    EXPECT_EQ(lines.back()["ev"], "end");
    EXPECT_EQ(lines.back()["reason"], "signal");
    EXPECT_EQ(lines.back()["signal"], signo);
    EXPECT_EQ(lines.back()["live"], 4);
  }
}

TEST(Survive, ProgramSignalHandlersStillRun) {
  // Installed before the trace opens (taken over when it does) and after
  // (through our sigaction); the handler exits from inside, or returns and
  // lets main free everything and return.
  for (const std::string when : {"before", "after"}) {
    for (const int signo : {SIGTERM, SIGINT}) {
      TempDir dir;
      auto running = start_command({kApps + "/survive_signals", "handler", when, "exit"},
                                   preloaded(dir / "t.jsonl"), dir);
      wait_for_ready(running);
      kill(running.pid, signo);
      auto r = wait_command(running);
      EXPECT_EQ(r.exit_code, 3) << when << " " << signo << ": the program's handler called exit(3)";
      auto lines = read_json_lines(dir / "t.jsonl");
      expect_pattern(lines);
      EXPECT_EQ(lines.back()["reason"], "signal") << "it exited because of the signal";

      running = start_command({kApps + "/survive_signals", "handler", when, "continue"},
                              preloaded(dir / "u.jsonl"), dir);
      wait_for_ready(running);
      kill(running.pid, signo);
      r = wait_command(running);
      EXPECT_EQ(r.exit_code, 0) << when << " " << signo << ": " << r.err;
      lines = read_json_lines(dir / "u.jsonl");
      EXPECT_EQ(count_events(lines)["free"], 6) << "the program went on after its handler";
      EXPECT_EQ(lines.back()["reason"], "exit");
      EXPECT_EQ(lines.back()["live"], 0);

      // CPython's way out of a KeyboardInterrupt: default action restored
      // (through our sigaction: ours stays in front), the signal sent again.
      running = start_command({kApps + "/survive_signals", "handler", when, "reraise"},
                              preloaded(dir / "v.jsonl"), dir);
      wait_for_ready(running);
      kill(running.pid, signo);
      r = wait_command(running);
      EXPECT_EQ(r.exit_code, 128 + signo) << when << " " << signo << ": " << r.err;
      lines = read_json_lines(dir / "v.jsonl");
      EXPECT_EQ(count_events(lines)["free"], 6);
      EXPECT_EQ(lines.back()["reason"], "signal");
      EXPECT_EQ(lines.back()["signal"], signo);
    }
  }
}

TEST(Survive, FaultsKeepTheirStatusAndLeaveEverythingBeforeThem) {
  ASSERT_TRUE(kNoCores);
  const std::pair<std::string, int> cases[] = {
      {"segv", SIGSEGV}, {"abort", SIGABRT}, {"segv-handler", SIGSEGV}};
  for (const auto& [mode, signo] : cases) {
    TempDir dir;
    const auto r = run_at_most({kApps + "/survive_signals", mode}, preloaded(dir / "t.jsonl"));
    EXPECT_FALSE(r.exited) << mode;
    EXPECT_EQ(r.exit_code, 128 + signo) << mode;
    const auto lines = read_json_lines(dir / "t.jsonl");
    expect_pattern(lines);
    EXPECT_EQ(lines.back()["reason"], "signal") << mode;
    EXPECT_EQ(lines.back()["signal"], signo) << mode;
    if (mode == "segv-handler") {
      EXPECT_NE(r.err.find("program SIGSEGV handler ran"), std::string::npos) << r.err;
    } else {
      EXPECT_EQ(r.err.find("cumemtrace"), std::string::npos) << r.err;
    }
  }
}

TEST(Survive, HandlerSetBehindOurBackIsFoundOnTheNextFlush) {
  // sysv_signal sets the handler without calling sigaction; the writer
  // thread's re-check puts ours back in front within one flush interval.
  TempDir dir;
  const auto running = start_command({kApps + "/survive_signals", "handler", "sysv", "exit"},
                                     preloaded(dir / "t.jsonl", {{"CUMEMTRACE_FLUSH_MS", "20"}}), dir);
  wait_for_ready(running);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(running.pid, SIGTERM);
  const auto r = wait_command(running);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const auto lines = read_json_lines(dir / "t.jsonl");
  expect_pattern(lines);
  EXPECT_EQ(lines.back()["reason"], "signal") << "the program's handler was called by ours";
}

// ---- exit paths ------------------------------------------------------------------

TEST(Survive, ExitFromDestructorsHandlersAndOtherThreads) {
  const std::pair<std::string, int> cases[] = {{"static-dtor", 5},
                                               {"atexit-before", 6},
                                               {"atexit-after", 6},
                                               {"main-pthread-exit", 0}};
  for (const auto& [mode, status] : cases) {
    TempDir dir;
    const auto r = run_at_most({kApps + "/exit_paths", mode}, preloaded(dir / "t.jsonl"), 30);
    EXPECT_EQ(r.exit_code, status) << mode << ": " << r.err;
    const auto lines = read_json_lines(dir / "t.jsonl");
    ASSERT_FALSE(lines.empty()) << mode;
    EXPECT_EQ(lines.back()["ev"], "end") << mode;
    EXPECT_EQ(lines.back()["reason"], "exit") << mode;
    EXPECT_EQ(lines.back()["live"], 0) << mode << ": the frees made on the way out are in";
    int allocs = 0, frees = 0;
    ASSERT_EQ(std::sscanf(r.out.c_str(), "allocs %d frees %d", &allocs, &frees), 2) << mode << r.out;
    const auto n = count_events(lines);
    EXPECT_EQ(n.at("alloc"), allocs) << mode;
    EXPECT_EQ(n.at("free"), frees) << mode;
  }
}

TEST(Survive, ExitFromAnotherThreadWhileAllocationsRun) {
  TempDir dir;
  const auto r = run_at_most({kApps + "/exit_paths", "thread-exit"}, preloaded(dir / "t.jsonl"), 30);
  EXPECT_EQ(r.exit_code, 9) << r.err;
  const auto lines = read_json_lines(dir / "t.jsonl");  // throws on a torn line
  EXPECT_EQ(lines.back()["ev"], "end");
  std::uint64_t last_t = 0;
  std::map<std::string, int> live;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    const auto t = lines[i]["t"].get<std::uint64_t>();
    ASSERT_GE(t, last_t) << "line " << i + 1;
    last_t = t;
    if (lines[i]["ev"] == "alloc") {
      ASSERT_EQ(live[lines[i]["ptr"]]++, 0) << "line " << i + 1;
    } else if (lines[i]["ev"] == "free") {
      ASSERT_EQ(live[lines[i]["ptr"]]--, 1) << "line " << i + 1;
    }
  }
  EXPECT_GE(count_events(lines)["alloc"], 2000);
}

// ---- write errors ------------------------------------------------------------------

TEST(Survive, FullDiskNeverBreaksTheProgram) {
  // RLIMIT_FSIZE as the full disk; with SIGXFSZ ignored (write fails with
  // EFBIG) and at its default (which would kill the program if our write
  // raised it on one of its threads).
  for (const std::string xfsz : {"ignore", "default"}) {
    TempDir dir;
    const auto r = run_at_most({kApps + "/survive_signals", "fill", "65536", xfsz}, preloaded(dir / "t.jsonl"));
    EXPECT_EQ(r.exit_code, 0) << xfsz << ": " << r.err;
    EXPECT_EQ(r.out, "pairs 2000\n");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("cumemtrace: warning: cannot write the trace"), std::string::npos) << r.err;
    EXPECT_LE(fs::file_size(dir / "t.jsonl"), 65536u);
    const auto lines = read_json_lines(dir / "t.jsonl");  // whole lines only: none torn
    EXPECT_EQ(lines.front()["ev"], "header");
    EXPECT_GT(lines.size(), 100u);
  }
}

TEST(Survive, UnwritablePathNeverBreaksTheProgram) {
  TempDir dir;
  std::vector<std::string> paths = {"/dev/null/t.jsonl", "/proc/cumemtrace-t.jsonl"};
  if (geteuid() != 0) {  // root writes into a read-only directory anyway
    fs::create_directory(dir / "ro");
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    paths.push_back(dir / "ro/t.jsonl");
  }
  for (const std::string& path : paths) {
    const auto r = run_at_most({kApps + "/exit_paths", "atexit-after"}, preloaded(path));
    EXPECT_EQ(r.exit_code, 6) << path;
    EXPECT_EQ(r.out, "allocs 1 frees 1\n") << path;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("cannot create the trace file " + path), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path));
  }
}

// ---- zstd ----------------------------------------------------------------------------

TEST(Survive, ZstdTraceIsReadByReport) {
  TempDir dir;
  const auto r = run_at_most({CUMEMTRACE_CLI, "run", "--output", dir / "t.jsonl.zst", "--",
                              kApps + "/known_sequence", dir / "manifest.txt"},
                             sim_environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string compressed = read_file(dir / "t.jsonl.zst");
  ASSERT_GE(compressed.size(), 4u);
  EXPECT_EQ(compressed.substr(0, 4), std::string("\x28\xb5\x2f\xfd", 4)) << "a zstd stream";
  const json report = report_of(dir / "t.jsonl.zst");
  EXPECT_EQ(report["allocs"], 7);
  EXPECT_EQ(report["frees"], 5);
  EXPECT_EQ(report["leaked_count"], 2);
  EXPECT_EQ(report["truncated"], false);
}

// ---- fork and exec ---------------------------------------------------------------

TEST(Processes, ForkedChildWritesItsOwnCompleteTrace) {
  TempDir dir;
  const auto r = run_at_most({kApps + "/fork_paths", "child-traces"}, preloaded(dir / "t.%p.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int parent = 0, child = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "parent %d child %d", &parent, &child), 2) << r.out;
  const auto parent_lines = read_json_lines(dir / ("t." + std::to_string(parent) + ".jsonl"));
  const auto child_lines = read_json_lines(dir / ("t." + std::to_string(child) + ".jsonl"));
  EXPECT_EQ(files_in(dir.dir(), "t.").size(), 2u);
  EXPECT_EQ(child_lines.front()["pid"], child);
  EXPECT_EQ(child_lines.front()["ppid"], parent);
  auto n = count_events(child_lines);
  EXPECT_EQ(n["alloc"], 3);
  EXPECT_EQ(n["free"], 1);
  EXPECT_EQ(child_lines.back()["live"], 2);
  n = count_events(parent_lines);
  EXPECT_EQ(n["alloc"], 2);
  EXPECT_EQ(n["free"], 2);
  EXPECT_EQ(parent_lines.back()["ev"], "end");
  for (const auto& l : parent_lines) {
    if (l.contains("tid")) {
      EXPECT_EQ(l["tid"], parent) << "nothing of the child's in the parent's trace";
    }
  }
}

TEST(Processes, ForkedChildWithForkOffWritesNothing) {
  TempDir dir;
  const auto r = run_at_most({kApps + "/fork_paths", "child-traces"},
                             preloaded(dir / "t.%p.jsonl", {{"CUMEMTRACE_FORK", "off"}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int parent = 0, child = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "parent %d child %d", &parent, &child), 2) << r.out;
  EXPECT_EQ(files_in(dir.dir(), "t."), std::vector<std::string>{"t." + std::to_string(parent) + ".jsonl"});
  EXPECT_EQ(r.err, "");
}

TEST(Processes, ForksWhileTheParentWritesNeverDeadlockOrLeak) {
  // Children that never touch CUDA check themselves that they run as if
  // cumemtrace were absent (one thread, nothing printed); the writer thread
  // flushes every millisecond so forks land while it holds its lock.
  TempDir dir;
  const auto r = run_at_most({kApps + "/fork_paths", "busy-parent", "30"},
                             preloaded(dir / "t.%p.jsonl", {{"CUMEMTRACE_FLUSH_MS", "1"}}), 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  long pairs = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "pairs %ld", &pairs), 1) << r.out;
  const auto traces = files_in(dir.dir(), "t.");
  ASSERT_EQ(traces.size(), 1u) << "no trace from children that never touched CUDA";
  const std::string text = read_file(dir / traces[0]);
  std::size_t allocs = 0;
  for (std::size_t at = 0; (at = text.find("\"ev\":\"alloc\"", at)) != std::string::npos; ++at) ++allocs;
  EXPECT_EQ(allocs, static_cast<std::size_t>(pairs + 1)) << "each event once: no child flushed a copy";
  EXPECT_NE(text.rfind("{\"ev\":\"end\""), std::string::npos);
}

TEST(Processes, ExecEndsTheTraceAndTheNewProgramWritesItsOwn) {
  TempDir dir;
  const auto r = run_at_most({kApps + "/fork_paths", "exec", kApps + "/known_sequence", dir / "manifest.txt"},
                             preloaded(dir / "t.%p.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto traces = files_in(dir.dir(), "t.");
  ASSERT_EQ(traces.size(), 2u) << ::testing::PrintToString(traces);
  // Same pid: the new program's trace is t.PID.1.jsonl.
  const auto before = read_json_lines(dir / traces[1]);
  const auto after = read_json_lines(dir / traces[0]);
  EXPECT_EQ(traces[0], "t." + before.front()["pid"].dump() + ".1.jsonl");
  EXPECT_EQ(before.back()["reason"], "exec");
  EXPECT_EQ(before.back()["live"], 1);
  EXPECT_EQ(after.front()["pid"], before.front()["pid"]);
  EXPECT_EQ(after.back()["reason"], "exit");
  EXPECT_EQ(count_events(after)["alloc"], 7);
}

TEST(Processes, FailedExecGoesOnRecording) {
  TempDir dir;
  const auto r = run_at_most({kApps + "/fork_paths", "exec-fails"}, preloaded(dir / "t.jsonl.zst"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = report_of(dir / "t.jsonl.zst");
  EXPECT_EQ(report["allocs"], 2);
  EXPECT_EQ(report["frees"], 2);
  EXPECT_EQ(report["truncated"], false);
  EXPECT_EQ(report["leaked_count"], 0);
}

TEST(Processes, VforkChildChangingItsSignalsLeavesTheParentsAlone) {
  TempDir dir;
  const auto running = start_command({kApps + "/fork_paths", "vfork-signal"}, preloaded(dir / "t.jsonl"), dir);
  wait_for_ready(running);
  kill(running.pid, SIGINT);
  const auto r = wait_command(running);
  EXPECT_EQ(r.exit_code, 3) << "the parent's own handler ran: " << r.err;
  EXPECT_EQ(read_json_lines(dir / "t.jsonl").back()["reason"], "signal");
}

// ---- cumemtrace run ------------------------------------------------------------------

TEST(RunOptions, EveryOptionIsPassedOn) {
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--flush-ms", "50", "--fork", "off", "--pool",
                              "passthrough", "--stacks", "8", "--pool-conf", "max_split_size_mb:128",
                              "--torch-tensors", "--", "/bin/sh", "-c", "env"},
                             {{"NVTX_INJECTION64_PATH", std::nullopt}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& expected : std::vector<std::string>{
           "CUMEMTRACE_FLUSH_MS=50\n", "CUMEMTRACE_FORK=off\n", "CUMEMTRACE_POOL=passthrough\n",
        "CUMEMTRACE_STACKS=8\n", "CUMEMTRACE_POOL_CONF=max_split_size_mb:128\n",
        "PYTORCH_NO_CUDA_MEMORY_CACHING=1\n",
        "NVTX_INJECTION64_PATH=" + fs::canonical(CUMEMTRACE_PRELOAD).string() + "\n"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << r.out;
  }
  const auto own = run_command({CUMEMTRACE_CLI, "run", "--", "/bin/sh", "-c", "echo $NVTX_INJECTION64_PATH"},
                               {{"NVTX_INJECTION64_PATH", "/opt/mine.so"}});
  EXPECT_EQ(own.out, "/opt/mine.so\n") << "the user's own NVTX tool stays";
}

TEST(RunOptions, BadValuesExitTwoWithOneLine) {
  const std::vector<std::string> bad[] = {{"--flush-ms", "0"}, {"--flush-ms", "fast"}, {"--fork", "maybe"},
                                          {"--pool", "bump"},   {"--stacks", "-1"},      {"--stacks", "300"},
                                          {"--pool-conf", "max_split_size_mb"},
                                          {"--pool-conf", "max_split_size_mb:lots"},
                                          {"--pool-conf", "no_such_key:1"}};
  for (const auto& option : bad) {
    const auto r = run_command({CUMEMTRACE_CLI, "run", option[0], option[1], "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 2) << option[0] << " " << option[1];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    // The pool's own parser words its messages; the table's say "expected".
    const std::string lead = "cumemtrace: " + option[0] + " '" + option[1] + "': ";
    EXPECT_EQ(r.err.rfind(option[0] == "--pool-conf" ? lead : lead + "expected ", 0), 0u) << r.err;
  }
}

TEST(RunOptions, OptionsInForceAreEchoedInTheHeader) {
  TempDir dir;
  const auto r = run_at_most({CUMEMTRACE_CLI, "run", "--output", dir / "t.jsonl", "--flush-ms", "75", "--fork",
                              "off", "--", kApps + "/known_sequence", dir / "manifest.txt"},
                             sim_environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto config = read_json_lines(dir / "t.jsonl").front()["config"];
  EXPECT_EQ(config["flush_ms"], 75);
  EXPECT_EQ(config["fork"], "off");
  EXPECT_EQ(config["output"], dir / "t.jsonl");
  EXPECT_EQ(config["buffer_kb"], 256);
}

TEST(RunOptions, SignalSentToTheLauncherEndsTheProgramAndItsTrace) {
  TempDir dir;
  const auto running = start_command(
      {CUMEMTRACE_CLI, "run", "--output", dir / "t.jsonl", "--", kApps + "/survive_signals", "wait"},
      sim_environment(), dir);
  wait_for_ready(running);
  kill(running.pid, SIGTERM);
  const auto r = wait_command(running);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  const auto lines = read_json_lines(dir / "t.jsonl");
  EXPECT_EQ(lines.back()["reason"], "signal");
  EXPECT_EQ(lines.back()["signal"], SIGTERM);
}

}  // namespace
