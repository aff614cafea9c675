// The symbol map a JIT writes for perf, /tmp/perf-PID.map: one
// "START SIZE NAME" line per piece of generated code, START and SIZE in hex
// without 0x. CPython ≥ 3.12 writes one while its perf trampolines are on
// (PYTHONPERFSUPPORT=1 or -X perf), naming each Python function's trampoline
// "py::qualname:/path/file.py" — so native stacks through the interpreter
// show which Python functions they passed through.
//
// The file grows while the program runs. A lookup that misses reads only the
// complete lines appended since the last read; nothing is re-read, and a
// file that has not grown costs one fstat.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace cumemtrace::preload {

class PerfMap {
 public:
  struct Entry {
    std::uintptr_t start = 0;
    std::uintptr_t size = 0;
    std::string name;
  };

  explicit PerfMap(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  // The entry whose range holds `address`, reading newly appended lines when
  // no known range does. Not thread-safe: the caller serialises lookups.
  std::optional<Entry> find(std::uintptr_t address);

  // Lines parsed so far (for tests).
  std::size_t size() const { return ranges_.size(); }

 private:
  struct Range {
    std::uintptr_t end = 0;
    std::string name;
  };

  const Range* known(std::uintptr_t address, std::uintptr_t* start) const;
  void read_appended_lines();
  void parse_line(std::string_view line);

  const std::string path_;
  std::map<std::uintptr_t, Range> ranges_;  // by start; a later line for a start replaces it
  off_t consumed_ = 0;                      // bytes of complete lines parsed
  dev_t device_ = 0;                        // identity of the file parsed, so a
  ino_t inode_ = 0;                         // replaced file is read from the start
};

}  // namespace cumemtrace::preload
