// Call stacks and markers, end to end: programs from tests/apps under
// `cumemtrace run` on the simulated device.
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

struct Traced {
  CommandResult run;
  std::vector<json> lines;
  std::map<std::uint64_t, json> stacks;  // id -> frames
};

// Runs an app under `cumemtrace run`; checks that every stack id an event
// uses was written earlier in the file, exactly once.
Traced trace_app(const std::string& app, const EnvChanges& env = {}) {
  TempDir dir;
  Traced t;
  EnvChanges all = {{"CUMEMTRACE_STACKS", std::nullopt}, {"NVTX_INJECTION64_PATH", std::nullopt}};
  all.insert(all.end(), env.begin(), env.end());
  t.run = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "t.jsonl", "--", CUMEMTRACE_APPS_DIR "/" + app},
                      sim_environment(all));
  EXPECT_EQ(t.run.exit_code, 0) << t.run.err;
  t.lines = read_json_lines(dir / "t.jsonl");
  for (const json& line : t.lines) {
    if (line["ev"] == "stack") {
      const auto id = line["id"].get<std::uint64_t>();
      EXPECT_FALSE(t.stacks.contains(id)) << "stack " << id << " written twice";
      t.stacks[id] = line["frames"];
    } else if (line.contains("stack")) {
      const auto id = line["stack"].get<std::uint64_t>();
      EXPECT_TRUE(id == 0 || t.stacks.contains(id)) << "stack " << id << " used before it was written";
    }
  }
  return t;
}

struct Site {
  std::string name;
  std::string ptr;
};

// The "site PTR" lines a program printed, one per allocation, in order.
std::vector<Site> printed_sites(const std::string& out) {
  std::vector<Site> sites;
  std::istringstream in(out);
  for (Site s; in >> s.name >> s.ptr;) sites.push_back(s);
  return sites;
}

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? resolved : path;
}

// [start, start + size) of a function in an executable, from its symbol table.
std::pair<std::uint64_t, std::uint64_t> symbol_range(const std::string& binary, const std::string& fn) {
  const auto nm = run_command({"/usr/bin/nm", "-C", "-S", "--defined-only", binary});
  std::istringstream in(nm.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string address, size, type;
    fields >> address >> size >> type;
    std::string name;
    std::getline(fields >> std::ws, name);
    if (name == fn) {
      const auto start = std::stoull(address, nullptr, 16);
      return {start, start + std::stoull(size, nullptr, 16)};
    }
  }
  ADD_FAILURE() << fn << " not found in " << binary;
  return {0, 0};
}

std::uint64_t hex(const json& value) { return std::stoull(value.get<std::string>(), nullptr, 16); }

TEST(CallStacks, EachSiteIsNamedInnermostFirstWithoutCumemtraceFrames) {
  // Free stacks on, so the frees' sites are checked too.
  const Traced t = trace_app("stack_sites", {{"CUMEMTRACE_FREE_STACKS", "1"}});
  const auto sites = printed_sites(t.run.out);
  ASSERT_EQ(sites.size(), 6u) << t.run.out;
  EXPECT_EQ(t.lines.front()["config"]["stacks"], 32);

  const std::string app = real_path(CUMEMTRACE_APPS_DIR "/stack_sites");
  std::map<std::string, std::set<std::uint64_t>> ids_by_site;
  int allocs = 0, frees = 0;
  for (const json& line : t.lines) {
    if (line["ev"] != "alloc" && line["ev"] != "free") continue;
    SCOPED_TRACE(line.dump());
    const auto id = line["stack"].get<std::uint64_t>();
    ASSERT_NE(id, 0u);
    const json& frames = t.stacks.at(id);
    ASSERT_GE(frames.size(), 2u);
    for (const json& f : frames) {
      if (f["module"].is_string()) {
        EXPECT_EQ(f["module"].get<std::string>().find("libcumemtrace"), std::string::npos) << f;
      }
    }
    std::string expected_fn;
    if (line["ev"] == "alloc") {
      const Site& printed = sites.at(allocs++);
      EXPECT_EQ(line["ptr"], printed.ptr);
      const std::string site = printed.name;
      expected_fn = "stack_sites::allocate_" + site + "(unsigned long)";
      ids_by_site[site].insert(id);
    } else {
      ++frees;
      expected_fn = "stack_sites::release(void*)";
      ids_by_site["release"].insert(id);
    }
    EXPECT_EQ(frames[0]["fn"], expected_fn);
    EXPECT_EQ(frames[0]["module"], app);
    // off is the return address in the file's own addresses: just past the
    // call, inside the function.
    const auto [start, end] = symbol_range(app, expected_fn);
    const auto off = hex(frames[0]["off"]);
    EXPECT_GT(off, start);
    EXPECT_LE(off, end);
    EXPECT_EQ(hex(frames[0]["ip"]) - off, hex(frames[1]["ip"]) - hex(frames[1]["off"]))
        << "one load bias for the two frames of the executable";
    EXPECT_EQ(frames[1]["fn"], "main");
  }
  EXPECT_EQ(allocs, 6);
  EXPECT_EQ(frees, 6);
  // Three iterations through the same call sites: one stack per site, two
  // for release (called from two lines of main).
  EXPECT_EQ(ids_by_site["weights"].size(), 1u);
  EXPECT_EQ(ids_by_site["activations"].size(), 1u);
  EXPECT_EQ(ids_by_site["release"].size(), 2u);
  EXPECT_NE(ids_by_site["weights"], ids_by_site["activations"]);
  EXPECT_EQ(t.stacks.size(), 4u);
}

