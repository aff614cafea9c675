#include "test_support.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cumemtrace::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "cumemtrace-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  // A test may have made it read-only to provoke write errors.
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, ignored);
  std::filesystem::remove_all(dir_, ignored);
}

void write_file(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

RunningCommand start_command(const std::vector<std::string>& argv, const EnvChanges& env,
                             const TempDir& scratch, const std::string& cwd) {
  static int counter = 0;
  RunningCommand running;
  running.out_path = scratch.path("cmd" + std::to_string(counter) + ".out");
  running.err_path = scratch.path("cmd" + std::to_string(counter++) + ".err");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  running.pid = ::fork();
  if (running.pid < 0) throw std::runtime_error("fork failed");
  if (running.pid == 0) {
    // The test binaries are single-threaded, so setenv after fork is safe.
    for (const auto& [name, value] : env) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
    const int out = ::open(running.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(running.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return running;
}

CommandResult wait_command(const RunningCommand& running) {
  CommandResult result;
  while (::waitpid(running.pid, &result.raw_status, 0) < 0 && errno == EINTR) {
  }
  result.exited = WIFEXITED(result.raw_status);
  result.exit_code = result.exited ? WEXITSTATUS(result.raw_status) : 128 + WTERMSIG(result.raw_status);
  result.out = read_file(running.out_path);
  result.err = read_file(running.err_path);
  return result;
}

CommandResult run_command(const std::vector<std::string>& argv, const EnvChanges& env,
                          const std::string& cwd) {
  TempDir scratch;
  return wait_command(start_command(argv, env, scratch, cwd));
}

}  // namespace cumemtrace::testing
