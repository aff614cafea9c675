// Python frames without a Python: the line-table decoders against tables
// CPython produced, str decoding, the version detection, the published
// offsets of 3.13, and the walker over a hand-built 3.12 frame chain
// (including a code object whose address is reused by another).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "stacks/python_code.h"
#include "stacks/python_frames.h"
#include "stacks/python_layout.h"

namespace cumemtrace::preload::python {
namespace {

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<std::uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// (start, end, line) as the interpreter's co_lines() gives them, in bytes.
struct Range {
  int start, end, line;
};

void expect_lines(LineTableKind kind, const std::string& table_hex, int first_line, const std::vector<Range>& ranges,
                  int unit) {
  const auto table = from_hex(table_hex);
  for (const Range& r : ranges) {
    for (int byte = r.start; byte < r.end; byte += 2) {
      EXPECT_EQ(line_for(kind, table, first_line, static_cast<std::uint64_t>(byte / unit)), r.line)
          << "at byte " << byte;
    }
  }
}

// The same function compiled by each version (tests/unit/preload/stacks
// tables: `f.__code__` of
//   def f(a):
//       x = a + 1
//       if x:
//           y = [i for i in range(3)]
//
//       z = (x,
//            y)
//       return z
// with its co_lines()).
TEST(PythonLineTables, Lnotab39MatchesCoLines) {
  expect_lines(LineTableKind::lnotab_39, "0001080104011202020102ff0402", 2,
               {{0, 8, 3}, {8, 12, 4}, {12, 30, 5}, {30, 32, 7}, {32, 34, 8}, {34, 38, 7}, {38, 42, 9}}, 1);
}

TEST(PythonLineTables, Linetable310MatchesCoLines) {
  expect_lines(LineTableKind::linetable_310, "0801040112010202020104ff0402", 2,
               {{0, 8, 3}, {8, 12, 4}, {12, 30, 5}, {30, 32, 7}, {32, 34, 8}, {34, 38, 7}, {38, 42, 9}}, 1);
}

TEST(PythonLineTables, Locations311MatchesCoLines) {
  expect_lines(LineTableKind::locations_311,
               "8000d80809884189058041d80708f000010522d80c21d00c219d05986199089c08d00c21d10c21d40c218801e0090ad8090af0"
               "0301090c8041e00b0c8048",
               2,
               {{0, 2, 2}, {2, 12, 3}, {12, 16, 4}, {16, 66, 5}, {66, 68, 7}, {68, 70, 8}, {70, 74, 7}, {74, 78, 9}},
               2);
}

TEST(PythonLineTables, NoLocationAndPastTheEndAreMinusOne) {
  // One entry of code 15 (no location), 2 units; then a one-line entry (+1).
  const std::vector<std::uint8_t> table = {0x80 | 15 << 3 | 1, 0x80 | 11 << 3 | 0, 0, 0};
  EXPECT_EQ(line_for(LineTableKind::locations_311, table, 10, 0), -1);
  EXPECT_EQ(line_for(LineTableKind::locations_311, table, 10, 1), -1);
  EXPECT_EQ(line_for(LineTableKind::locations_311, table, 10, 2), 11);
  EXPECT_EQ(line_for(LineTableKind::locations_311, table, 10, 3), -1);
  // 3.10: a -128 delta is "no line" and leaves the running line as it was.
  const std::vector<std::uint8_t> t310 = {4, 0x80, 4, 2};
  EXPECT_EQ(line_for(LineTableKind::linetable_310, t310, 5, 0), -1);
  EXPECT_EQ(line_for(LineTableKind::linetable_310, t310, 5, 5), 7);
}

// ---- hand-built objects, laid out as 3.12 lays them out -------------------

alignas(16) char g_unicode_type[64];
alignas(16) char g_code_type[64];

template <typename T>
void store(void* base, std::uint32_t offset, T value) {
  std::memcpy(static_cast<char*>(base) + offset, &value, sizeof value);
}

struct FakeStr {
  alignas(16) char bytes[128] = {};
  FakeStr(const std::string& text, std::int64_t hash, const Layout& l) { set(text, hash, l); }
  void set(const std::string& text, std::int64_t hash, const Layout& l) {
    std::memset(bytes, 0, sizeof bytes);
    store<const void*>(bytes, kObjectType, g_unicode_type);
    store<std::uint64_t>(bytes, kUnicodeLength, text.size());
    store<std::int64_t>(bytes, kUnicodeHash, hash);
    store<std::uint32_t>(bytes, kUnicodeState, 1u << 2 | 1u << 5 | 1u << 6);  // kind 1, compact, ascii
    std::memcpy(bytes + l.unicode_ascii_data, text.data(), text.size());
  }
};

struct FakeBytes {
  alignas(16) char bytes[64] = {};
  explicit FakeBytes(const std::vector<std::uint8_t>& data) {
    store<std::int64_t>(bytes, kBytesSize, static_cast<std::int64_t>(data.size()));
    std::memcpy(bytes + kBytesData, data.data(), data.size());
  }
};

// Units 0-7: first + 2; units 8-15: first + 5 (two no-column entries).
const std::vector<std::uint8_t> kTwoLines = {0x80 | 13 << 3 | 7, 4, 0x80 | 13 << 3 | 7, 6};

struct FakeCode {
  alignas(16) char bytes[256] = {};
  FakeCode(const Layout& l, const FakeStr& name, const FakeStr& file, const FakeBytes& table, int first_line) {
    store<const void*>(bytes, kObjectType, g_code_type);
    store<std::int32_t>(bytes, l.code_firstlineno, first_line);
    store<const void*>(bytes, l.code_filename, file.bytes);
    store<const void*>(bytes, l.code_name, name.bytes);
    store<const void*>(bytes, l.code_qualname, name.bytes);
    store<const void*>(bytes, l.code_linetable, table.bytes);
    store<std::int32_t>(bytes, l.code_firsttraceable, 0);
  }
  std::uintptr_t instruction(std::uint32_t unit, const Layout& l) const {
    return reinterpret_cast<std::uintptr_t>(bytes) + l.code_adaptive + 2 * unit;
  }
};

struct FakeFrame {
  alignas(16) char bytes[96] = {};
  void link(const Layout& l, const FakeCode* code, std::uint32_t unit, std::uint8_t owner, const FakeFrame* previous) {
    store<const void*>(bytes, l.frame_code, code != nullptr ? code->bytes : nullptr);
    store<std::uintptr_t>(bytes, l.frame_instruction, code != nullptr ? code->instruction(unit, l) : 0);
    store<std::uint8_t>(bytes, l.frame_owner, owner);
    store<const void*>(bytes, l.frame_previous, previous != nullptr ? previous->bytes : nullptr);
  }
};

alignas(16) char g_tstate[128];
alignas(16) char g_cframe[64];
void* fake_this_thread_state() { return g_tstate; }
int fake_initialized() { return 1; }

class PythonWalk : public ::testing::Test {
 protected:
  Layout l = *layout_from_headers(12);
  FakeStr name_a{"Model.forward", 1111, l};
  FakeStr name_b{"train_step", 2222, l};
  FakeStr file{"/work/train.py", -1, l};
  FakeBytes table{kTwoLines};
  FakeCode a{l, name_a, file, table, 10};
  FakeCode b{l, name_b, file, table, 40};
  FakeFrame inner, shim1, middle, outer, shim2;