TEST(CallStacks, DepthZeroWritesNoStacks) {
  const Traced t = trace_app("stack_sites", {{"CUMEMTRACE_STACKS", "0"}});
  EXPECT_EQ(t.lines.front()["config"]["stacks"], 0);
  EXPECT_TRUE(t.stacks.empty());
  int events = 0;
  for (const json& line : t.lines) {
    if (line["ev"] == "alloc" || line["ev"] == "free") {
      EXPECT_EQ(line["stack"], 0) << line;
      ++events;
    }
  }
  EXPECT_EQ(events, 12);
}

TEST(CallStacks, DepthFourKeepsTheInnermostFourFrames) {
  const Traced t = trace_app("stack_sites", {{"CUMEMTRACE_STACKS", "4"}});
  EXPECT_EQ(t.lines.front()["config"]["stacks"], 4);
  ASSERT_FALSE(t.stacks.empty());
  for (const auto& [id, frames] : t.stacks) {
    EXPECT_GE(frames.size(), 1u);
    EXPECT_LE(frames.size(), 4u) << frames;
    EXPECT_NE(frames[0]["fn"].get<std::string>().find("stack_sites::"), std::string::npos) << frames;
  }
}

TEST(CallStacks, BadDepthWarnsOnceAndKeepsTheDefault) {
  const Traced t = trace_app("stack_sites", {{"CUMEMTRACE_STACKS", "deep"}});
  EXPECT_EQ(t.lines.front()["config"]["stacks"], 32);
  const std::string warning = "CUMEMTRACE_STACKS='deep'";
  const auto first = t.run.err.find(warning);
  EXPECT_NE(first, std::string::npos) << t.run.err;
  EXPECT_EQ(t.run.err.find(warning, first + 1), std::string::npos) << t.run.err;
  EXPECT_FALSE(t.stacks.empty());
}

#if defined(__x86_64__)  // the app's trampoline is x86-64 machine code
TEST(CallStacks, GeneratedCodeIsNamedFromThePerfMapAsItGrows) {
  const Traced t = trace_app("stack_perf_map");
  const auto sites = printed_sites(t.run.out);
  ASSERT_EQ(sites.size(), 3u) << t.run.out;
  const std::string map = "/tmp/perf-" + std::to_string(t.lines.front()["pid"].get<long>()) + ".map";
  EXPECT_FALSE(file_exists(map)) << "the program removes its map";

  std::map<std::string, json> frames_of;
  std::size_t allocs = 0;
  for (const json& line : t.lines) {
    if (line["ev"] != "alloc") continue;
    const Site& printed = sites.at(allocs++);
    EXPECT_EQ(line["ptr"], printed.ptr);
    frames_of[printed.name] = t.stacks.at(line["stack"]);
  }
  ASSERT_EQ(frames_of.size(), 3u);
  for (const auto& [site, frames] : frames_of) {
    SCOPED_TRACE(site + ": " + frames.dump());
    ASSERT_GE(frames.size(), 3u);
    EXPECT_EQ(frames[0]["fn"], "(anonymous namespace)::jit_callee(void*)");
    const json& jit = frames[1];
    if (site == "unlisted") {
      EXPECT_TRUE(jit["fn"].is_null());
      EXPECT_TRUE(jit["module"].is_null());
    } else {
      EXPECT_EQ(jit["fn"], site == "train_step" ? "py::train_step:/work/train.py"
                                                : "py::load_batch:/work/data.py");
      EXPECT_EQ(jit["module"], map);
      EXPECT_EQ(jit["off"], "0xc");  // the return address: after the 12 bytes up to the call
    }
    EXPECT_EQ(frames[2]["fn"], "main") << "unwinding went on through the generated frame";
  }
}

