// Where CPython keeps what a Python frame needs, per minor version (x86-64,
// release builds with the GIL): the thread state's innermost frame, a
// frame's links, its code object and instruction, and the code object's
// names and line table. The frame walker (python_frames.h) reads raw memory
// through these offsets only; it never calls the interpreter.
//
// 3.9–3.12 have no published offsets: each table below is taken from that
// release's own headers (cited beside it) and was checked with offsetof
// against pyenv's installs of 3.9.18, 3.10.13, 3.11.7 and 3.12.1 (internal
// headers included). 3.13 and 3.14 publish theirs for debuggers and
// profilers (_Py_DebugOffsets, the first member of _PyRuntime); they are
// read from the running interpreter (python_debug_offsets.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cumemtrace::preload::python {

// How a frame says which instruction it is at.
enum class InstructionKind : std::uint8_t {
  lasti_bytes,        // 3.9: int f_lasti, a byte offset into co_code
  lasti_code_units,   // 3.10: int f_lasti, in 2-byte code units
  instruction_pointer // 3.11+: a pointer into co_code_adaptive
};

// How the code object maps an instruction to a line.
enum class LineTableKind : std::uint8_t {
  lnotab_39,       // co_lnotab (Objects/lnotab_notes.txt, 3.9)
  linetable_310,   // co_linetable, (bytes, line delta) pairs (3.10)
  locations_311,   // co_linetable, the location table (Objects/locations.md, 3.11+)
};

// Which frames of the chain are not Python code (the interpreter's own
// entry frames) and where one C-level evaluation call's run of frames ends.
enum class RunKind : std::uint8_t {
  frame_per_call,  // 3.9/3.10: every frame is run by its own _PyEval_EvalFrameDefault call
  is_entry_flag,   // 3.11: a run ends with (and includes) the frame whose is_entry is set
  entry_shim,      // 3.12+: each evaluation call pushes an entry frame (owner >= shim_owner) ahead of its run
};

constexpr std::uint32_t kAbsent = UINT32_MAX;

struct Layout {
  unsigned minor = 0;  // 9 … 14

  // Thread state -> innermost frame: tstate->frame (3.9/3.10),
  // tstate->cframe->current_frame (3.11/3.12), tstate->current_frame (3.13+).
  std::uint32_t tstate_frame = kAbsent;   // the frame pointer itself, when the tstate holds it
  std::uint32_t tstate_cframe = kAbsent;  // 3.11/3.12: the _PyCFrame pointer
  std::uint32_t cframe_current_frame = kAbsent;

  std::uint32_t frame_previous = 0;
  std::uint32_t frame_code = 0;       // f_code, or f_executable (3.13+)
  bool code_is_stack_ref = false;     // 3.14: f_executable is a _PyStackRef (tag bits in the low 2)
  std::uint32_t frame_instruction = 0;
  InstructionKind instruction = InstructionKind::lasti_bytes;
  std::uint32_t frame_owner = kAbsent;     // 3.11+: a char
  std::uint32_t frame_is_entry = kAbsent;  // 3.11: a bool
  RunKind runs = RunKind::frame_per_call;
  std::uint8_t generator_owner = 1;   // FRAME_OWNED_BY_GENERATOR, 3.11+
  std::uint8_t shim_owner = 3;        // 3.12/3.13: FRAME_OWNED_BY_CSTACK; 3.14: FRAME_OWNED_BY_INTERPRETER (and up)

  std::uint32_t code_firstlineno = 0;  // int
  std::uint32_t code_filename = 0;
  std::uint32_t code_name = 0;
  std::uint32_t code_qualname = kAbsent;  // 3.11+
  std::uint32_t code_linetable = 0;
  LineTableKind line_table = LineTableKind::lnotab_39;
  std::uint32_t code_adaptive = kAbsent;        // 3.11+: co_code_adaptive, inline in the code object
  std::uint32_t code_firsttraceable = kAbsent;  // 3.11+: int _co_firsttraceable

