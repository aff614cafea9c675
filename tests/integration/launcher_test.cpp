// `cumemtrace run` and the preload as a user meets them: where traces go,
// what happens to programs that never touch CUDA, plain LD_PRELOAD, the
// installed tree, and what the injected library links and exports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "integration_support.h"

using namespace cumemtrace::testing;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string host_for_file_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  std::string h = buf;
  for (char& c : h) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return h;
}

TEST(Launcher, ProgramWithoutCudaRunsAsIfAbsentAndLeavesNoTrace) {
  TempDir dir;
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--", "/bin/sh", "-c", "echo hello; exit 3"},
                             sim_environment(), dir.dir());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no device allocation"), std::string::npos) << r.err;
  EXPECT_TRUE(files_in(dir.dir()).empty());
}

TEST(Launcher, DefaultTraceNameHasHostAndPid) {
  TempDir dir;
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--", CUMEMTRACE_APPS_DIR "/known_sequence",
                              dir / "manifest.txt"},
                             sim_environment(), dir.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex name("cumemtrace\\." + host_for_file_name() + "\\.([0-9]+)\\.jsonl");
  std::smatch m;
  std::string trace;
  for (const auto& f : files_in(dir.dir())) {
    if (std::regex_match(f, m, name)) trace = f;
  }
  ASSERT_FALSE(trace.empty()) << "files: " << ::testing::PrintToString(files_in(dir.dir()));
  std::regex_match(trace, m, name);
  const auto lines = read_json_lines(dir / trace);
  EXPECT_EQ(lines.front()["pid"], std::stol(m[1]));
  EXPECT_EQ(lines.back()["ev"], "end");
  // run tells the user where the trace went.
  EXPECT_NE(r.err.find(trace), std::string::npos) << r.err;
}

TEST(Launcher, RankPlaceholderComesFromTheEnvironment) {
  TempDir dir;
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "rank%r.%p.jsonl", "--",
                              CUMEMTRACE_APPS_DIR "/known_sequence", dir / "manifest.txt"},
                             sim_environment({{"RANK", "3"}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool found = false;
  for (const auto& f : files_in(dir.dir())) found |= f.starts_with("rank3.") && f.ends_with(".jsonl");
  EXPECT_TRUE(found) << ::testing::PrintToString(files_in(dir.dir()));
}

TEST(Launcher, PlainLdPreloadWorksWithoutTheLauncher) {
  TempDir dir;
  const auto r = run_command({CUMEMTRACE_APPS_DIR "/known_sequence", dir / "manifest.txt"},
                             sim_environment({{"LD_PRELOAD", CUMEMTRACE_PRELOAD},
                                              {"CUMEMTRACE_OUTPUT", dir / "t.jsonl"}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_json_lines(dir / "t.jsonl");
  EXPECT_EQ(lines.front()["ev"], "header");
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["live"], 2);
}

// tests/sim/README.md says `LD_LIBRARY_PATH=build/sim ./program`: the
// loader then names the libraries by relative paths, and the hooks must
// still find the real functions behind them.
TEST(Launcher, RelativeLibraryPathFindsTheRealCuda) {
  TempDir dir;
  const fs::path sim = SIMCUDA_LIBRARY_DIR;
  const auto r = run_command({CUMEMTRACE_APPS_DIR "/known_sequence", dir / "manifest.txt"},
                             sim_environment({{"LD_LIBRARY_PATH", sim.filename().string()},
                                              {"LD_PRELOAD", CUMEMTRACE_PRELOAD},
                                              {"CUMEMTRACE_OUTPUT", dir / "t.jsonl"}}),
                             sim.parent_path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_json_lines(dir / "t.jsonl");
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["live"], 2);
}

std::string file_content(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Under plain LD_PRELOAD nobody can be asked: the library leaves the file
// alone, says so, and the program runs untraced.
TEST(PreloadLibrary, ExistingFileIsNeverOverwrittenAndTheProgramStillRuns) {
  TempDir dir;
  const std::string precious = dir / "precious.jsonl";
  std::ofstream(precious) << "not yours\n";
  const auto r = run_command({CUMEMTRACE_APPS_DIR "/known_sequence", dir / "manifest.txt"},
                             sim_environment({{"LD_PRELOAD", CUMEMTRACE_PRELOAD}, {"CUMEMTRACE_OUTPUT", precious}}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(file_content(precious), "not yours\n");
  EXPECT_NE(r.err.find("cannot create the trace file"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir / "manifest.txt"));
}

// The launcher refuses before the program starts, rather than run it
// untraced and leave an old trace where the user expects the new one.
TEST(Launcher, ExistingOutputIsRefusedBeforeTheProgramRuns) {
  TempDir dir;
  const std::string precious = dir / "precious.jsonl";
  std::ofstream(precious) << "not yours\n";
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", precious, "--",
                              CUMEMTRACE_APPS_DIR "/known_sequence", dir / "manifest.txt"},
                             sim_environment());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(file_content(precious), "not yours\n");
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "manifest.txt")) << "the program ran";
  // A dangling symlink counts as taken as well.
  const std::string link = dir / "link.jsonl";
  fs::create_symlink(dir / "nowhere", link);
  const auto l = run_command({CUMEMTRACE_CLI, "run", "--output", link, "--", CUMEMTRACE_APPS_DIR "/known_sequence",
                              dir / "manifest.txt"},
                             sim_environment());
  EXPECT_EQ(l.exit_code, 2) << l.err;
  EXPECT_FALSE(fs::exists(dir / "nowhere"));
}

TEST(Launcher, ExitCodeOfTheProgramIsReturned) {
  TempDir dir;
  // known_sequence without its argument exits 2 before touching CUDA.
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--", CUMEMTRACE_APPS_DIR "/known_sequence"},
                             sim_environment(), dir.dir());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("usage: known_sequence"), std::string::npos);
}