// By default a free is not captured: its line says stack 0, while every
// allocation keeps its stack (CUMEMTRACE_FREE_STACKS=1 above gives frees theirs).
TEST(CallStacks, FreesCarryNoStackByDefault) {
  const Traced t = trace_app("stack_sites");
  EXPECT_EQ(t.lines.front()["config"]["free_stacks"], false);
  int allocs = 0, frees = 0;
  for (const json& line : t.lines) {
    if (line["ev"] == "alloc") {
      EXPECT_NE(line["stack"], 0) << line;
      ++allocs;
    } else if (line["ev"] == "free") {
      EXPECT_EQ(line["stack"], 0) << line;
      ++frees;
    }
  }
  EXPECT_EQ(allocs, 6);
  EXPECT_GE(frees, 1);
}

// A C++ program that embeds CPython (tests/apps/python_embed.cpp): its own
// allocation before the interpreter starts has native frames only; the
// plugin's allocations, made by the program's extension module, have the
// plugin's Python frames between that module's frame and the program's
// (native → Python → native), with the plugin's lines.
TEST(CallStacks, AProgramThatEmbedsPythonGetsThePluginsFrames) {
  if (!std::filesystem::exists(CUMEMTRACE_APPS_DIR "/python_embed")) {
    GTEST_SKIP() << "python_embed was not built: no Debian libpython3.11 development files (scripts/setup.sh)";
  }
  const Traced t = trace_app("python_embed");
  const std::string note = t.lines.front()["config"].value("python_frames", "");
  EXPECT_TRUE(note.starts_with("CPython 3.11") && note.find("libpython3.11.so") != std::string::npos) << note;
  int plugin_allocs = 0;
  for (const json& line : t.lines) {
    if (line["ev"] != "alloc") continue;
    SCOPED_TRACE(line.dump());
    const json& frames = t.stacks.at(line["stack"].get<std::uint64_t>());
    std::vector<std::string> py;
    std::vector<int> lines;
    std::ptrdiff_t first_py = -1, last_py = -1, module_frame = -1, caller_frame = -1;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const json& f = frames[i];
      if (f.value("py", false)) {
        py.push_back(f["fn"]);
        lines.push_back(f["line"]);
        EXPECT_EQ(f["file"], "plugin.py");
        if (first_py < 0) first_py = static_cast<std::ptrdiff_t>(i);
        last_py = static_cast<std::ptrdiff_t>(i);
      } else if (f["fn"].is_string()) {
        const std::string fn = f["fn"];
        if (fn.find("device_alloc") != std::string::npos && module_frame < 0) module_frame = static_cast<std::ptrdiff_t>(i);
        if (fn.find("run_python") != std::string::npos) caller_frame = static_cast<std::ptrdiff_t>(i);
      }
    }
    if (line["size"] == (3 << 20)) {
      EXPECT_TRUE(py.empty()) << "an allocation made before the interpreter started";
      continue;
    }
    ++plugin_allocs;
    // 3.11: the list comprehension is a frame of its own.
    EXPECT_EQ(py, (std::vector<std::string>{"load", "run_plugin.<locals>.<listcomp>", "run_plugin", "<module>"}));
    EXPECT_EQ(lines, (std::vector<int>{3, 6, 6, 8}));
    EXPECT_GE(module_frame, 0);
    EXPECT_LT(module_frame, first_py) << "the extension module's frame is inner of the plugin's";
    EXPECT_GT(caller_frame, last_py) << "the program's own frames are outer of the plugin's";
  }
  EXPECT_EQ(plugin_allocs, 2);
}

