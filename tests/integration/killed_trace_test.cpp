// SIGKILL, as a scheduler or the kernel's OOM killer sends it, at random
// moments of a 16-thread allocation storm (tests/apps/kill_storm.cpp). The
// process runs no handler; `cumemtrace report` completes its trace from the
// pending file it left, and every event the program had made (its progress
// counters, in a mapping the kernel kept) is in the trace, once, in each
// thread's order, and nothing else.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

constexpr int kThreads = 16;

struct Progress {
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
};

std::vector<Progress> read_progress(const std::string& path) {
  std::vector<Progress> out(kThreads);
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes.size(), sizeof(std::uint64_t) * 2 * kThreads);
  if (bytes.size() != sizeof(std::uint64_t) * 2 * kThreads) return out;
  for (int t = 0; t < kThreads; ++t) {
    std::memcpy(&out[t].allocs, bytes.data() + 16 * t, 8);
    std::memcpy(&out[t].frees, bytes.data() + 16 * t + 8, 8);
  }
  return out;
}

// The trace's text, through zstd for a .zst trace.
std::string trace_text(const std::string& path, const TempDir& dir) {
  if (!path.ends_with(".zst")) return read_file(path);
  const std::string plain = dir / "plain.jsonl";
  const auto r = run_command({"sh", "-c", "zstd -dcq '" + path + "' > '" + plain + "'"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return read_file(plain);
}

// What the checks need of a line, found by text (a storm's trace has a
// million lines; a JSON parser would take seconds): the writer's field
// order is fixed (TRACE_FORMAT.md), and the end line is parsed whole.
struct Line {
  std::string_view ev, ptr;
  std::uint64_t t = 0, size = 0;
};
std::string_view field(std::string_view line, std::string_view key) {
  const std::string quoted = "\"" + std::string(key) + "\":";
  const std::size_t at = line.find(quoted);
  if (at == std::string_view::npos) return {};
  std::string_view rest = line.substr(at + quoted.size());
  if (!rest.empty() && rest.front() == '"') return rest.substr(1, rest.find('"', 1) - 1);
  return rest.substr(0, rest.find_first_of(",}"));
}
std::uint64_t number(std::string_view text) { return text.empty() ? ~0ull : std::stoull(std::string(text)); }

void check_completed(const std::string& trace, const std::string& progress_path, const TempDir& dir,
                     std::vector<std::string> first, int first_exit, const std::string& program_err);

// Kills the storm after `delay` and checks its completed trace.
// `first` (the trace's path appended) is the first command to meet the
// killed trace: it completes it.
void kill_and_check(const std::string& trace_name, std::chrono::milliseconds delay, const TempDir& dir,
                    std::vector<std::string> first = {CUMEMTRACE_CLI, "report", "--format", "json"},
                    int first_exit = 0) {
  const std::string trace = dir / trace_name;
  const std::string progress_path = dir / "progress";
  const auto running = start_command({kApps + "/kill_storm", std::to_string(kThreads), progress_path},
                                     sim_environment({{"LD_PRELOAD", CUMEMTRACE_PRELOAD},
                                                      {"CUMEMTRACE_OUTPUT", trace},
                                                      {"CUMEMTRACE_STACKS", "4"}}),
                                     dir);
  wait_for_ready(running);
  std::this_thread::sleep_for(delay);
  ASSERT_EQ(::kill(running.pid, SIGKILL), 0);
  const CommandResult killed = wait_at_most(running, 30);
  ASSERT_FALSE(killed.exited) << killed.err;
  check_completed(trace, progress_path, dir, std::move(first), first_exit, killed.err);
}

// The trace of a killed kill_storm: completed by `first` (the trace's path
// appended), and holding exactly what the program's progress counters say.
// `program_err`: what the killed program printed, the library's warnings
// included (a pending file that could not grow, dropped events), shown with
// any event found missing.
void check_completed(const std::string& trace, const std::string& progress_path, const TempDir& dir,
                     std::vector<std::string> first, int first_exit, const std::string& program_err) {
  const std::vector<Progress> progress = read_progress(progress_path);
  ASSERT_TRUE(std::filesystem::exists(trace + ".pending"))
      << "the killed process left no pending file; files: " << run_command({"ls", "-la", dir.dir()}).out;

  // The first command to read it completes it and says so.
  first.push_back(trace);
  const auto report = run_command(first);
  ASSERT_EQ(report.exit_code, first_exit) << report.out << report.err;
  EXPECT_NE((report.out + report.err).find("was killed"), std::string::npos) << report.out << report.err;
  EXPECT_FALSE(std::filesystem::exists(trace + ".pending"));

  const std::string text = trace_text(trace, dir);
  const std::vector<std::string_view> lines = [&] {
    std::vector<std::string_view> v;
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t nl = text.find('\n', at);
      if (nl == std::string::npos) {
        ADD_FAILURE() << "a partial last line";
        break;
      }
      v.push_back(std::string_view(text).substr(at, nl - at));
      at = nl + 1;
    }
    return v;
  }();
  ASSERT_GE(lines.size(), 2u);
  const json end = json::parse(lines.back());
  ASSERT_EQ(end["ev"], "end") << end;
  EXPECT_EQ(end["reason"], "killed");
  EXPECT_EQ(end["dropped"], 0);

  // Per thread: allocation k has size 1 + thread + 16 k; each is freed
  // before the next is made.
  std::vector<std::uint64_t> allocs(kThreads, 0), frees(kThreads, 0);
  std::map<std::string_view, int> live;  // ptr -> thread
  std::uint64_t last_t = 0;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    const std::string_view e = lines[i];
    ASSERT_TRUE(e.starts_with("{\"ev\":\"") && e.ends_with("}")) << "line " << i + 1 << ": " << e;
    const std::uint64_t t = number(field(e, "t"));
    ASSERT_GE(t, last_t) << "line " << i + 1;
    last_t = t;
    const std::string_view ev = field(e, "ev");
    if (ev == "alloc") {
      const std::uint64_t size = number(field(e, "size"));
      const int thread = static_cast<int>((size - 1) % kThreads);
      ASSERT_EQ((size - 1) / kThreads, allocs[thread])
          << "thread " << thread << " line " << i + 1 << ": an allocation missing or doubled";
      ++allocs[thread];
      ASSERT_TRUE(live.emplace(field(e, "ptr"), thread).second) << "line " << i + 1;
    } else if (ev == "free") {
      const auto it = live.find(field(e, "ptr"));
      ASSERT_NE(it, live.end()) << "line " << i + 1 << ": a free of nothing live";
      ++frees[it->second];
      live.erase(it);
    }
  }
  for (int t = 0; t < kThreads; ++t) {
    // Everything the thread had finished was recorded; one more may have
    // been recorded before its counter moved.
    EXPECT_GE(allocs[t], progress[t].allocs) << "thread " << t << ": recorded allocations lost; the program said: "
                                             << program_err;
    EXPECT_LE(allocs[t], progress[t].allocs + 1) << "thread " << t << ": allocations invented";
    EXPECT_GE(frees[t], progress[t].frees) << "thread " << t << ": recorded frees lost; the program said: "
                                           << program_err;
    EXPECT_LE(frees[t], progress[t].frees + 1) << "thread " << t;
  }
  EXPECT_EQ(end["live"], live.size());
}

}  // namespace

