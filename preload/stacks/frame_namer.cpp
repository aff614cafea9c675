#include "stacks/frame_namer.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include "cumemtrace/demangle.h"
#include "common/process_facts.h"

namespace cumemtrace::preload {

namespace {

// Whether the symbol that starts at `symbol_start` spans `address`, where
// its dynamic symbol table entry gives a size. A symbol outside .dynsym (from
// .symtab) or of size 0 (assembly without .size) is taken to hold it.
bool symbol_may_hold(std::uintptr_t symbol_start, std::uintptr_t address) {
  Dl_info info{};
  void* entry = nullptr;  // RTLD_DL_SYMENT: a const ElfW(Sym)*
  if (::dladdr1(reinterpret_cast<void*>(symbol_start), &info, &entry, RTLD_DL_SYMENT) == 0 || entry == nullptr ||
      reinterpret_cast<std::uintptr_t>(info.dli_saddr) != symbol_start) {
    return true;
  }
  const auto* symbol = static_cast<const ElfW(Sym)*>(entry);
  return symbol->st_size == 0 || address - symbol_start < symbol->st_size;
}

}  // namespace

FrameNamer::FrameNamer(SymbolTableLookup symbol_table, std::string perf_map_path)
    : symbol_table_(symbol_table),
      executable_(executable_path()),
      perf_map_(perf_map_path.empty() ? "/tmp/perf-" + std::to_string(::getpid()) + ".map"
                                      : std::move(perf_map_path)) {}

NamedFrame FrameNamer::name(std::uintptr_t ip) {
  {
    std::scoped_lock lock(mutex_);
    if (auto it = by_ip_.find(ip); it != by_ip_.end()) return it->second;
  }
  bool in_object_file = false;
  NamedFrame frame = name_uncached(ip, in_object_file);
  // Only object files' frames are remembered: generated code may be replaced,
  // and an unnamed JIT frame may be named by lines the JIT writes later.
  if (in_object_file) {
    std::scoped_lock lock(mutex_);
    by_ip_.emplace(ip, frame);
  }
  return frame;
}

NamedFrame FrameNamer::name_uncached(std::uintptr_t ip, bool& in_object_file) {
  NamedFrame frame;
  frame.ip = ip;
  // A return address is the instruction after the call; the call itself, one
  // byte earlier, is in the calling function even when the call is the last
  // instruction of a function that never returns.
  const std::uintptr_t inside = ip > 0 ? ip - 1 : ip;
  Dl_info info{};
  link_map* object = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(inside), &info, reinterpret_cast<void**>(&object),
                RTLD_DL_LINKMAP) != 0 &&
      object != nullptr) {
    // l_addr is the load bias, so `off` is the address the object file itself
    // uses (what addr2line and the symbol tables expect), PIE or not.
    in_object_file = true;
    frame.module = object->l_name && *object->l_name ? std::string(object->l_name) : executable_;
    frame.off = ip - object->l_addr;
    // glibc's dladdr names only a symbol that spans the address
    // (DL_ADDR_SYM_MATCH checks st_size). The full symbol-table lookup
    // (libunwind's unw_get_proc_name, 1.6.2) takes the nearest symbol below
    // it, however far: in a library whose own functions are not exported and
    // whose .symtab is stripped (cuBLAS, cuDNN), every internal frame took
    // the name of an unrelated export. Such a name is dropped; `fn` stays
    // null and the report shows module+offset (`report --symbolize` names
    // it where the file or its debug file has the symbol).
    std::string mangled;
    std::uintptr_t symbol_start = 0;
    if (info.dli_sname != nullptr) {
      frame.fn = demangle(info.dli_sname);
    } else if (symbol_table_ && symbol_table_(inside, mangled, symbol_start) && symbol_may_hold(symbol_start, inside)) {
      frame.fn = demangle(mangled.c_str());
    }
    return frame;
  }
  // Not inside any object file: generated code. A JIT that writes a perf map
  // (CPython's trampolines) names it there.
  std::scoped_lock lock(mutex_);
  if (auto entry = perf_map_.find(inside)) {
    frame.fn = std::move(entry->name);
    frame.module = perf_map_.path();
    frame.off = ip - entry->start;
  }
  return frame;
}

void FrameNamer::append_json(contract::LineBuffer& out, const NamedFrame& frame) {
  out.raw("{\"ip\":").hex(frame.ip);
  out.key("fn");
  if (frame.fn) out.str(*frame.fn); else out.raw("null");
  out.key("module");
  if (frame.module) out.str(*frame.module); else out.raw("null");
  out.key("off");
  if (frame.off) out.hex(*frame.off); else out.raw("null");
  out.ch('}');
}

}  // namespace cumemtrace::preload