TEST(PreloadLibrary, NeedsNoCudaLibraryAndExportsOnlyHooks) {
  const auto deps = run_command({"/usr/bin/objdump", "-p", CUMEMTRACE_PRELOAD});
  ASSERT_EQ(deps.exit_code, 0) << deps.err;
  EXPECT_EQ(deps.out.find("libcudart"), std::string::npos) << deps.out;
  EXPECT_EQ(deps.out.find("libcuda."), std::string::npos) << deps.out;
  EXPECT_EQ(deps.out.find("libstdc++"), std::string::npos) << "the C++ runtime is linked statically";
  // libunwind is opened RTLD_LOCAL at run time, never NEEDED: its exported
  // _Unwind_* and `backtrace` must not enter the global scope (stacks/unwinder.h).
  EXPECT_EQ(deps.out.find("libunwind"), std::string::npos) << deps.out;

  const auto syms = run_command({"/usr/bin/nm", "-D", "--defined-only", CUMEMTRACE_PRELOAD});
  ASSERT_EQ(syms.exit_code, 0) << syms.err;
  std::istringstream lines(syms.out);
  int exported = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(line.rfind(' ') + 1);
    // The CUDA hooks (cuda*, cu*), the marker API (cumemtrace_*), NVTX's tool
    // entry point (looked up by NVTX in the library NVTX_INJECTION64_PATH
    // names), dlsym under glibc's two versions, and those version
    // definitions; and the process-lifecycle functions that keep the trace
    // whole (preload/signals/sigaction_hooks.cpp, preload/hooks/exec.cpp,
    // preload/hooks/exit.cpp).
    static const std::set<std::string> kLifecycle = {"sigaction", "signal",   "bsd_signal", "execve", "execv",
                                                     "execvp",    "execvpe",  "execl",      "execlp", "execle",
                                                     "fexecve",   "execveat", "_exit",      "_Exit",  "syscall"};
    const bool expected = name.starts_with("cu") || name == "InitializeInjectionNvtx2" ||
                          name == "dlsym@@GLIBC_2.34" || name == "dlsym@GLIBC_2.2.5" ||
                          name == "GLIBC_2.34" || name == "GLIBC_2.2.5" || kLifecycle.contains(name);
    EXPECT_TRUE(expected) << "unexpected export " << name;
    ++exported;
  }
  EXPECT_GE(exported, 2);
  EXPECT_NE(syms.out.find(" dlsym@@GLIBC_2.34\n"), std::string::npos) << syms.out;
  EXPECT_NE(syms.out.find(" dlsym@GLIBC_2.2.5\n"), std::string::npos) << syms.out;
}

