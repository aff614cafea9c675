// Offline symbolisation of a trace's frames (`report --symbolize`): file and
// line from the object file's DWARF (or its separate debug file, found by
// build id or .gnu_debuglink, as gdb finds it), and the function from its
// full symbol table where the trace has no name. The preload records module
// and offset only; reading debug information belongs here, in the analyzer,
// not in the traced process.
//
// A module is read only if it is unchanged since the run: a file modified
// after the trace's start may be a rebuild whose lines no longer match, so
// its frames are left as recorded (and counted).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer {

class FrameSymbolizer {
 public:
  // False in a build without libdw (elfutils): symbolize() then does nothing.
  static bool available();

  FrameSymbolizer();
  ~FrameSymbolizer();
  FrameSymbolizer(const FrameSymbolizer&) = delete;
  FrameSymbolizer& operator=(const FrameSymbolizer&) = delete;

  // The run's start (the header's start_unix_ns); 0: unknown, no file is
  // taken as changed.
  void set_run_start(std::uint64_t unix_ns) { run_start_unix_ns_ = unix_ns; }

  // Adds file and line (and fn, where null) to a frame with a module and an
  // offset; keeps whatever the frame already has.
  void symbolize(OwnedFrame& frame);

  struct Counts {
    std::uint64_t frames_with_lines = 0;  // frames given a file and line
    std::uint64_t frames_named = 0;       // frames given a function name
    std::uint64_t modules_read = 0;
    std::uint64_t modules_missing = 0;    // not found, not readable, or not ELF
    std::uint64_t modules_changed = 0;    // modified after the run started
  };
  const Counts& counts() const { return counts_; }

 private:
  struct Module;
  Module* module_for(const std::string& path);

  std::uint64_t run_start_unix_ns_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Module>> modules_;
  Counts counts_;
};

}  // namespace cumemtrace::analyzer
