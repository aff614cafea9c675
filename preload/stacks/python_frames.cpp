#include "stacks/python_frames.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <atomic>

#include "stacks/python_code.h"

namespace cumemtrace::preload::python {
namespace {

// Names and file names longer than this (code points) are not copied.
constexpr std::size_t kMaxNameLength = 4096;

std::string base_name(const char* path) {
  if (path == nullptr) return {};
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// "3.11.7" from Py_GetVersion()'s "3.11.7 (main, …)".
std::string version_word(const char* text) {
  if (text == nullptr) return "?";
  const char* end = text;
  while (*end != '\0' && *end != ' ') ++end;
  return std::string(text, end);
}

}  // namespace

std::uint64_t version_from_text(const char* text) {
  if (text == nullptr) return 0;
  unsigned parts[3] = {0, 0, 0};
  int part = 0;
  const char* p = text;
  for (; *p != '\0' && part < 3; ++p) {
    if (*p >= '0' && *p <= '9') {
      parts[part] = parts[part] * 10 + static_cast<unsigned>(*p - '0');
      if (parts[part] > 255) return 0;
    } else if (*p == '.') {
      ++part;
    } else {
      break;
    }
  }
  if (parts[0] == 0) return 0;
  return std::uint64_t{parts[0]} << 24 | std::uint64_t{parts[1]} << 16 | std::uint64_t{parts[2]} << 8;
}

Detection detect_interpreter(SymbolLookup lookup) {
  Detection d;
  if (lookup == nullptr) return d;
  void* this_thread_state = lookup("PyGILState_GetThisThreadState");
  auto get_version = reinterpret_cast<const char* (*)()>(lookup("Py_GetVersion"));
  if (this_thread_state == nullptr || get_version == nullptr) return d;  // no Python in this process

  // Where the interpreter lives: the executable (a static build, such as
  // Debian's /usr/bin/python3.11) or a shared libpython.
  Dl_info where{};
  std::string module = "?";
  if (::dladdr(this_thread_state, &where) != 0 && where.dli_fname != nullptr) module = base_name(where.dli_fname);
  // Py_Version (3.11+) is the build's PY_VERSION_HEX; before it, the text.
  // Py_GetVersion() reformats a static buffer on each call up to 3.12: it is
  // called once, here.
  const char* version_text = get_version();
  const auto* version_hex = static_cast<const unsigned long*>(lookup("Py_Version"));
  const std::uint64_t version = version_hex != nullptr ? *version_hex : version_from_text(version_text);
  const unsigned major = static_cast<unsigned>(version >> 24);
  const unsigned minor = static_cast<unsigned>(version >> 16 & 0xff);
  const std::string named = "CPython " + version_word(version_text) + " (" + module + ")";
  d.outcome = Detection::Outcome::unsupported;
  auto refuse = [&](const std::string& why) {
    d.note = "native stacks only: " + named + " is " + why;
    return d;
  };
  if (major != 3 || minor < 9) return refuse("older than 3.9 and past its end of life");
  if (minor > 14) return refuse("newer than the versions this library reads (3.9 to 3.14)");

  std::optional<Layout> layout;
  if (minor >= 13) {
    // 3.13+ publish their offsets: _PyRuntime.debug_offsets, at offset 0
    // (Include/internal/pycore_runtime.h, 3.13).
    const auto offsets = read_debug_offsets(lookup("_PyRuntime"));
    if (!offsets) return refuse("missing its published struct offsets (_PyRuntime.debug_offsets)");
    std::string problem;
    layout = layout_from_debug_offsets(*offsets, problem);
    if (!layout) return refuse(problem);
  } else {
    // Debug builds add fields to objects and frames that the tables do not
    // have: Py_TRACE_REFS puts two pointers ahead of every object
    // (Include/object.h), and Py_REF_DEBUG (Py_DEBUG) exports the total.
    if (lookup("_Py_PrintReferences") != nullptr || lookup("_Py_RefTotal") != nullptr ||
        lookup("_Py_GetGlobalRefTotal") != nullptr) {
      return refuse("a debug build (Py_DEBUG), whose structs the tables do not describe");
    }
    layout = layout_from_headers(minor);
  }
  Interpreter& in = d.interpreter;
  in.layout = *layout;
  in.this_thread_state = reinterpret_cast<void* (*)()>(this_thread_state);
  in.is_initialized = reinterpret_cast<int (*)()>(lookup("Py_IsInitialized"));
  in.is_finalizing = reinterpret_cast<int (*)()>(lookup("Py_IsFinalizing"));
  if (in.is_finalizing == nullptr) in.is_finalizing = reinterpret_cast<int (*)()>(lookup("_Py_IsFinalizing"));
  in.code_type = lookup("PyCode_Type");
  in.unicode_type = lookup("PyUnicode_Type");
  void* eval = lookup("_PyEval_EvalFrameDefault");
  if (in.is_initialized == nullptr || in.code_type == nullptr || in.unicode_type == nullptr || eval == nullptr) {
    return refuse("missing a symbol the frame walker needs");
  }
  // The evaluation loop's extent, from its dynamic symbol's size.
  Dl_info info{};
  void* entry = nullptr;
  if (::dladdr1(eval, &info, &entry, RTLD_DL_SYMENT) != 0 && entry != nullptr) {
    in.eval_begin = reinterpret_cast<std::uintptr_t>(eval);
    in.eval_end = in.eval_begin + static_cast<const ElfW(Sym)*>(entry)->st_size;
  }
  d.outcome = Detection::Outcome::walkable;
  d.note = named;
  return d;
}

// ---- this thread's cache of code positions ---------------------------------

// The previous capture's chain, frame by frame: a training loop captures
// from the same frames at the same instructions step after step, and a
// frame whose fields all still hold what they held needs no cache probe.
struct PythonFrames::Link {
  std::uintptr_t frame = 0;
  std::uintptr_t code = 0;
  std::uint64_t instruction = 0;  // as the frame holds it (f_lasti, or the instruction pointer)
  CodeIdentity id;
  std::uintptr_t word = 0;
};

// One decoded position: a code object at an instruction, with what the code
// object held when it was decoded. A hit re-reads those fields and the
// texts' identities; a code object freed and another allocated at its
// address differ in one of them (python_code.h, TextSample), so the new
// one never gets the old one's name.
struct PythonFrames::ThreadCache {
  struct Entry {
    std::uintptr_t code = 0;  // 0: empty
    std::uint64_t offset = 0;
    CodeIdentity id;
    std::uintptr_t word = 0;
  };
  static constexpr std::size_t kEntries = 512;  // direct-mapped; 72 KiB per thread that runs Python
  // The PythonFrames whose function ids the words hold: a forked child's
  // new one starts its ids afresh, so the forking thread's cache is emptied.
  std::uint64_t owner = 0;
  Entry entries[kEntries];
  Counters counters;
  // The previous capture's chain, frame by frame (Link).
  Link chain[kMaxPythonFrames];
  std::uint16_t chain_run_end[kMaxPythonFrames];
  std::size_t chain_count = 0;
  std::size_t chain_runs = 0;
};

namespace {

thread_local PythonFrames::Counters* t_counters __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local void* t_cache __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t g_cache_key;
std::once_flag g_cache_key_once;

// Allocated on a thread's first Python capture (calloc, outside the
// interpreter's allocator), freed when the thread ends.
void* thread_cache_memory(std::size_t size) {
  if (t_cache != nullptr) [[likely]] return t_cache;
  std::call_once(g_cache_key_once, [] {
    ::pthread_key_create(&g_cache_key, [](void* memory) {
      t_cache = nullptr;
      t_counters = nullptr;
      std::free(memory);
    });
  });
  void* memory = std::calloc(1, size);
  if (memory == nullptr) return nullptr;
  t_cache = memory;
  ::pthread_setspecific(g_cache_key, memory);
  return memory;
}

std::size_t position_slot(std::uintptr_t code, std::uint64_t offset, std::size_t entries) {
  return static_cast<std::size_t>(((code >> 4) ^ (offset * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull >> 40) &
         (entries - 1);
}

}  // namespace

PythonFrames::PythonFrames(const Interpreter& interpreter)
    : interpreter_(interpreter),
      serial_([] {
        static std::atomic<std::uint64_t> last{0};
        return last.fetch_add(1, std::memory_order_relaxed) + 1;
      }()),
      walker_(walker_for(interpreter.layout)) {}

PythonFrames::Counters PythonFrames::thread_counters() {
  return t_counters != nullptr ? *t_counters : Counters{};
}

std::uint32_t PythonFrames::intern_function(std::string name, std::string file) {
  std::string key = name;
  key.push_back('\0');
  key += file;
  std::scoped_lock lock(names_mutex_);
  if (auto it = ids_.find(key); it != ids_.end()) return it->second;
  if (names_.size() >= 0x7fffffff - 1) return 0;
  names_.push_back(FunctionName{std::move(name), std::move(file)});
  const auto id = static_cast<std::uint32_t>(names_.size());
  ids_.emplace(std::move(key), id);
  return id;
}

FunctionName PythonFrames::function(std::uint32_t id) {
  std::scoped_lock lock(names_mutex_);
  if (id == 0 || id > names_.size()) return {"<unknown>", ""};
  return names_[id - 1];
}

std::uintptr_t PythonFrames::word_for(ThreadCache& cache, const char* code, std::uint64_t offset) {
  const Layout& l = interpreter_.layout;
  const auto code_address = reinterpret_cast<std::uintptr_t>(code);
  ThreadCache::Entry& e = cache.entries[position_slot(code_address, offset, ThreadCache::kEntries)];
  if (e.code == code_address && e.offset == offset && e.id.still(l, code)) [[likely]] return e.word;
  // Decode: the texts, and the line from the (immutable) line table. Not
  // PyCode_Addr2Line: with line instrumentation on (3.12+, sys.monitoring)
  // it reads data another thread holding the GIL may reallocate.
  ++cache.counters.decoded;
  const CodeIdentity id = CodeIdentity::of(l, code);
  std::string name_text;
  std::string file_text;
  if (!append_utf8(reinterpret_cast<const void*>(id.name), interpreter_.unicode_type, l, kMaxNameLength, name_text)) {
    name_text = "<unknown>";
  }
  if (!append_utf8(reinterpret_cast<const void*>(id.file), interpreter_.unicode_type, l, kMaxNameLength, file_text)) {
    file_text.clear();
  }
  int line = -1;
  if (id.linetable != 0) {
    const auto size = load<std::int64_t>(reinterpret_cast<const void*>(id.linetable), kBytesSize);
    if (size >= 0 && size < (std::int64_t{1} << 30)) {
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(id.linetable) + kBytesData;
      line = line_for(l.line_table, std::span(bytes, static_cast<std::size_t>(size)), id.first_line, offset);
    }
  }
  const std::uint32_t function = intern_function(std::move(name_text), std::move(file_text));
  e = ThreadCache::Entry{code_address, offset, id, python_word(function, line)};
  return e.word;
}

std::uintptr_t PythonFrames::relink(ThreadCache& cache, std::size_t index, const char* frame, const char* code,
                                    std::uint64_t instruction, std::uint64_t offset) {
  const std::uintptr_t word = word_for(cache, code, offset);
  cache.chain[index] = Link{reinterpret_cast<std::uintptr_t>(frame), reinterpret_cast<std::uintptr_t>(code),
                            instruction, CodeIdentity::of(interpreter_.layout, code), word};
  return word;
}

// The walkers, one compiled for each version's offsets (constants in the
// code) and one that reads them from the table (`Fixed` null): a version
// whose published offsets are not the ones we know.
template <const Layout* Fixed>
void PythonFrames::capture_with(PythonStack& out) {
  out.count = 0;
  out.runs = 0;
  const Interpreter& in = interpreter_;
  if (in.is_initialized() == 0) return;
  const Layout& l = Fixed != nullptr ? *Fixed : in.layout;
  const void* const code_type = in.code_type;
  if (in.is_finalizing != nullptr && in.is_finalizing() != 0) return;
  // This thread's own state, bound to it whether it holds the GIL or not
  // (pthread_getspecific on the gilstate key: no lock, no allocation).
  const void* tstate = in.this_thread_state();
  if (tstate == nullptr) return;
  const char* frame = nullptr;
  if (l.tstate_cframe != kAbsent) {
    const auto* cframe = load<const char*>(tstate, l.tstate_cframe);  // never NULL: &tstate->root_cframe at least
    if (cframe == nullptr) return;
    frame = load<const char*>(cframe, l.cframe_current_frame);
  } else {
    frame = load<const char*>(tstate, l.tstate_frame);
  }
  if (frame == nullptr) return;
  auto* cache = static_cast<ThreadCache*>(thread_cache_memory(sizeof(ThreadCache)));
  if (cache == nullptr) return;
  if (cache->owner != serial_) [[unlikely]] {
    std::memset(static_cast<void*>(cache->entries), 0, sizeof cache->entries);
    cache->chain_count = 0;
    cache->chain_runs = 0;
    cache->owner = serial_;
  }
  bool changed = false;
  t_counters = &cache->counters;

  auto close_run = [&out](const char* entry_frame) {
    const std::size_t begun = out.runs > 0 ? out.run_end[out.runs - 1] : 0;
    if (out.count > begun) {
      out.run_anchor[out.runs] = reinterpret_cast<std::uintptr_t>(entry_frame);
      out.run_end[out.runs++] = static_cast<std::uint16_t>(out.count);
    }
  };
  // Bounded, as CPython's own signal-safe dump (_Py_DumpTraceback) is: a
  // chain longer than this is cut, never followed into a cycle.
  for (std::size_t visited = 0; frame != nullptr && visited < 4 * kMaxPythonFrames;
       frame = load<const char*>(frame, l.frame_previous), ++visited) {
    std::uint8_t owner = 0;
    if (l.frame_owner != kAbsent) owner = load<std::uint8_t>(frame, l.frame_owner);
    if (l.runs == RunKind::entry_shim && (l.minor >= 14 ? owner >= l.shim_owner : owner == l.shim_owner)) {
      close_run(frame);  // the entry frame of one _PyEval_EvalFrameDefault call: the run inside it ends here
      continue;
    }
    auto code = load<std::uintptr_t>(frame, l.frame_code);
    if (l.code_is_stack_ref) code &= ~std::uintptr_t{3};  // a tagged _PyStackRef (pycore_stackref.h, 3.14)
    const auto* code_object = reinterpret_cast<const char*>(code);
    // 3.13+: f_executable may be another callable (PEP 523 tools); skip it.
    bool take = code != 0 && load<const void*>(code_object, kObjectType) == code_type;
    const std::uint64_t instruction = l.instruction == InstructionKind::instruction_pointer
                                          ? load<std::uintptr_t>(frame, l.frame_instruction)
                                          : static_cast<std::uint32_t>(load<int>(frame, l.frame_instruction));
    // A frame as it was at this thread's previous capture: its word again.
    if (take && out.count < cache->chain_count) [[likely]] {
      const Link& link = cache->chain[out.count];
      if (link.frame == reinterpret_cast<std::uintptr_t>(frame) && link.code == code &&
          link.instruction == instruction && link.id.still(l, code_object)) [[likely]] {
        out.words[out.count++] = link.word;
        ++cache->counters.cached;
        if (l.runs == RunKind::frame_per_call ||
            (l.runs == RunKind::is_entry_flag && load<bool>(frame, l.frame_is_entry))) {
          close_run(nullptr);
        }
        if (out.count == kMaxPythonFrames) break;
        continue;
      }
    }
    std::uint64_t offset = 0;
    if (take) {
      switch (l.instruction) {
        case InstructionKind::lasti_bytes: {
          const int lasti = load<int>(frame, l.frame_instruction);  // -1 before the first instruction
          offset = lasti > 0 ? static_cast<std::uint64_t>(lasti) : 0;
          break;
        }
        case InstructionKind::lasti_code_units: {
          const int lasti = load<int>(frame, l.frame_instruction);
          offset = lasti > 0 ? 2 * static_cast<std::uint64_t>(lasti) : 0;
          break;
        }
        case InstructionKind::instruction_pointer: {
          const std::uintptr_t first = code + l.code_adaptive;
          // A frame still making its cells, before its first RESUME, is not
          // shown by CPython either (_PyFrame_IsIncomplete).
          const auto traceable = static_cast<std::uintptr_t>(load<int>(code_object, l.code_firsttraceable));
          if (owner != l.generator_owner && instruction < first + 2 * traceable) take = false;
          offset = instruction > first ? (instruction - first) / 2 : 0;
          break;
        }
      }
    }
    if (take) {
      changed = true;
      out.words[out.count] = relink(*cache, out.count, frame, code_object, instruction, offset);
      ++out.count;
    }
    if (l.runs == RunKind::frame_per_call ||
        (l.runs == RunKind::is_entry_flag && load<bool>(frame, l.frame_is_entry))) {
      close_run(nullptr);
    }
    if (out.count == kMaxPythonFrames) break;
  }
  close_run(nullptr);
  out.unchanged = !changed && out.count == cache->chain_count && out.runs == cache->chain_runs &&
                  std::memcmp(out.run_end, cache->chain_run_end, out.runs * sizeof out.run_end[0]) == 0;
  if (!out.unchanged) {
    cache->chain_count = out.count;
    cache->chain_runs = out.runs;
    std::memcpy(cache->chain_run_end, out.run_end, out.runs * sizeof out.run_end[0]);
  }
}

PythonFrames::Walker PythonFrames::walker_for(const Layout& layout) {
  if (layout == kLayout39) return &PythonFrames::capture_with<&kLayout39>;
  if (layout == kLayout310) return &PythonFrames::capture_with<&kLayout310>;
  if (layout == kLayout311) return &PythonFrames::capture_with<&kLayout311>;
  if (layout == kLayout312) return &PythonFrames::capture_with<&kLayout312>;
  if (layout == kLayout313) return &PythonFrames::capture_with<&kLayout313>;
  if (layout == kLayout314) return &PythonFrames::capture_with<&kLayout314>;
  return &PythonFrames::capture_with<nullptr>;
}

}  // namespace cumemtrace::preload::python
