// Naming frames: perf maps written while the program runs (CPython's perf
// trampolines), object files through dladdr, symbol-table fallback and
// demangling.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cumemtrace/demangle.h"
#include "stacks/frame_namer.h"
#include "stacks/perf_map.h"
#include "test_support.h"

extern "C" int naming_fixture_exported(int x);
extern "C" std::uintptr_t naming_fixture_hidden_address();

using namespace cumemtrace::preload;
using cumemtrace::testing::TempDir;

namespace {

void append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::app) << text;
}

TEST(PerfMap, FindsRangesAndReadsLinesAppendedLater) {
  TempDir dir;
  const std::string path = dir / "perf-1.map";
  PerfMap map(path);
  EXPECT_FALSE(map.find(0x1000));  // no file yet

  append(path, "7f0000001000 40 py::train_step:/work/train.py\n");
  auto hit = map.find(0x7f0000001010);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->start, 0x7f0000001000u);
  EXPECT_EQ(hit->size, 0x40u);
  EXPECT_EQ(hit->name, "py::train_step:/work/train.py");
  EXPECT_FALSE(map.find(0x7f0000001040));  // one past the end

  // A line still being written is not read until it is complete.
  append(path, "7f0000002000 20 py::load_ba");
  EXPECT_FALSE(map.find(0x7f0000002000));
  append(path, "tch:/work/data loader.py\n0x7f0000003000 0x10 py::<lambda>:<stdin>\r\n");
  hit = map.find(0x7f0000002000);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name, "py::load_batch:/work/data loader.py");  // names may hold spaces
  hit = map.find(0x7f000000300f);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name, "py::<lambda>:<stdin>");
  EXPECT_EQ(map.size(), 3u);
}

TEST(PerfMap, MalformedLinesAreSkippedAndLaterLinesReplaceEarlierOnes) {
  TempDir dir;
  const std::string path = dir / "perf-2.map";
  append(path,
         "garbage\n"
         "zz 10 py::bad_start:x.py\n"
         "5000 0 py::empty:x.py\n"
         "5000 10\n"
         "\n"
         "5000 10 py::first:x.py\n"
         "5000 10 py::second:x.py\n");
  PerfMap map(path);
  const auto hit = map.find(0x5008);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name, "py::second:x.py");
  EXPECT_EQ(map.size(), 1u);
}

TEST(PerfMap, AReplacedOrTruncatedFileIsReadFromTheStart) {
  TempDir dir;
  const std::string path = dir / "perf-3.map";
  append(path, "1000 10 py::old:x.py\n");
  PerfMap map(path);
  ASSERT_TRUE(map.find(0x1000));
  // Replaced (a stale map of an earlier process with our pid, say): renamed
  // over, so the new file is surely another inode.
  append(dir / "next.map", "2000 10 py::new:x.py\n3000 10 py::more:x.py\n");
  ASSERT_EQ(std::rename((dir / "next.map").c_str(), path.c_str()), 0);
  auto hit = map.find(0x2004);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name, "py::new:x.py");
  EXPECT_FALSE(map.find(0x1004)) << "the old file's ranges were forgotten";
  // Truncated and rewritten shorter.
  std::ofstream(path, std::ios::trunc) << "4000 10 py::x:x.py\n";
  hit = map.find(0x4004);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name, "py::x:x.py");
  EXPECT_EQ(map.size(), 1u);
}

TEST(PerfMap, SymlinkIsNotFollowed) {
  TempDir dir;
  append(dir / "real.map", "1000 10 py::planted:x.py\n");
  ASSERT_EQ(::symlink((dir / "real.map").c_str(), (dir / "perf-4.map").c_str()), 0);
  PerfMap map(dir / "perf-4.map");
  EXPECT_FALSE(map.find(0x1004));
}

TEST(Demangle, CxxNamesAreDemangledAndCNamesKept) {
  EXPECT_EQ(cumemtrace::demangle("_ZN3app5trainERKSt6vectorIiSaIiEE"), "app::train(std::vector<int, std::allocator<int> > const&)");
  EXPECT_EQ(cumemtrace::demangle("main"), "main");
  EXPECT_EQ(cumemtrace::demangle("_Z"), "_Z");
}

bool fake_symbol_table(std::uintptr_t address, std::string& mangled, std::uintptr_t& symbol_start) {
  mangled = "_ZN5model7forwardEv";
  symbol_start = address - 1;
  return true;
}