TEST(KilledTrace, EveryRecordedEventOfAStormIsRecoveredAndNothingInvented) {
  // Random moments, reproducible from the seed the test prints.
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(0, 150);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kRuns = 2;  // a sanitizer's program starts ten times slower; the plain run makes six
#else
  constexpr int kRuns = 6;
#endif
  for (int run = 0; run < kRuns; ++run) {
    const int delay = delay_ms(rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", run " + std::to_string(run) + ", killed after " +
                 std::to_string(delay) + " ms");
    TempDir dir;
    kill_and_check(run % 3 == 1 ? "t.jsonl.zst" : "t.jsonl", std::chrono::milliseconds(delay), dir);
    if (HasFatalFailure()) return;
  }
}

TEST(KilledTrace, CheckCompletesATraceItselfAndNeverPassesIt) {
  TempDir dir;
  // Killed mid-storm, 16 allocations may be live: a leak check on the
  // killed run fails whatever it finds.
  kill_and_check("t.jsonl", std::chrono::milliseconds(50), dir, {CUMEMTRACE_CLI, "check", "--max-leaked-bytes", "0"},
                 1);
  // Already complete: nothing more is done or said.
  const auto again = run_command({CUMEMTRACE_CLI, "report", dir / "t.jsonl"});
  EXPECT_EQ(again.err.find("was killed"), std::string::npos) << again.err;
}