  Interpreter interpreter() {
    Interpreter in;
    in.layout = l;
    in.this_thread_state = &fake_this_thread_state;
    in.is_initialized = &fake_initialized;
    in.code_type = g_code_type;
    in.unicode_type = g_unicode_type;
    in.eval_begin = 0x1000;
    in.eval_end = 0x2000;
    return in;
  }

  void SetUp() override {
    // inner (a, line 15) | shim | middle (b, line 42), outer (b, line 45) | shim
    shim2.link(l, nullptr, 0, 3, nullptr);
    outer.link(l, &b, 9, 0, &shim2);
    middle.link(l, &b, 1, 0, &outer);
    shim1.link(l, nullptr, 0, 3, &middle);
    inner.link(l, &a, 8, 0, &shim1);
    store<const void*>(g_tstate, l.tstate_cframe, g_cframe);
    store<const void*>(g_cframe, l.cframe_current_frame, inner.bytes);
  }

  static std::vector<std::string> described(PythonFrames& frames, const PythonStack& s) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.count; ++i) {
      const FunctionName f = frames.function(function_of(s.words[i]));
      out.push_back(f.name + "@" + f.file + ":" + std::to_string(line_of(s.words[i])));
    }
    return out;
  }
};

TEST_F(PythonWalk, ReadsFramesLinesAndRunsThroughEntryFrames) {
  PythonFrames frames(interpreter());
  PythonStack s;
  frames.capture(s);
  EXPECT_EQ(described(frames, s), (std::vector<std::string>{"Model.forward@/work/train.py:15",
                                                              "train_step@/work/train.py:42",
                                                              "train_step@/work/train.py:45"}));
  ASSERT_EQ(s.runs, 2u);
  EXPECT_EQ(s.run_end[0], 1);
  EXPECT_EQ(s.run_end[1], 3);
}

