// The calling thread's Python frames, for stacks captured while it runs
// Python code (issue 22): which function, file and line of the training
// script led to a CUDA call.
//
// Since 3.11 the interpreter runs nested Python calls inside one
// _PyEval_EvalFrameDefault, so native frames cannot tell Python call sites
// apart. The thread therefore reads its own chain of interpreter frames:
//  - its thread state from PyGILState_GetThisThreadState(), a
//    pthread_getspecific that stays valid while the thread has released
//    the GIL (ctypes.CDLL calls, PyTorch's operators), unlike the "current"
//    thread state, which is NULL then;
//  - the frames through the running version's layout (python_layout.h).
// This is sound without the GIL because frames are pushed and popped only
// by the thread that runs them: while this thread is inside our hook, no
// other thread can pop its frames or free the code objects they hold (each
// frame owns a reference to its code). Other threads may change a code
// object's adaptive bytecode or a str's cached hash meanwhile; the walk
// reads only fields that stay put (the line table is immutable).
// The hook never takes the GIL, never runs Python code, never allocates
// through the interpreter and never touches a reference count.
//
// A Python frame travels through the stack table as one word in place of a
// return address: bit 63 set (no user-space address has it), the function's
// id in bits 32-62 (its qualified name and file, interned by text), and the
// line + 1 in bits 0-31 (0: no line). A repeated position costs a cache
// probe per frame; names and lines are decoded once per code position.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "stacks/python_layout.h"

namespace cumemtrace::preload::python {

constexpr std::uint64_t kPythonFrameBit = std::uint64_t{1} << 63;
inline bool is_python_word(std::uintptr_t word) { return (word & kPythonFrameBit) != 0; }
inline std::uint32_t function_of(std::uintptr_t word) { return static_cast<std::uint32_t>(word >> 32 & 0x7fffffff); }
// -1: no line.
inline int line_of(std::uintptr_t word) { return static_cast<int>(static_cast<std::uint32_t>(word)) - 1; }
inline std::uintptr_t python_word(std::uint32_t function, int line) {
  const std::uint32_t stored = line >= 0 ? static_cast<std::uint32_t>(line) + 1 : 0;
  return kPythonFrameBit | std::uint64_t{function & 0x7fffffff} << 32 | stored;
}

// Deepest Python stack recorded per capture (CPython's faulthandler stops at
// 100); frames beyond it, the outermost, are left out.
constexpr std::size_t kMaxPythonFrames = 128;

// One capture: the frames, innermost first, cut into runs, one per C-level
// evaluation call (python_layout.h's RunKind), innermost run first.
struct PythonStack {
  std::uintptr_t words[kMaxPythonFrames];
  std::uint16_t run_end[kMaxPythonFrames];  // exclusive end of each run in `words`
  // 3.12+: the address of each run's interpreter entry frame, a local of the
  // _PyEval_EvalFrameDefault call that runs it, so on the C stack inside
  // that call's frame; 0 where unknown (3.9-3.11, a cut chain).
  std::uintptr_t run_anchor[kMaxPythonFrames];
  std::size_t count = 0;
  std::size_t runs = 0;
  // The same frames at the same instructions, in the same runs, as this
  // thread's previous capture (the stack recorder then reuses its id).
  bool unchanged = false;
};

// The interpreter in this process, as found at run time.
struct Interpreter {
  Layout layout;
  void* (*this_thread_state)() = nullptr;  // PyGILState_GetThisThreadState
  int (*is_initialized)() = nullptr;       // Py_IsInitialized
  int (*is_finalizing)() = nullptr;        // Py_IsFinalizing (3.13+) or _Py_IsFinalizing
  const void* code_type = nullptr;         // &PyCode_Type
  const void* unicode_type = nullptr;      // &PyUnicode_Type
  // [_PyEval_EvalFrameDefault, + its size): the native frames Python frames stand at.
  std::uintptr_t eval_begin = 0;
  std::uintptr_t eval_end = 0;
};

// How symbols are found: dlsym(RTLD_DEFAULT, name) in the preload (through
// the real dlsym, not our hook), a table in the tests.
using SymbolLookup = void* (*)(const char* name);

// What the search for an interpreter found. `walkable` carries the
// interpreter when frames can be read; `note` says what the header echoes
// ("CPython 3.11.7 (libpython3.11.so.1.0)", or "native stacks only: …").
struct Detection {
  enum class Outcome { no_interpreter, walkable, unsupported } outcome = Outcome::no_interpreter;
  Interpreter interpreter;
  std::string note;
};
Detection detect_interpreter(SymbolLookup lookup);

// The version from Py_GetVersion()'s text ("3.9.18 (main, …"), as
// PY_VERSION_HEX's major/minor/micro bits; 0 when unreadable.
std::uint64_t version_from_text(const char* text);

// The function table: a Python frame word's function id -> its name and file.
struct FunctionName {
  std::string name;  // qualified (3.11+), else co_name
  std::string file;
};

class PythonFrames {
 public:
  explicit PythonFrames(const Interpreter& interpreter);