TEST(KilledTrace, RecoverCompletesItOnRequestAndThenHasNothingToDo) {
  TempDir dir;
  kill_and_check("t.jsonl", std::chrono::milliseconds(20), dir, {CUMEMTRACE_CLI, "recover"});
  const auto again = run_command({CUMEMTRACE_CLI, "recover", dir / "t.jsonl"});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.out.find("nothing to recover"), std::string::npos) << again.out;
}

// What `recover` (and `report`, on meeting the trace) says it added is what
// it added: the events, never counting the `end` line. The process kills
// itself with a flush interval long enough that nothing but the header was
// written, so no write was in progress to be redone.
TEST(KilledTrace, TheEventsItSaysItAddedAreTheLinesItAdded) {
  TempDir dir;
  const std::string trace = dir / "t.jsonl";
  const auto killed = run_command({CUMEMTRACE_APPS_DIR "/signal_report", "kill-self"},
                                  sim_environment({{"LD_PRELOAD", CUMEMTRACE_PRELOAD},
                                                   {"CUMEMTRACE_OUTPUT", trace},
                                                   {"CUMEMTRACE_FLUSH_MS", "600000"}}));
  ASSERT_EQ(killed.exit_code, 128 + SIGKILL) << killed.err;
  const std::size_t before = lines_of(read_file(trace)).size();
  const auto recovered = run_command({CUMEMTRACE_CLI, "recover", trace});
  ASSERT_EQ(recovered.exit_code, 0) << recovered.err;
  const std::size_t after = lines_of(read_file(trace)).size();
  ASSERT_GT(after, before + 2) << "a device line, the allocation and `end`, at least";
  EXPECT_NE(recovered.out.find("; " + std::to_string(after - before - 1) + " events recorded before the kill"),
            std::string::npos)
      << recovered.out << "(lines before " << before << ", after " << after << ")";
}

// The kernel's OOM killer, as it ends a training job that took too much host
// memory: a memory cgroup with a small limit (where this machine lets the
// test make one), and the storm taking host memory until it is killed.
TEST(KilledTrace, TheOomKillerLosesNothingEither) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer's allocator may end the program itself when memory runs
  // out, before the kernel does; the plain run checks the OOM killer.
  GTEST_SKIP() << "the OOM killer is checked in the build without sanitizers";
#endif
  const std::string v1 = "/sys/fs/cgroup/memory";
  const std::string group = v1 + "/cumemtrace-test-" + std::to_string(::getpid());
  if (::mkdir(group.c_str(), 0755) != 0) GTEST_SKIP() << "no memory cgroup can be made here (cgroup v1 memory controller)";
  struct Cleanup {
    std::string group;
    ~Cleanup() { ::rmdir(group.c_str()); }
  } cleanup{group};
  auto set = [&](const std::string& file, const std::string& value) {
    std::ofstream out(group + "/" + file);
    out << value;
    out.flush();
    return out.good();
  };
  // 128 MiB of memory, and no swap to escape to where swap is accounted.
  if (!set("memory.limit_in_bytes", "134217728")) GTEST_SKIP() << "cannot set the memory cgroup's limit";
  if (!set("memory.memsw.limit_in_bytes", "134217728") && lines_of(read_file("/proc/swaps")).size() > 1) {
    GTEST_SKIP() << "swap that the memory cgroup does not account: the program would swap, not be killed";
  }
  TempDir dir;
  const std::string trace = dir / "t.jsonl";
  const std::string progress_path = dir / "progress";
  const auto running = start_command({kApps + "/kill_storm", std::to_string(kThreads), progress_path, "hog"},
                                     sim_environment({{"LD_PRELOAD", CUMEMTRACE_PRELOAD},
                                                      {"CUMEMTRACE_OUTPUT", trace},
                                                      {"CUMEMTRACE_STACKS", "4"}}),
                                     dir);
  ASSERT_TRUE(set("cgroup.procs", std::to_string(running.pid)));
  // How long the kernel takes to kill is not ours to set: it reclaims the
  // trace's page cache (written back first) before it gives up. 1 to 19 s
  // in most runs on this 2-core machine while it compiled; 71 s once, the
  // program at nice 19 beside two compilers (load 8), past the 60 s this
  // waited before.
  const CommandResult killed = wait_at_most(running, 180);
  ASSERT_FALSE(killed.exited) << killed.err;
  ASSERT_EQ(killed.exit_code, 128 + SIGKILL);
  check_completed(trace, progress_path, dir, {CUMEMTRACE_CLI, "report", "--format", "json"}, 0, killed.err);
}