// On 3.12+ a run of Python frames ends at its entry frame, a shim that
// lives in _PyEval_EvalFrameDefault's C stack frame: its address is what
// places the run among the native frames (merge_stacks). Without it
// the run falls back to the evaluation loop's code range, which 3.14's
// tail-calling interpreter and a `.cold` part break.
TEST_F(PythonWalk, EachRunIsAnchoredAtItsEntryFrame) {
  PythonFrames frames(interpreter());
  for (int capture = 0; capture < 2; ++capture) {  // walked, then answered from the thread's cache
    SCOPED_TRACE(capture == 0 ? "walked" : "cached");
    PythonStack s;
    frames.capture(s);
    ASSERT_EQ(s.runs, 2u);
    EXPECT_EQ(s.run_anchor[0], reinterpret_cast<std::uintptr_t>(shim1.bytes));
    EXPECT_EQ(s.run_anchor[1], reinterpret_cast<std::uintptr_t>(shim2.bytes));
  }
}

TEST_F(PythonWalk, ARepeatedPositionIsAnsweredFromTheCache) {
  PythonFrames frames(interpreter());
  PythonStack first;
  PythonStack second;
  frames.capture(first);
  const auto before = PythonFrames::thread_counters();
  frames.capture(second);
  const auto after = PythonFrames::thread_counters();
  EXPECT_FALSE(first.unchanged);
  EXPECT_TRUE(second.unchanged);
  EXPECT_EQ(after.decoded, before.decoded);
  EXPECT_EQ(after.cached, before.cached + 3);
  EXPECT_EQ(std::vector(first.words, first.words + first.count), std::vector(second.words, second.words + second.count));
}

TEST_F(PythonWalk, ACodeObjectReusingAnAddressDoesNotGetTheOldName) {
  PythonFrames frames(interpreter());
  PythonStack s;
  frames.capture(s);
  ASSERT_EQ(frames.function(function_of(s.words[0])).name, "Model.forward");
  // The code object and its name die; a new code object with another name
  // is built at the same address, its name str at the old one's address
  // too, not hashed yet (as CPython's allocator hands freed blocks out).
  name_a.set("Model.backwrd", -1, l);
  frames.capture(s);
  EXPECT_EQ(frames.function(function_of(s.words[0])).name, "Model.backwrd");
  // The same with a hashed name of the same length.
  name_a.set("Model.predict", 3333, l);
  frames.capture(s);
  EXPECT_EQ(frames.function(function_of(s.words[0])).name, "Model.predict");
  // A file name changed where the name stayed: told by its length, or by
  // its hash once it has one. (Unhashed and of the same length, it is not:
  // python_code.h, TextSample, says why a hit does not read the text.)
  file.set("/work/other_file.py", -1, l);
  frames.capture(s);
  EXPECT_EQ(frames.function(function_of(s.words[0])).file, "/work/other_file.py");
  file.set("/work/h1.py", 4444, l);
  frames.capture(s);
  EXPECT_EQ(frames.function(function_of(s.words[0])).file, "/work/h1.py");
  file.set("/work/h2.py", 5555, l);
  frames.capture(s);
  EXPECT_EQ(frames.function(function_of(s.words[0])).file, "/work/h2.py");
}

