#include "stacks/python_layout.h"

#include <cstddef>
#include <cstring>

namespace cumemtrace::preload::python {
namespace {

// The head of _Py_DebugOffsets in 3.13 (Include/internal/pycore_runtime.h,
// 3.13.0) and 3.14 (Include/internal/pycore_debug_offsets.h, which adds
// interpreter_state.threads_main, code_object_generation, tlbc_generation and
// interpreter_frame.stackpointer, tlbc_index). Every member after the cookie
// is a uint64_t; only the structs up to code_object are mirrored. The
// static_asserts hold the offsets offsetof gives against the 3.13.0 header.
struct DebugOffsetsHead313 {
  char cookie[8];
  std::uint64_t version;
  std::uint64_t free_threaded;
  std::uint64_t runtime_state[3];
  std::uint64_t interpreter_state[13];
  struct {
    std::uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
  } thread_state;
  struct {
    std::uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    std::uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct {
    std::uint64_t size, ob_type;
  } pyobject;
  std::uint64_t type_object[4], tuple_object[3], list_object[3], dict_object[3], float_object[2],
      long_object[3], bytes_object[3];
  struct {
    std::uint64_t size, state, length, asciiobject_size;
  } unicode_object;
};
static_assert(offsetof(DebugOffsetsHead313, thread_state.current_frame) == 184);
static_assert(offsetof(DebugOffsetsHead313, interpreter_frame.previous) == 232);
static_assert(offsetof(DebugOffsetsHead313, interpreter_frame.owner) == 264);
static_assert(offsetof(DebugOffsetsHead313, code_object.filename) == 280);
static_assert(offsetof(DebugOffsetsHead313, code_object.co_code_adaptive) == 344);

struct DebugOffsetsHead314 {
  char cookie[8];
  std::uint64_t version;
  std::uint64_t free_threaded;
  std::uint64_t runtime_state[3];
  std::uint64_t interpreter_state[16];
  struct {
    std::uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
  } thread_state;
  struct {
    std::uint64_t size, previous, executable, instr_ptr, localsplus, owner, stackpointer, tlbc_index;
  } interpreter_frame;
  struct {
    std::uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
};

template <typename Head>
void copy_common(const Head& h, DebugOffsets& out) {
  out.thread_state_current_frame = h.thread_state.current_frame;
  out.frame_size = h.interpreter_frame.size;
  out.frame_previous = h.interpreter_frame.previous;
  out.frame_executable = h.interpreter_frame.executable;
  out.frame_instr_ptr = h.interpreter_frame.instr_ptr;
  out.frame_owner = h.interpreter_frame.owner;
  out.code_size = h.code_object.size;
  out.code_filename = h.code_object.filename;
  out.code_name = h.code_object.name;
  out.code_qualname = h.code_object.qualname;
  out.code_linetable = h.code_object.linetable;
  out.code_firstlineno = h.code_object.firstlineno;
  out.code_adaptive = h.code_object.co_code_adaptive;
}

// An offset of a pointer-sized (or int) field inside a struct of `size`
// bytes, read from the interpreter: fits our 32-bit table, and the field fits.
bool inside(std::uint64_t offset, std::uint64_t width, std::uint64_t size) {
  return size > 0 && size < (1u << 20) && offset + width <= size;
}

}  // namespace

std::optional<Layout> layout_from_headers(unsigned minor) {
  switch (minor) {
    case 9: return kLayout39;
    case 10: return kLayout310;
    case 11: return kLayout311;
    case 12: return kLayout312;
    default: return std::nullopt;
  }
}

std::optional<DebugOffsets> read_debug_offsets(const void* runtime) {
  if (runtime == nullptr) return std::nullopt;
  char cookie[8];
  std::memcpy(cookie, runtime, sizeof cookie);
  if (std::memcmp(cookie, "xdebugpy", 8) != 0) return std::nullopt;
  DebugOffsets out;
  std::uint64_t free_threaded = 0;
  std::memcpy(&out.version, static_cast<const char*>(runtime) + 8, 8);
  std::memcpy(&free_threaded, static_cast<const char*>(runtime) + 16, 8);
  out.free_threaded = free_threaded != 0;
  const unsigned minor = static_cast<unsigned>(out.version >> 16 & 0xff);
  if (out.version >> 24 != 3) return std::nullopt;
  if (minor == 13) {
    DebugOffsetsHead313 head;
    std::memcpy(&head, runtime, sizeof head);
    copy_common(head, out);
    out.unicode_ascii_size = head.unicode_object.asciiobject_size;
  } else if (minor == 14) {
    DebugOffsetsHead314 head;
    std::memcpy(&head, runtime, sizeof head);
    copy_common(head, out);
    out.unicode_ascii_size = 40;  // sizeof(PyASCIIObject) since 3.12; its unicode_object entry is not mirrored
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<Layout> layout_from_debug_offsets(const DebugOffsets& d, std::string& problem) {
  const unsigned minor = static_cast<unsigned>(d.version >> 16 & 0xff);
  if (d.free_threaded) {
    problem = "a free-threaded build (its objects and frames are laid out differently)";
    return std::nullopt;
  }
  if (!inside(d.frame_previous, 8, d.frame_size) || !inside(d.frame_executable, 8, d.frame_size) ||
      !inside(d.frame_instr_ptr, 8, d.frame_size) || !inside(d.frame_owner, 1, d.frame_size) ||
      !inside(d.code_filename, 8, d.code_size) || !inside(d.code_name, 8, d.code_size) ||
      !inside(d.code_qualname, 8, d.code_size) || !inside(d.code_linetable, 8, d.code_size) ||
      !inside(d.code_firstlineno, 4, d.code_size) || d.code_adaptive > d.code_size ||
      d.thread_state_current_frame > (1u << 20) || d.unicode_ascii_size < 32 || d.unicode_ascii_size > 64) {
    problem = "its published struct offsets (_Py_DebugOffsets) are not the shape this library reads";
    return std::nullopt;
  }
  Layout l;
  l.minor = minor;
  l.tstate_frame = static_cast<std::uint32_t>(d.thread_state_current_frame);
  l.frame_previous = static_cast<std::uint32_t>(d.frame_previous);
  l.frame_code = static_cast<std::uint32_t>(d.frame_executable);
  l.code_is_stack_ref = minor >= 14;  // f_executable is a _PyStackRef from 3.14 (pycore_stackref.h)
  l.frame_instruction = static_cast<std::uint32_t>(d.frame_instr_ptr);
  l.instruction = InstructionKind::instruction_pointer;
  l.frame_owner = static_cast<std::uint32_t>(d.frame_owner);
  l.runs = RunKind::entry_shim;
  // The owner enum is not published: FRAME_OWNED_BY_CSTACK = 3 in 3.13
  // (pycore_frame.h); 3.14 inserts FRAME_OWNED_BY_INTERPRETER = 3 for the
  // entry frame and moves CSTACK to 4 (pycore_interpframe_structs.h,
  // python/cpython#129078), and tests `owner >= FRAME_OWNED_BY_INTERPRETER`.
  l.shim_owner = 3;
  l.code_firstlineno = static_cast<std::uint32_t>(d.code_firstlineno);
  l.code_filename = static_cast<std::uint32_t>(d.code_filename);
  l.code_name = static_cast<std::uint32_t>(d.code_name);
  l.code_qualname = static_cast<std::uint32_t>(d.code_qualname);
  l.code_linetable = static_cast<std::uint32_t>(d.code_linetable);
  l.line_table = LineTableKind::locations_311;
  l.code_adaptive = static_cast<std::uint32_t>(d.code_adaptive);
  // Not published: _co_firsttraceable sits 16 bytes before co_code_adaptive
  // in 3.12–3.14 (176/192, 184/200, 192/208; Include/cpython/code.h).
  l.code_firsttraceable = l.code_adaptive - 16;
  l.unicode_ascii_data = static_cast<std::uint32_t>(d.unicode_ascii_size);
  // PyCompactUnicodeObject adds utf8_length and utf8 (16 bytes) on 3.12+.
  l.unicode_compact_data = l.unicode_ascii_data + 16;
  return l;
}

}  // namespace cumemtrace::preload::python