  // The calling thread's Python frames into `out` (count 0 when it runs no
  // Python, or the interpreter is not initialized or is finalizing).
  void capture(PythonStack& out) { (this->*walker_)(out); }
  // Whether the walker compiled for this version's offsets runs (the
  // offsets the interpreter publishes are the ones we know).
  bool walks_with_known_offsets() const { return walker_ != &PythonFrames::capture_with<nullptr>; }

  // Whether the native return address `ip` lies in the evaluation loop.
  bool in_eval_loop(std::uintptr_t ip) const {
    return ip - 1 - interpreter_.eval_begin < interpreter_.eval_end - interpreter_.eval_begin;
  }

  // The name and file of a function id (for the stack's line; cold path).
  FunctionName function(std::uint32_t id);

  // Code positions this thread decoded (a miss of its cache) and answered
  // from its cache: the tests check repeated captures hit it.
  struct Counters {
    std::uint64_t decoded = 0;
    std::uint64_t cached = 0;
  };
  static Counters thread_counters();

  // One frame of a thread's previous capture (python_frames.cpp).
  struct Link;

 private:
  struct ThreadCache;
  std::uintptr_t word_for(ThreadCache& cache, const char* code, std::uint64_t offset);
  [[gnu::noinline]] std::uintptr_t relink(ThreadCache& cache, std::size_t index, const char* frame, const char* code,
                                          std::uint64_t instruction, std::uint64_t offset);
  std::uint32_t intern_function(std::string name, std::string file);

  template <const Layout* Fixed>
  void capture_with(PythonStack& out);
  using Walker = void (PythonFrames::*)(PythonStack&);
  static Walker walker_for(const Layout& layout);

  const Interpreter interpreter_;
  const std::uint64_t serial_;  // unique in the process (ThreadCache::owner)
  const Walker walker_;
  std::mutex names_mutex_;
  std::vector<FunctionName> names_;  // id - 1
  std::unordered_map<std::string, std::uint32_t> ids_;
};

// The merged stack: Python runs placed just inside (innermost of) the
// native frames of the evaluation-loop calls that run them. Where the
// native walk says where each return address lay (`slots`, from
// frame_walker::capture_with_slots) and a run's entry frame address is
// known (3.12+), the run goes inside the native frame whose stack range
// holds that entry frame: right whatever the loop's functions are called
// (3.14's tail-calling interpreter runs Python in unnamed local functions,
// a .cold part holds some calls). Otherwise the innermost run goes at the
// innermost frame in [_PyEval_EvalFrameDefault, its end), and so on
// outwards. Runs left over (the native stack was cut at its depth, or a
// loop frame was not recognised) go after the last native frame, in
// order, so no Python frame is lost or repeated. Returns the count written
// to `out` (at most `capacity`; the outermost are cut).
template <typename IsEval>
std::size_t merge_stacks(std::span<const std::uintptr_t> native, const std::uintptr_t* slots,
                         const PythonStack& python, IsEval&& is_eval, std::uintptr_t* out, std::size_t capacity) {
  std::size_t n = 0;
  std::size_t run = 0;
  std::size_t next_word = 0;
  auto put_run = [&] {
    for (; next_word < python.run_end[run] && n < capacity; ++next_word) out[n++] = python.words[next_word];
    next_word = python.run_end[run];
    ++run;
  };
  for (std::size_t k = 0; k < native.size(); ++k) {
    if (slots != nullptr && run < python.runs && python.run_anchor[run] != 0) {
      // Frame k spans the stack from just above slots[k] to slots[k + 1];
      // the last frame's extent is unknown, so its runs go after it.
      while (k + 1 < native.size() && run < python.runs && python.run_anchor[run] != 0 &&
             python.run_anchor[run] > slots[k] && python.run_anchor[run] < slots[k + 1]) {
        put_run();
      }
    } else if (run < python.runs && is_eval(native[k])) {
      put_run();
    }
    if (n < capacity) out[n++] = native[k];
  }
  while (run < python.runs) put_run();
  return n;
}

}  // namespace cumemtrace::preload::python