TEST(FrameNamer, FramesInObjectFilesGetModuleOffsetAndName) {
  FrameNamer namer(&fake_symbol_table);
  // A libc function: exported, so dladdr names it. A return address points
  // past the call, so the namer looks one byte back: pass start + 1.
  const auto in_libc = reinterpret_cast<std::uintptr_t>(&::getpid) + 1;
  const NamedFrame libc_frame = namer.name(in_libc);
  EXPECT_EQ(libc_frame.ip, in_libc);
  ASSERT_TRUE(libc_frame.module);
  EXPECT_NE(libc_frame.module->find("libc.so"), std::string::npos) << *libc_frame.module;
  ASSERT_TRUE(libc_frame.fn);
  EXPECT_NE(libc_frame.fn->find("getpid"), std::string::npos) << *libc_frame.fn;
  ASSERT_TRUE(libc_frame.off);
  EXPECT_LT(*libc_frame.off, in_libc);

  // A function of this (non -rdynamic) executable: dladdr has no name, the
  // symbol-table lookup does.
  const auto in_test = reinterpret_cast<std::uintptr_t>(&fake_symbol_table) + 1;
  const NamedFrame test_frame = namer.name(in_test);
  ASSERT_TRUE(test_frame.module);
  char exe[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  EXPECT_EQ(*test_frame.module, exe);
  EXPECT_EQ(test_frame.fn, "model::forward()");
}

// What libunwind's unw_get_proc_name (1.6.2) answers inside the fixture's
// hidden function: the export below it, at its distance from that export's
// start (checked with a program calling it on the fixture).
bool nearest_export_symbol_table(std::uintptr_t, std::string& mangled, std::uintptr_t& symbol_start) {
  mangled = "naming_fixture_exported";
  symbol_start = reinterpret_cast<std::uintptr_t>(&naming_fixture_exported);
  return true;
}

// cuBLAS's internal frames were named after whatever export lay below them,
// however far (the symbol-table lookup's nearest symbol): a frame that no
// symbol it can see spans has module and offset only.
TEST(FrameNamer, AFrameNoSymbolSpansIsLeftUnnamedNotGivenTheNearestExport) {
  const auto exported = reinterpret_cast<std::uintptr_t>(&naming_fixture_exported);
  const std::uintptr_t hidden = naming_fixture_hidden_address();
  ASSERT_GT(hidden, exported) << "the fixture's layout: the hidden function follows the export";
  Dl_info info{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(hidden + 4), &info), 0);
  ASSERT_EQ(info.dli_sname, nullptr) << "dladdr names only a symbol that spans the address";

  FrameNamer namer(&nearest_export_symbol_table);
  const NamedFrame inside_hidden = namer.name(hidden + 5);
  ASSERT_TRUE(inside_hidden.module);
  EXPECT_NE(inside_hidden.module->find("libpreload_naming_fixture.so"), std::string::npos) << *inside_hidden.module;
  ASSERT_TRUE(inside_hidden.off);
  EXPECT_FALSE(inside_hidden.fn) << "named " << *inside_hidden.fn;

  // The export's own frames keep its name.
  EXPECT_EQ(namer.name(exported + 2).fn, "naming_fixture_exported");

  // A symbol outside .dynsym (a library with .symtab) is trusted.
  FrameNamer with_symtab(&fake_symbol_table);
  EXPECT_EQ(with_symtab.name(hidden + 5).fn, "model::forward()");
}

TEST(FrameNamer, GeneratedCodeIsNamedFromThePerfMapOnlyWhenListed) {
  TempDir dir;
  const std::string path = dir / "perf-5.map";
  const long page = ::sysconf(_SC_PAGESIZE);
  void* code = ::mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(code, MAP_FAILED);
  const auto base = reinterpret_cast<std::uintptr_t>(code);
  FrameNamer namer(nullptr, path);

  NamedFrame unknown = namer.name(base + 0x11);
  EXPECT_FALSE(unknown.fn);
  EXPECT_FALSE(unknown.module);
  EXPECT_FALSE(unknown.off);

  char line[128];
  std::snprintf(line, sizeof line, "%lx 40 py::train_step:/work/train.py\n", static_cast<unsigned long>(base));
  append(path, line);
  const NamedFrame named = namer.name(base + 0x11);  // re-read: unnamed frames are not cached
  EXPECT_EQ(named.fn, "py::train_step:/work/train.py");
  EXPECT_EQ(named.module, path);
  EXPECT_EQ(named.off, 0x11u);

  cumemtrace::contract::LineBuffer out;
  FrameNamer::append_json(out, named);
  FrameNamer::append_json(out.ch(','), unknown);
  const auto frames = nlohmann::json::parse("[" + std::string(out.view()) + "]");
  EXPECT_EQ(frames[0]["fn"], "py::train_step:/work/train.py");
  EXPECT_EQ(frames[0]["off"], "0x11");
  EXPECT_TRUE(frames[1]["fn"].is_null());
  EXPECT_TRUE(frames[1]["module"].is_null());
  EXPECT_TRUE(frames[1]["off"].is_null());
  ::munmap(code, static_cast<std::size_t>(page));
}

}  // namespace