TEST(Install, InstalledLauncherFindsTheInstalledLibrary) {
  TempDir dir;
  const std::string prefix = dir / "prefix";
  const auto install = run_command({CMAKE_COMMAND, "--install", CUMEMTRACE_BUILD_DIR, "--prefix", prefix});
  ASSERT_EQ(install.exit_code, 0) << install.out << install.err;
  EXPECT_TRUE(fs::exists(prefix + "/bin/cumemtrace"));
  EXPECT_TRUE(fs::exists(prefix + "/include/cumemtrace/trace_format.h"));

  // Nothing from the build tree: the installed launcher must find the
  // installed library on its own.
  const auto r = run_command({prefix + "/bin/cumemtrace", "run", "--output", dir / "t.jsonl", "--",
                              CUMEMTRACE_APPS_DIR "/known_sequence", dir / "manifest.txt"},
                             sim_environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = read_json_lines(dir / "t.jsonl");
  EXPECT_EQ(lines.back()["ev"], "end");
  const auto report = run_command({prefix + "/bin/cumemtrace", "report", "--format", "json", dir / "t.jsonl"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(nlohmann::json::parse(report.out)["leaked_count"], 2);
}

}  // namespace

namespace {

TEST(Fork, ChildNeverWritesIntoTheParentsTrace) {
  TempDir dir;
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "t.%p.jsonl", "--",
                              CUMEMTRACE_APPS_DIR "/fork_child"},
                             // Passthrough: one segment twin per call (the caching pool's
                             // fork is checked in pool_preload_test.cpp); no `stack` lines.
                             sim_environment({{"CUMEMTRACE_STACKS", "0"},
                                              {"CUMEMTRACE_POOL", "passthrough"}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto names = files_in(dir.dir());
  ASSERT_EQ(names.size(), 1u) << "only the parent touched CUDA: " << ::testing::PrintToString(names);
  const auto lines = read_json_lines(dir / names[0]);
  std::vector<std::string> evs;
  for (const auto& l : lines) evs.push_back(l["ev"]);
  const std::vector<std::string> expected = {"header", "device", "segment_alloc", "alloc",
                                             "segment_alloc", "alloc", "free", "segment_free",
                                             "free", "segment_free", "end"};
  EXPECT_EQ(evs, expected);
  EXPECT_EQ(lines.back()["live"], 0);
}

}  // namespace

namespace {

TEST(Launcher, IgnoredSignalsStayIgnoredInTheProgram) {
  // As under nohup: SIGHUP ignored when cumemtrace starts must still be
  // ignored by the program, though cumemtrace itself forwards SIGHUP.
  const std::string cli = CUMEMTRACE_CLI;
  const auto r = run_command(
      {"/bin/sh", "-c", "trap '' HUP; exec " + cli + " run -- /bin/sh -c 'kill -HUP $$; echo survived'"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "survived\n");
}

}  // namespace

namespace {

TEST(Semantics, FailedAllocationLooksTheSameWithAndWithoutCumemtrace) {
  TempDir dir;
  const auto env = sim_environment({{"SIMCUDA_DEVICE_MEMORY", "1GiB"}});
  const auto bare = run_command({CUMEMTRACE_APPS_DIR "/oom_semantics"}, env);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto traced = run_command(
      {CUMEMTRACE_CLI, "run", "--output", dir / "t.jsonl", "--", CUMEMTRACE_APPS_DIR "/oom_semantics"}, env);
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, bare.out);

  // The failed request is not an allocation; the 1 MiB one is, once.
  int allocs = 0, frees = 0;
  for (const auto& line : read_json_lines(dir / "t.jsonl")) {
    if (line["ev"] == "alloc") {
      ++allocs;
      EXPECT_EQ(line["size"], 1 << 20);
    }
    frees += line["ev"] == "free";
  }
  EXPECT_EQ(allocs, 1);
  EXPECT_EQ(frees, 1);
}

}  // namespace

namespace {

TEST(Launcher, ChildrenStartedWithExecWriteTheirOwnTraces) {
  TempDir dir;
  const std::string app = CUMEMTRACE_APPS_DIR "/known_sequence";
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "t.%p.jsonl", "--", "/bin/sh", "-c",
                              app + " " + (dir / "m1") + " && " + app + " " + (dir / "m2")},
                             sim_environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int traces = 0;
  for (const auto& name : files_in(dir.dir())) {
    if (!name.starts_with("t.")) continue;
    ++traces;
    const auto lines = read_json_lines(dir / name);
    EXPECT_EQ(lines.front()["argv"][0], app);
    EXPECT_EQ(lines.back()["ev"], "end");
    EXPECT_EQ(lines.back()["live"], 2);
  }
  EXPECT_EQ(traces, 2) << "one per known_sequence, none for the shell";
}

}  // namespace