  // str: the compact ASCII data follows PyASCIIObject; compact non-ASCII data
  // follows PyCompactUnicodeObject (Include/cpython/unicodeobject.h).
  std::uint32_t unicode_ascii_data = 48;
  std::uint32_t unicode_compact_data = 72;

  bool operator==(const Layout&) const = default;
};

// Offsets every version shares (Include/object.h, Include/cpython/bytesobject.h,
// Include/cpython/unicodeobject.h of 3.9–3.14, GIL builds).
constexpr std::uint32_t kObjectType = 8;       // ob_type
constexpr std::uint32_t kBytesSize = 16;       // ob_size
constexpr std::uint32_t kBytesData = 32;       // ob_sval
constexpr std::uint32_t kUnicodeLength = 16;   // length, in code points
constexpr std::uint32_t kUnicodeHash = 24;     // hash, -1 until computed
constexpr std::uint32_t kUnicodeState = 32;    // the state bit field

namespace tables {
// 3.9: struct _ts (Include/cpython/pystate.h: frame @24), struct _frame
// (Include/cpython/frameobject.h: f_back @24, f_code @32, int f_lasti @104,
// in bytes), PyCodeObject (Include/cpython/code.h: co_firstlineno @40,
// co_filename @104, co_name @112, co_lnotab @120). Release 3.9.18.
constexpr Layout layout_39() {
  Layout l;
  l.minor = 9;
  l.tstate_frame = 24;
  l.frame_previous = 24;
  l.frame_code = 32;
  l.frame_instruction = 104;
  l.instruction = InstructionKind::lasti_bytes;
  l.runs = RunKind::frame_per_call;
  l.code_firstlineno = 40;
  l.code_filename = 104;
  l.code_name = 112;
  l.code_linetable = 120;
  l.line_table = LineTableKind::lnotab_39;
  return l;
}

// 3.10: as 3.9, but f_lasti @96 counts 2-byte code units, and co_linetable
// @120 replaces co_lnotab (same headers, release 3.10.13).
constexpr Layout layout_310() {
  Layout l = layout_39();
  l.minor = 10;
  l.frame_instruction = 96;
  l.instruction = InstructionKind::lasti_code_units;
  l.line_table = LineTableKind::linetable_310;
  return l;
}

// 3.11: tstate->cframe @56 (Include/cpython/pystate.h), _PyCFrame.current_frame
// @8; _PyInterpreterFrame (Include/internal/pycore_frame.h): f_code @32,
// previous @48, prev_instr @56, bool is_entry @68, char owner @69;
// PyCodeObject (Include/cpython/code.h, _PyCode_DEF): co_firstlineno @72,
// co_filename @112, co_name @120, co_qualname @128, co_linetable @136,
// _co_firsttraceable @168, co_code_adaptive @184. Release 3.11.7 (3.11.2
// identical: Debian's /usr/bin/python3.11).
constexpr Layout layout_311() {
  Layout l;
  l.minor = 11;
  l.tstate_cframe = 56;
  l.cframe_current_frame = 8;
  l.frame_previous = 48;
  l.frame_code = 32;
  l.frame_instruction = 56;
  l.instruction = InstructionKind::instruction_pointer;
  l.frame_owner = 69;
  l.frame_is_entry = 68;
  l.runs = RunKind::is_entry_flag;
  l.code_firstlineno = 72;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.line_table = LineTableKind::locations_311;
  l.code_firsttraceable = 168;
  l.code_adaptive = 184;
  return l;
}

// 3.12: _PyCFrame lost use_tracing (current_frame @0); _PyInterpreterFrame:
// f_code @0, previous @8, prev_instr @56, owner @70, no is_entry (each
// evaluation call pushes an entry frame owned by FRAME_OWNED_BY_CSTACK = 3,
// gh-96421); PyCodeObject: co_firstlineno @68, _co_firsttraceable @176,
// co_code_adaptive @192; PyASCIIObject lost wstr (sizeof 40, compact 56,
// Include/cpython/unicodeobject.h). Release 3.12.1.
constexpr Layout layout_312() {
  Layout l = layout_311();
  l.minor = 12;
  l.cframe_current_frame = 0;
  l.frame_previous = 8;
  l.frame_code = 0;
  l.frame_owner = 70;
  l.frame_is_entry = kAbsent;
  l.runs = RunKind::entry_shim;
  l.shim_owner = 3;
  l.code_firstlineno = 68;
  l.code_firsttraceable = 176;
  l.code_adaptive = 192;
  l.unicode_ascii_data = 40;
  l.unicode_compact_data = 56;
  return l;
}

// What 3.13.0 and 3.14 publish (python_debug_offsets: current_frame 72;
// frame previous 8, f_executable 0, instr_ptr 56, owner 70 / 74; code
// co_firstlineno 68, co_filename 112, co_name 120, co_qualname 128,
// co_linetable 136, co_code_adaptive 200 / 208, offsetof on 3.13.0 and
// Debian's 3.14.10 headers). Only used to pick the walker compiled for
// these offsets when the running interpreter publishes exactly them.
constexpr Layout layout_313() {
  Layout l = layout_312();
  l.minor = 13;
  l.tstate_cframe = kAbsent;
  l.cframe_current_frame = kAbsent;
  l.tstate_frame = 72;
  l.frame_previous = 8;
  l.frame_code = 0;
  l.frame_owner = 70;
  l.code_adaptive = 200;
  l.code_firsttraceable = 184;
  return l;
}
constexpr Layout layout_314() {
  Layout l = layout_313();
  l.minor = 14;
  l.code_is_stack_ref = true;
  l.frame_owner = 74;
  l.code_adaptive = 208;
  l.code_firsttraceable = 192;
  return l;
}
}  // namespace tables

