// Helpers shared by the analyzer's unit tests: temporary files, hand-written
// trace lines, and running the built `cumemtrace` binary.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cumemtrace::analyzer::testing {

// A fresh directory, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& dir() const { return dir_; }
  std::string path(std::string_view name) const { return dir_ + "/" + std::string(name); }

 private:
  std::string dir_;
};

void write_file(const std::string& path, std::string_view content);
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);

// Each line followed by '\n'.
std::string join_lines(const std::vector<std::string>& lines);
std::string header_line(int version = 1);
std::string alloc_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev = 0, int stack = 0);
std::string free_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev = 0);
std::string end_line(std::uint64_t t);

// Environment changes for a child: a value sets the variable, nullopt unsets it.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct CommandResult {
  int raw_status = 0;
  bool exited = false;  // false: killed by a signal
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] a path or a name on PATH) and waits for it.
CommandResult run_command(const std::vector<std::string>& argv, const EnvChanges& env = {});

// The same, in two steps, for tests that signal the process meanwhile.
struct RunningCommand {
  pid_t pid = -1;
  std::string out_path;
  std::string err_path;
};
RunningCommand start_command(const std::vector<std::string>& argv, const EnvChanges& env,
                             const TempDir& scratch);
CommandResult wait_command(const RunningCommand& running);

// The built `cumemtrace` and the empty libraries it may preload in tests.
std::string cli_path();
std::string empty_preload(int which = 1);

}  // namespace cumemtrace::analyzer::testing
