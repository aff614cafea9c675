// Helpers shared by every test binary: a scratch directory, small file I/O,
// and running a program as a separate process with its output captured.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cumemtrace::testing {

// A fresh directory under $TMPDIR, removed with its contents at the end.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& dir() const { return dir_; }
  std::string path(std::string_view name) const { return dir_ + "/" + std::string(name); }
  std::string operator/(std::string_view name) const { return path(name); }

 private:
  std::string dir_;
};

void write_file(const std::string& path, std::string_view content);
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);

// Environment changes for a child: a value sets the variable, nullopt unsets it.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct CommandResult {
  int raw_status = 0;
  bool exited = false;  // false: killed by a signal
  int exit_code = -1;   // as a shell reports it: 128+N for signal N
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] a path or a name on PATH) in `cwd` (empty: ours)
// with `env` applied to our environment, and waits for it. Output goes to
// files, not pipes, so a chatty program cannot deadlock the test.
CommandResult run_command(const std::vector<std::string>& argv, const EnvChanges& env = {},
                          const std::string& cwd = {});

// The same in two steps, for tests that signal the process meanwhile.
struct RunningCommand {
  pid_t pid = -1;
  std::string out_path;
  std::string err_path;
};
RunningCommand start_command(const std::vector<std::string>& argv, const EnvChanges& env,
                             const TempDir& scratch, const std::string& cwd = {});
CommandResult wait_command(const RunningCommand& running);

}  // namespace cumemtrace::testing
