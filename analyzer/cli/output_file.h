// Writes a command's output to stdout, or to a file atomically: into a
// temporary file beside it, renamed over it only once everything is written,
// so a failed write never leaves half a report behind.
#pragma once

#include <ext/stdio_filebuf.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace cumemtrace::cli {

// Returns an empty string on success, else one line saying what failed.
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
  std::string path_;  // empty: standard output
  std::string temp_;
  std::unique_ptr<__gnu_cxx::stdio_filebuf<char>> buffer_;
  std::unique_ptr<std::ostream> stream_;
};

// Opens `path` ("" or "-": standard output), lets `write` fill it, and
// commits it. Returns "" on success, else one line saying what failed;
// exceptions from `write` leave no file behind and pass on.
std::string write_streamed(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace cumemtrace::cli
