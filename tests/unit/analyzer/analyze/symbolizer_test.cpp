// `report --symbolize`: file, line and missing names from the frames' object
// files, read here from this test's own executable (built with -g), whose
// frames are made exactly as the preload makes them (module, and the return
// address less the load bias).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/symbolizer.h"

namespace cumemtrace::analyzer {
namespace {

using testing::TempDir;

[[gnu::noinline]] void* return_address() { return __builtin_return_address(0); }

// A frame as the preload writes it for return address `ip`.
OwnedFrame frame_for(void* ip) {
  Dl_info info{};
  link_map* object = nullptr;
  EXPECT_NE(::dladdr1(ip, &info, reinterpret_cast<void**>(&object), RTLD_DL_LINKMAP), 0);
  OwnedFrame frame;
  frame.ip = reinterpret_cast<std::uintptr_t>(ip);
  frame.module = std::filesystem::read_symlink("/proc/self/exe").string();
  frame.off = frame.ip - object->l_addr;
  return frame;
}

// This file, as the line table names it, made absolute: the path the
// compiler was given may be relative (ccache's CCACHE_BASEDIR makes it so).
bool is_this_source_file(const std::string& path) {
  const std::filesystem::path file(path);
  return file.is_absolute() && file.filename() == "symbolizer_test.cpp" && std::filesystem::exists(file);
}

std::uint64_t unix_ns_now() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

TEST(Symbolizer, APythonFrameIsLeftAsItIs) {
  // A Python frame never has an object file; one given this executable's
  // (and no name) would be named from it were it looked up.
  OwnedFrame frame = frame_for(return_address());
  frame.py = true;
  frame.fn.reset();
  frame.file = "/work/train.py";
  FrameSymbolizer symbolizer;
  symbolizer.set_run_start(unix_ns_now());
  symbolizer.symbolize(frame);
  EXPECT_FALSE(frame.fn.has_value());
  EXPECT_EQ(frame.file, "/work/train.py");
  EXPECT_FALSE(frame.line.has_value());
  EXPECT_EQ(symbolizer.counts().modules_read, 0u);
}

TEST(Symbolizer, AFrameGetsTheFileAndLineOfItsCallAndANameWhereItHadNone) {
  void* ip = return_address(); const std::uint64_t call_line = __LINE__;
  OwnedFrame frame = frame_for(ip);
  FrameSymbolizer symbolizer;
  symbolizer.set_run_start(unix_ns_now());
  symbolizer.symbolize(frame);
  EXPECT_TRUE(is_this_source_file(frame.file)) << frame.file;
  EXPECT_EQ(frame.line, call_line);
  ASSERT_TRUE(frame.fn) << "from .symtab: this executable exports nothing";
  EXPECT_NE(frame.fn->find("AFrameGetsTheFileAndLineOfItsCallAndANameWhereItHadNone"), std::string::npos) << *frame.fn;
  EXPECT_EQ(symbolizer.counts().frames_with_lines, 1u);
  EXPECT_EQ(symbolizer.counts().frames_named, 1u);
  EXPECT_EQ(symbolizer.counts().modules_read, 1u);

  // What the trace has stays; the module is read once.
  OwnedFrame named = frame_for(ip);
  named.fn = "as recorded";
  symbolizer.symbolize(named);
  EXPECT_EQ(named.fn, "as recorded");
  EXPECT_EQ(named.line, call_line);
  EXPECT_EQ(symbolizer.counts().modules_read, 1u);
}

TEST(Symbolizer, MissingChangedAndGeneratedCodeModulesLeaveFramesAsRecorded) {
  void* ip = return_address();
  // Written before the run's start: a file written after it counts as changed.
  TempDir tmp;
  testing::write_file(tmp.path("notes.txt"), "not an object file");
  FrameSymbolizer symbolizer;
  symbolizer.set_run_start(unix_ns_now());

  OwnedFrame missing = frame_for(ip);
  missing.module = "/nonexistent/libgone.so";
  symbolizer.symbolize(missing);
  symbolizer.symbolize(missing);  // counted once
  EXPECT_TRUE(missing.file.empty());
  EXPECT_FALSE(missing.fn);

  OwnedFrame not_elf = frame_for(ip);
  not_elf.module = tmp.path("notes.txt");
  symbolizer.symbolize(not_elf);
  EXPECT_TRUE(not_elf.file.empty());
  EXPECT_EQ(symbolizer.counts().modules_missing, 2u);

  // A rebuild after the run: its lines may be another program's.
  FrameSymbolizer after_rebuild;
  after_rebuild.set_run_start(1);  // 1970: every file is newer
  OwnedFrame changed = frame_for(ip);
  after_rebuild.symbolize(changed);
  EXPECT_TRUE(changed.file.empty());
  EXPECT_FALSE(changed.line);
  EXPECT_EQ(after_rebuild.counts().modules_changed, 1u);

  // A JIT frame named from a perf map: no object file to read.
  OwnedFrame jit;
  jit.ip = 0x7f0000001010;
  jit.fn = "py::train_step:/work/train.py";
  jit.module = "/tmp/perf-42.map";
  jit.off = 0x10;
  symbolizer.symbolize(jit);
  EXPECT_TRUE(jit.file.empty());
  EXPECT_EQ(symbolizer.counts().modules_missing, 2u);
}

TEST(Symbolizer, ReportAndCheckSymbolizeAddFileAndLineToTheFrames) {
  void* ip = return_address(); const std::uint64_t call_line = __LINE__;
  const OwnedFrame frame = frame_for(ip);
  char off[32];
  std::snprintf(off, sizeof off, "0x%llx", static_cast<unsigned long long>(*frame.off));
  char ip_text[32];
  std::snprintf(ip_text, sizeof ip_text, "0x%llx", static_cast<unsigned long long>(frame.ip));
  const std::string header =
      R"({"ev":"header","format":"cumemtrace","version":1,"pid":1,"ppid":0,"host":"h","exe":"/bin/t","argv":["t"],)"
      R"("start_unix_ns":)" + std::to_string(unix_ns_now()) + R"(,"pool":"caching","config":{}})";
  const std::string stack = R"({"ev":"stack","id":1,"frames":[{"ip":")" + std::string(ip_text) +
                            R"(","fn":null,"module":")" + frame.module + R"(","off":")" + off +
                            R"("},{"ip":"0x20","fn":"main","module":"/nonexistent/app","off":"0x20"}]})";
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines({header, stack,
                                                                testing::alloc_line(10, "0x1000", 4096, 0, 1),
                                                                testing::end_line(20)}));
  const testing::CommandResult plain =
      testing::run_command({testing::cli_path(), "report", "--format", "json", tmp.path("t.jsonl")});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(nlohmann::json::parse(plain.out)["leaks"][0]["frames"][0].contains("line"));

  const testing::CommandResult symbolized =
      testing::run_command({testing::cli_path(), "report", "--symbolize", "--format", "json", tmp.path("t.jsonl")});
  ASSERT_EQ(symbolized.exit_code, 0) << symbolized.err;
  const nlohmann::json frames = nlohmann::json::parse(symbolized.out)["leaks"][0]["frames"];
  EXPECT_TRUE(is_this_source_file(frames[0].value("file", ""))) << frames[0];
  EXPECT_EQ(frames[0]["line"], call_line);
  EXPECT_TRUE(frames[0]["fn"].is_string());
  EXPECT_EQ(frames[1]["fn"], "main");
  EXPECT_FALSE(frames[1].contains("line"));
  EXPECT_NE(symbolized.err.find("left the frames of 1 object file as recorded: not found or not readable here"),
            std::string::npos)
      << symbolized.err;

  // The header's start is what a file's age is judged by: a run that
  // started in 1970 is older than this executable.
  std::string old_header = header;
  const std::size_t start_at = old_header.find("\"start_unix_ns\":") + 16;
  old_header.replace(start_at, old_header.find(',', start_at) - start_at, "1");
  testing::write_file(tmp.path("old.jsonl"), testing::join_lines({old_header, stack,
                                                                  testing::alloc_line(10, "0x1000", 4096, 0, 1),
                                                                  testing::end_line(20)}));
  const testing::CommandResult old_run =
      testing::run_command({testing::cli_path(), "report", "--symbolize", "--format", "json", tmp.path("old.jsonl")});
  ASSERT_EQ(old_run.exit_code, 0) << old_run.err;
  EXPECT_FALSE(nlohmann::json::parse(old_run.out)["leaks"][0]["frames"][0].contains("line"));
  EXPECT_NE(old_run.err.find("left the frames of 1 object file as recorded: modified after the run started"),
            std::string::npos)
      << old_run.err;

  // check --symbolize: the failure line names the site by file and line.
  const std::string site = "symbolizer_test.cpp:" + std::to_string(call_line);
  const testing::CommandResult check = testing::run_command(
      {testing::cli_path(), "check", "--symbolize", "--max-leaked-bytes", "0", tmp.path("t.jsonl")});
  EXPECT_EQ(check.exit_code, 1) << check.err;
  EXPECT_NE(check.err.find("check failed: leaked 4.00 KiB > 0 B (most from "), std::string::npos) << check.err;
  EXPECT_NE(check.err.find(site), std::string::npos) << check.err;
  const testing::CommandResult unsymbolized =
      testing::run_command({testing::cli_path(), "check", "--max-leaked-bytes", "0", tmp.path("t.jsonl")});
  EXPECT_EQ(unsymbolized.exit_code, 1);
  EXPECT_EQ(unsymbolized.err.find(site), std::string::npos) << unsymbolized.err;
}

}  // namespace
}  // namespace cumemtrace::analyzer