inline constexpr Layout kLayout39 = tables::layout_39();
inline constexpr Layout kLayout310 = tables::layout_310();
inline constexpr Layout kLayout311 = tables::layout_311();
inline constexpr Layout kLayout312 = tables::layout_312();
inline constexpr Layout kLayout313 = tables::layout_313();
inline constexpr Layout kLayout314 = tables::layout_314();

// The table for 3.9–3.12 (nullopt for any other minor version).
std::optional<Layout> layout_from_headers(unsigned minor);

// The subset of _Py_DebugOffsets the walker needs, as the running
// interpreter publishes it (3.13+).
struct DebugOffsets {
  std::uint64_t version = 0;  // PY_VERSION_HEX
  bool free_threaded = false;
  std::uint64_t thread_state_current_frame = 0;
  std::uint64_t frame_size = 0;
  std::uint64_t frame_previous = 0;
  std::uint64_t frame_executable = 0;
  std::uint64_t frame_instr_ptr = 0;
  std::uint64_t frame_owner = 0;
  std::uint64_t code_size = 0;
  std::uint64_t code_filename = 0;
  std::uint64_t code_name = 0;
  std::uint64_t code_qualname = 0;
  std::uint64_t code_linetable = 0;
  std::uint64_t code_firstlineno = 0;
  std::uint64_t code_adaptive = 0;
  std::uint64_t unicode_ascii_size = 0;  // sizeof(PyASCIIObject)
};

// Reads the offsets at `runtime` (the address of _PyRuntime), checking the
// cookie and that the minor version is one whose struct layout we know
// (3.13, 3.14); nullopt otherwise.
std::optional<DebugOffsets> read_debug_offsets(const void* runtime);

// The table for 3.13/3.14 from published offsets, after checking that each
// lies inside the struct it names; `problem` says why not otherwise.
std::optional<Layout> layout_from_debug_offsets(const DebugOffsets& offsets, std::string& problem);

}  // namespace cumemtrace::preload::python
