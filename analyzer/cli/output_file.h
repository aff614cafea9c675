// Writes a command's output to stdout, or to a file atomically: into a
// temporary file beside it, renamed over it only once everything is written,
// so a failed write never leaves half a report behind.
#pragma once

#include <ext/stdio_filebuf.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace cumemtrace::cli {

// Returns an empty string on success, else one line saying what failed.
// A path that names a device or a FIFO (/dev/null, /dev/stdout) is written
// in place, never replaced; one through a symlink replaces the file it names.
std::string write_output(const std::string& path, std::string_view content);

// The same for output too large to build in memory first (timeline, export):
// written through stream() as it is produced, to standard output or to a
// temporary file beside `path` that commit() renames over it.
class StreamedOutput {
 public:
  StreamedOutput() = default;
  ~StreamedOutput();  // an output never committed is removed
  StreamedOutput(const StreamedOutput&) = delete;
  StreamedOutput& operator=(const StreamedOutput&) = delete;

  // Both return an empty string on success, else one line saying what failed.
  std::string open(const std::string& path);
  std::string commit();

  std::ostream& stream() { return *stream_; }

 private:
  std::string path_;       // empty: standard output
  std::string temp_;       // empty: written in place (stdout, a device, a FIFO)
  std::string rename_to_;  // what temp_ becomes: path_, or the file a symlink names
  std::unique_ptr<__gnu_cxx::stdio_filebuf<char>> buffer_;
  std::unique_ptr<std::ostream> stream_;
};

// Opens `path` ("" or "-": standard output), lets `write` fill it, and
// commits it. Returns "" on success, else one line saying what failed;
// exceptions from `write` leave no file behind and pass on.
std::string write_streamed(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace cumemtrace::cli

// ---- The trace files of `cumemtrace run` ----------------------------------
// The library creates them (contract/output/output_path.h, which `run` links
// too); `run` checks before the program starts that it can, and afterwards
// which ones appeared.
namespace cumemtrace::cli {

// Why the library could not create a trace from `output_template` (one
// line, naming the file), or "" if it can or if nobody can know yet (the
// directory's name holds %p or %t). Tried for real: the file the template
// names, with our pid for %p and now for %t, is created exactly as the
// library creates it (exclusively, in a directory the user controls) and
// removed at once, so nothing is left behind.
std::string trace_output_problem(const std::string& output_template);

// The files `output_template` can name, as a glob(3) pattern: %p and %t (a
// child's pid, a start time) match anything, so forked and exec'd
// children's traces (and exec's numbered names, t.4242.1.jsonl) match too.
std::string trace_file_pattern(const std::string& output_template);

// The regular files matching `pattern`, each with what tells a new or
// rewritten file from the one seen before (device, inode, mtime, size).
using TraceFileStamps = std::map<std::string, std::tuple<dev_t, ino_t, std::int64_t, std::int64_t, off_t>>;
TraceFileStamps trace_file_stamps(const std::string& pattern);

// The files of `after` that are not in `before`, or differ from it, sorted.
std::vector<std::string> changed_trace_files(const TraceFileStamps& before, const TraceFileStamps& after);

}  // namespace cumemtrace::cli
