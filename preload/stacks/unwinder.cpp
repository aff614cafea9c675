#include "stacks/unwinder.h"

#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <unwind.h>

#include <algorithm>
#include <cstdint>

#include "text/diagnostics.h"
#include "stacks/frame_walker.h"

#ifndef CUMEMTRACE_LIBUNWIND_SONAME
#define CUMEMTRACE_LIBUNWIND_SONAME "libunwind.so.8"
#endif

// libunwind.h maps the unw_* names to the architecture's exported symbols
// (unw_init_local2 → _ULx86_64_init_local2): dlsym needs the expansion.
#define CUMEMTRACE_SYMBOL_NAME_(x) #x
#define CUMEMTRACE_SYMBOL_NAME(x) CUMEMTRACE_SYMBOL_NAME_(x)

namespace cumemtrace::preload {
namespace {

struct Libunwind {
  decltype(&unw_backtrace) backtrace = nullptr;
  decltype(&unw_init_local2) init_local2 = nullptr;
  decltype(&unw_set_reg) set_reg = nullptr;
  decltype(&unw_get_proc_name) get_proc_name = nullptr;
#if defined(__x86_64__)
  decltype(&unw_tdep_getcontext) getcontext = nullptr;  // a function only on x86-64
#endif
};

struct CodeRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  bool contains(std::uintptr_t ip) const { return ip >= begin && ip < end; }
};

struct Unwinding {
  Libunwind lib;
  CodeRange own;  // libcumemtrace.so's executable segments
};

template <typename Fn>
void resolve(void* handle, Fn& slot, const char* name) {
  slot = reinterpret_cast<Fn>(::dlsym(handle, name));
}

Libunwind open_libunwind() {
  Libunwind lib;
  // RTLD_LOCAL: see unwinder.h. Never closed: its per-thread caches live on.
  void* handle = ::dlopen(CUMEMTRACE_LIBUNWIND_SONAME, RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    contract::warn("cannot load %s (%s); call stacks use the slower libgcc unwinder",
         CUMEMTRACE_LIBUNWIND_SONAME, ::dlerror());
    return lib;
  }
  resolve(handle, lib.backtrace, CUMEMTRACE_SYMBOL_NAME(unw_backtrace));
  resolve(handle, lib.init_local2, CUMEMTRACE_SYMBOL_NAME(unw_init_local2));
  resolve(handle, lib.set_reg, CUMEMTRACE_SYMBOL_NAME(unw_set_reg));
  resolve(handle, lib.get_proc_name, CUMEMTRACE_SYMBOL_NAME(unw_get_proc_name));
#if defined(__x86_64__)
  resolve(handle, lib.getcontext, CUMEMTRACE_SYMBOL_NAME(unw_tdep_getcontext));
#endif
  return lib;
}

int own_range_callback(dl_phdr_info* info, std::size_t, void* data) {
  auto* search = static_cast<std::pair<std::uintptr_t, CodeRange>*>(data);
  CodeRange range{UINTPTR_MAX, 0};
  bool holds_probe = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    const std::uintptr_t begin = info->dlpi_addr + segment.p_vaddr;
    const std::uintptr_t end = begin + segment.p_memsz;
    range.begin = std::min(range.begin, begin);
    range.end = std::max(range.end, end);
    holds_probe = holds_probe || (search->first >= begin && search->first < end);
  }
  if (!holds_probe) return 0;
  search->second = range;
  return 1;  // found: stop iterating
}

CodeRange own_code_range() {
  std::pair<std::uintptr_t, CodeRange> search{reinterpret_cast<std::uintptr_t>(&own_code_range), {}};
  ::dl_iterate_phdr(&own_range_callback, &search);
  return search.second;
}

const Unwinding& unwinding() {
  static const Unwinding instance{open_libunwind(), own_code_range()};
  return instance;
}

struct GccWalk {
  void** out;
  int count;
  int max;
};

_Unwind_Reason_Code gcc_step(_Unwind_Context* context, void* arg) {
  auto* walk = static_cast<GccWalk*>(arg);
  if (walk->count >= walk->max) return _URC_END_OF_STACK;
  const _Unwind_Ptr ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_END_OF_STACK;
  walk->out[walk->count++] = reinterpret_cast<void*>(ip);
  return _URC_NO_REASON;
}

int gcc_backtrace(void** out, int max) {
  GccWalk walk{out, 0, max};
  _Unwind_Backtrace(&gcc_step, &walk);
  return walk.count;
}

bool symbol_table_lookup(std::uintptr_t address, std::string& mangled, std::uintptr_t& symbol_start) {
#if defined(__x86_64__)
  const Libunwind& lib = unwinding().lib;
  if (!lib.getcontext || !lib.init_local2 || !lib.set_reg || !lib.get_proc_name) return false;
  // A cursor on our own frame, moved to `address`: libunwind then finds the
  // object file holding it and searches its .symtab as well as .dynsym.
  // UNW_INIT_SIGNAL_FRAME makes it take the address as exact, not as a
  // return address to step back from.
  unw_context_t context;
  unw_cursor_t cursor;
  if (lib.getcontext(&context) != 0 || lib.init_local2(&cursor, &context, UNW_INIT_SIGNAL_FRAME) != 0 ||
      lib.set_reg(&cursor, UNW_REG_IP, address) != 0) {
    return false;
  }
  char name[4096];
  unw_word_t offset = 0;
  const int rc = lib.get_proc_name(&cursor, name, sizeof name, &offset);
  if (rc != 0 && rc != -UNW_ENOMEM) return false;  // ENOMEM: the name was truncated
  name[sizeof name - 1] = '\0';
  mangled = name;
  symbol_start = address - offset;
  return !mangled.empty();
#else
  (void)address;
  (void)mangled;
  (void)symbol_start;
  return false;
#endif
}

// The interpreter's symbols, wherever it lives: the executable (a static
// python3) or a libpython in the global scope. Our own dlsym entry hands
// RTLD_DEFAULT straight to glibc's (hooks/dlsym.cpp). A name not found must
// leave no error for the program's next dlerror().
void* interpreter_symbol(const char* name) {
  void* found = ::dlsym(RTLD_DEFAULT, name);
  if (found == nullptr) ::dlerror();
  return found;
}

RawBacktrace libunwind_or_libgcc() {
  const Unwinding& u = unwinding();
  return u.lib.backtrace ? u.lib.backtrace : &gcc_backtrace;
}

RawBacktraceRoute libunwind_route() {
  const Unwinding& u = unwinding();
  return {libunwind_or_libgcc(), u.own.begin, u.own.end};
}

// The CFI walker, with libunwind behind it for the stacks it cannot walk.
RawBacktraceRoute cfi_walker_route() {
  const Unwinding& u = unwinding();
  if (!frame_walker::available()) return libunwind_route();  // glibc < 2.35, or not x86-64
  frame_walker::set_fallback(libunwind_or_libgcc());
  return {&frame_walker::backtrace, u.own.begin, u.own.end, &frame_walker::capture, &frame_walker::capture_with_slots};
}

}  // namespace

StackPlatform native_stack_platform(contract::Config::Unwinder unwinder, contract::Config::Python python) {
  using contract::Config;
  return StackPlatform{.symbol_table = &symbol_table_lookup,
                       .raw_backtrace = unwinder == Config::Unwinder::cfi ? &cfi_walker_route : &libunwind_route,
                       .python_symbols = python == Config::Python::automatic ? &interpreter_symbol : nullptr};
}

}  // namespace cumemtrace::preload