TEST_F(PythonWalk, AFrameThatIsNotCodeOrNotStartedIsSkipped) {
  // middle's executable is not a code object (a PEP 523 tool's), and
  // outer has not reached its first traceable instruction.
  alignas(16) static char not_code[64];
  store<const void*>(middle.bytes, l.frame_code, not_code);
  store<std::int32_t>(b.bytes, l.code_firsttraceable, 20);
  PythonFrames frames(interpreter());
  PythonStack s;
  frames.capture(s);
  EXPECT_EQ(described(frames, s), (std::vector<std::string>{"Model.forward@/work/train.py:15"}));
}

TEST_F(PythonWalk, NoThreadStateOrNoFrameMeansNoPythonFrames) {
  store<const void*>(g_cframe, l.cframe_current_frame, nullptr);
  PythonFrames frames(interpreter());
  PythonStack s;
  frames.capture(s);
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.runs, 0u);
}

TEST(PythonMerge, RunsStandInsideTheirEvaluationLoopFramesAndLeftoversGoLast) {
  PythonStack py;
  py.words[0] = python_word(1, 10);
  py.words[1] = python_word(2, 20);
  py.words[2] = python_word(3, 30);
  py.words[3] = python_word(4, 40);
  py.run_end[0] = 1;
  py.run_end[1] = 3;
  py.run_end[2] = 4;
  py.count = 4;
  py.runs = 3;
  // native: ffi, EVAL, helper, EVAL, main (cut: the third loop frame is past the depth)
  const std::vector<std::uintptr_t> native = {0x500, 0x1100, 0x600, 0x1200, 0x700};
  auto is_eval = [](std::uintptr_t ip) { return ip >= 0x1000 && ip < 0x2000; };
  std::uintptr_t out[16];
  const std::size_t n = merge_stacks(native, nullptr, py, is_eval, out, 16);
  EXPECT_EQ(std::vector(out, out + n),
            (std::vector<std::uintptr_t>{0x500, py.words[0], 0x1100, 0x600, py.words[1], py.words[2], 0x1200, 0x700,
                                         py.words[3]}));
  // Capacity cuts the outermost.
  EXPECT_EQ(merge_stacks(native, nullptr, py, is_eval, out, 3), 3u);
  EXPECT_EQ(out[2], 0x1100u);
}

