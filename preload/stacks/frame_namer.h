// Names the frames of a stack when the stack is first seen: the module that
// holds each return address and its offset there (for offline symbolisation
// with addr2line or the analyzer), and the demangled function name when the
// process can tell. Runs only for new stacks, never on the hot path.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "text/line_buffer.h"
#include "stacks/perf_map.h"

namespace cumemtrace::preload {

struct NamedFrame {
  std::uintptr_t ip = 0;                 // the return address, as captured
  std::optional<std::string> fn;         // demangled; absent when unknown
  std::optional<std::string> module;     // path of the object file, or of the perf map
  std::optional<std::uintptr_t> off;     // ip − the module's load bias (or the JIT range's start)
};

// Looks `address` (inside a function, not a return address) up in the full
// symbol table of its object file, for functions dladdr cannot see (those
// not exported: static functions, executables not linked with -rdynamic).
// Writes the mangled name of the nearest symbol at or below `address` and
// that symbol's address; false when unknown.
using SymbolTableLookup = bool (*)(std::uintptr_t address, std::string& mangled, std::uintptr_t& symbol_start);

class FrameNamer {
 public:
  // `perf_map_path` empty: /tmp/perf-<our pid>.map.
  explicit FrameNamer(SymbolTableLookup symbol_table = nullptr, std::string perf_map_path = {});

  NamedFrame name(std::uintptr_t ip);

  // {"ip":"0x…","fn":"…","module":"…","off":"0x…"}, null for what is unknown.
  static void append_json(contract::LineBuffer& out, const NamedFrame& frame);

 private:
  NamedFrame name_uncached(std::uintptr_t ip, bool& in_object_file);

  const SymbolTableLookup symbol_table_;
  const std::string executable_;
  // Our lock is never held while calling into the dynamic loader (dladdr)
  // or libunwind: a thread inside dlopen, holding the loader's lock, may be
  // recording an allocation from a library constructor and want ours.
  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, NamedFrame> by_ip_;  // frames inside object files
  PerfMap perf_map_;
};

}  // namespace cumemtrace::preload