// The default CFI walker (stacks/frame_walker.h) and libunwind alone give
// every allocation and free the same stack: the same frames, in order, and
// the same ids. stack_perf_map's generated code has no CFI, so there the
// walker hands the stack to libunwind; the demo repeats its call sites, so
// most of its stacks come from the walker's memo.
TEST(CallStacks, TheCfiWalkerRecordsWhatLibunwindRecords) {
  // What a stack says apart from where the process was loaded.
  auto where_loaded_aside = [](json frames) {
    for (json& f : frames) {
      f.erase("ip");
      if (f["module"].is_null()) f.erase("off");
      if (f["module"].is_string() && f["module"].get<std::string>().starts_with("/tmp/perf-")) {
        f["module"] = "/tmp/perf-PID.map";  // each run's own
      }
    }
    return frames;
  };
  for (const std::string app : {"stack_sites", "stack_perf_map", "demo_training_loop"}) {
    SCOPED_TRACE(app);
    std::vector<json> events[2];
    const char* unwinders[] = {"cfi", "libunwind"};
    for (int i = 0; i < 2; ++i) {
      const Traced t = trace_app(app, {{"CUMEMTRACE_UNWINDER", unwinders[i]}, {"CUMEMTRACE_FREE_STACKS", "1"}});
      EXPECT_EQ(t.lines.front()["config"]["unwinder"], unwinders[i]);
      for (const json& line : t.lines) {
        if (line["ev"] != "alloc" && line["ev"] != "free") continue;
        const auto id = line["stack"].get<std::uint64_t>();
        ASSERT_NE(id, 0u) << line;
        events[i].push_back({line["ev"], line["size"], id, where_loaded_aside(t.stacks.at(id))});
      }
    }
    EXPECT_GE(events[0].size(), 6u);
    ASSERT_EQ(events[0].size(), events[1].size());
    for (std::size_t e = 0; e < events[0].size(); ++e) EXPECT_EQ(events[0][e], events[1][e]) << "event " << e;
  }
}
#endif

struct Mark {
  std::string kind;
  std::string name;
  bool operator==(const Mark&) const = default;
};

void PrintTo(const Mark& m, std::ostream* os) { *os << m.kind << " '" << m.name << "'"; }

TEST(Markers, NvtxAndTheMarkerApiBecomeMarksInProgramOrder) {
  const Traced t = trace_app("markers_app");
  EXPECT_EQ(t.run.out, "levels 0 1 1 1 1 1 1 0 0 0\n");
  std::vector<Mark> marks;
  std::int64_t tid = -1;
  std::size_t marks_before_alloc = 0;
  for (const json& line : t.lines) {
    if (line["ev"] == "alloc") marks_before_alloc = marks.size();
    if (line["ev"] != "mark") continue;
    marks.push_back({line["kind"], line["name"]});
    if (tid < 0) tid = line["tid"];
    EXPECT_EQ(line["tid"], tid);
  }
  const std::vector<Mark> expected = {
      {"instant", "start"},      {"push", "epoch 1"},     {"push", "step"},
      {"instant", "checkpoint"}, {"pop", "step"},         {"push", "wide \u00fc"},
      {"pop", "wide \u00fc"},    {"push", "ex push"},     {"instant", "ex mark"},
      {"pop", "ex push"},        {"push", "prefetch"},    {"instant", "batch ready"},
      {"pop", "prefetch"},       {"pop", "epoch 1"},      {"instant", "quote \" backslash \\ newline \n end"},
  };
  EXPECT_EQ(marks, expected);
  EXPECT_EQ(marks_before_alloc, 2u) << "the allocation happened inside 'epoch 1', before 'step'";
}

TEST(Markers, TheProgramRunsWithoutCumemtrace) {
  const auto r = run_command({CUMEMTRACE_APPS_DIR "/markers_app"},
                             sim_environment({{"NVTX_INJECTION64_PATH", std::nullopt},
                                              {"LD_PRELOAD", std::nullopt}}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // NVTX without a tool answers -2 (NVTX_NO_PUSH_POP_TRACKING); the weak
  // cumemtrace_range_* calls were skipped (-1).
  EXPECT_EQ(r.out, "levels -2 -1 -1 -2 -2 -2 -2 -2 -2 -2\n");
}

}  // namespace