// 3.12+: each run's entry frame lies in the C stack frame of the loop call
// that runs it; with the walk's return-address slots, the run goes inside
// that native frame whatever its name (3.14's tail-calling interpreter runs
// Python in unnamed functions: no frame is in the loop's symbol).
TEST(PythonMerge, EntryFramesOnTheCStackPlaceRunsByAddress) {
  PythonStack py;
  py.words[0] = python_word(1, 10);
  py.words[1] = python_word(2, 20);
  py.words[2] = python_word(3, 30);
  py.run_end[0] = 1;
  py.run_end[1] = 2;
  py.run_end[2] = 3;
  py.run_anchor[0] = 0x7000'1050;  // inside frame 1's extent (0x...1040, 0x...1080)
  py.run_anchor[1] = 0x7000'10a0;  // inside frame 3's (0x...1090, 0x...10c0)
  py.run_anchor[2] = 0x7000'2000;  // past the last frame: after it
  py.count = 3;
  py.runs = 3;
  const std::vector<std::uintptr_t> native = {0x500, 0x600, 0x700, 0x800, 0x900};
  const std::uintptr_t slots[] = {0x7000'1000, 0x7000'1040, 0x7000'1080, 0x7000'1090, 0x7000'10c0};
  auto never = [](std::uintptr_t) { return false; };
  std::uintptr_t out[16];
  const std::size_t n = merge_stacks(native, slots, py, never, out, 16);
  EXPECT_EQ(std::vector(out, out + n), (std::vector<std::uintptr_t>{0x500, py.words[0], 0x600, 0x700, py.words[1],
                                                                    0x800, 0x900, py.words[2]}));
  // Without slots (libunwind walked), the loop's symbol places them.
  auto eval_at_700 = [](std::uintptr_t ip) { return ip == 0x700; };
  const std::size_t m = merge_stacks(native, nullptr, py, eval_at_700, out, 16);
  EXPECT_EQ(std::vector(out, out + m), (std::vector<std::uintptr_t>{0x500, 0x600, py.words[0], 0x700, 0x800, 0x900,
                                                                    py.words[1], py.words[2]}));
}

TEST(PythonWords, KeepFunctionAndLine) {
  const std::uintptr_t w = python_word(12345, 678);
  EXPECT_TRUE(is_python_word(w));
  EXPECT_EQ(function_of(w), 12345u);
  EXPECT_EQ(line_of(w), 678);
  EXPECT_EQ(line_of(python_word(7, -1)), -1);
  EXPECT_FALSE(is_python_word(0x7fffffffffffull));
}

// ---- detection ------------------------------------------------------------

std::map<std::string, void*> g_symbols;
void* fake_lookup(const char* name) {
  auto it = g_symbols.find(name);
  return it != g_symbols.end() ? it->second : nullptr;
}
const char* g_version_text = "";
const char* fake_version() { return g_version_text; }
alignas(16) char g_runtime[1024];
int fake_eval_loop() { return 0; }

void install_interpreter(const char* version_text) {
  g_symbols.clear();
  g_version_text = version_text;
  g_symbols["PyGILState_GetThisThreadState"] = reinterpret_cast<void*>(&fake_this_thread_state);
  g_symbols["Py_GetVersion"] = reinterpret_cast<void*>(&fake_version);
  g_symbols["Py_IsInitialized"] = reinterpret_cast<void*>(&fake_initialized);
  g_symbols["PyCode_Type"] = g_code_type;
  g_symbols["PyUnicode_Type"] = g_unicode_type;
  g_symbols["_PyEval_EvalFrameDefault"] = reinterpret_cast<void*>(&fake_eval_loop);
}

TEST(PythonDetection, NoInterpreterIsNoNote) {
  g_symbols.clear();
  const Detection d = detect_interpreter(&fake_lookup);
  EXPECT_EQ(d.outcome, Detection::Outcome::no_interpreter);
  EXPECT_TRUE(d.note.empty());
}

TEST(PythonDetection, VersionsOutsideTheTablesGetNativeStacksAndSayWhy) {
  install_interpreter("3.8.18 (default, May  9 2026)");
  Detection d = detect_interpreter(&fake_lookup);
  EXPECT_EQ(d.outcome, Detection::Outcome::unsupported);
  EXPECT_EQ(d.note.rfind("native stacks only: CPython 3.8.18", 0), 0u) << d.note;
  EXPECT_NE(d.note.find("older than 3.9"), std::string::npos) << d.note;
  install_interpreter("3.15.0a1 (main)");
  d = detect_interpreter(&fake_lookup);
  EXPECT_EQ(d.outcome, Detection::Outcome::unsupported);
  EXPECT_NE(d.note.find("newer than"), std::string::npos) << d.note;
}

TEST(PythonDetection, ADebugBuildBefore313IsRefused) {
  install_interpreter("3.10.13 (main)");
  EXPECT_EQ(detect_interpreter(&fake_lookup).outcome, Detection::Outcome::walkable);
  g_symbols["_Py_RefTotal"] = g_runtime;
  const Detection d = detect_interpreter(&fake_lookup);
  EXPECT_EQ(d.outcome, Detection::Outcome::unsupported);
  EXPECT_NE(d.note.find("debug build"), std::string::npos) << d.note;
}

// A 3.13 _PyRuntime head with the offsets 3.13.0 publishes (offsetof in its
// headers: current_frame 72; frame previous 8, executable 0, instr_ptr 56,
// owner 70, size 80; code filename 112, name 120, qualname 128, linetable
// 136, firstlineno 68, co_code_adaptive 200).
void fill_runtime_313(bool free_threaded) {
  std::memset(g_runtime, 0, sizeof g_runtime);
  std::memcpy(g_runtime, "xdebugpy", 8);
  auto put = [](std::size_t offset, std::uint64_t v) { std::memcpy(g_runtime + offset, &v, 8); };
  put(8, 0x030d00f0);
  put(16, free_threaded ? 1 : 0);
  put(184, 72);                                            // thread_state.current_frame
  put(224, 80), put(232, 8), put(240, 0), put(248, 56), put(264, 70);  // interpreter_frame
  put(272, 216), put(280, 112), put(288, 120), put(296, 128), put(304, 136), put(312, 68), put(344, 200);
  put(272 + 80 + 16 + 32 + 24 + 24 + 24 + 16 + 24 + 24 + 24, 40);  // unicode_object.asciiobject_size
}

TEST(PythonDetection, Python313ReadsItsPublishedOffsets) {
  install_interpreter("3.13.0 (main)");
  fill_runtime_313(false);
  g_symbols["_PyRuntime"] = g_runtime;
  const Detection d = detect_interpreter(&fake_lookup);
  ASSERT_EQ(d.outcome, Detection::Outcome::walkable) << d.note;
  const Layout& l = d.interpreter.layout;
  EXPECT_EQ(l.minor, 13u);
  EXPECT_EQ(l.tstate_frame, 72u);
  EXPECT_EQ(l.frame_previous, 8u);
  EXPECT_EQ(l.frame_instruction, 56u);
  EXPECT_EQ(l.frame_owner, 70u);
  EXPECT_EQ(l.code_adaptive, 200u);
  EXPECT_EQ(l.code_firsttraceable, 184u);  // 3.13.0 Include/cpython/code.h
  EXPECT_EQ(l.unicode_ascii_data, 40u);
  EXPECT_EQ(l.unicode_compact_data, 56u);
  EXPECT_FALSE(l.code_is_stack_ref);
  EXPECT_EQ(l, kLayout313);  // so the walker compiled for these offsets runs
  EXPECT_TRUE(PythonFrames(d.interpreter).walks_with_known_offsets());
  EXPECT_EQ(d.note.rfind("CPython 3.13.0 (", 0), 0u) << d.note;
}

TEST(PythonDetection, AFreeThreadedBuildIsRefused) {
  install_interpreter("3.13.0 experimental free-threading build (main)");
  fill_runtime_313(true);
  g_symbols["_PyRuntime"] = g_runtime;
  const Detection d = detect_interpreter(&fake_lookup);
  EXPECT_EQ(d.outcome, Detection::Outcome::unsupported);
  EXPECT_NE(d.note.find("free-threaded"), std::string::npos) << d.note;
}

TEST(PythonDetection, VersionText) {
  EXPECT_EQ(version_from_text("3.9.18 (main, Jan  1 2026)"), 0x03091200u);
  EXPECT_EQ(version_from_text("3.11.2 (main)"), 0x030b0200u);
  EXPECT_EQ(version_from_text("garbage"), 0u);
}

}  // namespace
}  // namespace cumemtrace::preload::python
