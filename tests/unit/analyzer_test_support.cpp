#include "analyzer_test_support.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cumemtrace::analyzer::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "cumemtrace-analyzer-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
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

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

std::string header_line(int version) {
  return R"({"ev":"header","format":"cumemtrace","version":)" + std::to_string(version) +
         R"(,"pid":4242,"ppid":4100,"host":"node7","exe":"/usr/bin/python3","argv":["python3","train.py"],)"
         R"("start_unix_ns":1763740000123456789,"pool":"caching","config":{"max_split_size":null,"stacks":32}})";
}

std::string alloc_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev, int stack) {
  return R"({"ev":"alloc","t":)" + std::to_string(t) + R"(,"tid":7,"api":"cudaMalloc","kind":"device","dev":)" +
         std::to_string(dev) + R"(,"ptr":")" + ptr + R"(","size":)" + std::to_string(size) +
         R"(,"stack":)" + std::to_string(stack) + "}";
}

std::string free_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev) {
  return R"({"ev":"free","t":)" + std::to_string(t) + R"(,"tid":7,"api":"cudaFree","kind":"device","dev":)" +
         std::to_string(dev) + R"(,"ptr":")" + ptr + R"(","size":)" + std::to_string(size) + R"(,"stack":0})";
}

std::string end_line(std::uint64_t t) {
  return R"({"ev":"end","t":)" + std::to_string(t) + R"(,"reason":"exit","live":0,"live_bytes":0,"dropped":0})";
}

RunningCommand start_command(const std::vector<std::string>& argv, const EnvChanges& env,
                             const TempDir& scratch) {
  static int counter = 0;
  RunningCommand running;
  running.out_path = scratch.path("cmd" + std::to_string(counter) + ".out");
  running.err_path = scratch.path("cmd" + std::to_string(counter++) + ".err");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  running.pid = ::fork();
  if (running.pid == 0) {
    for (const auto& [name, value] : env) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
    int out = ::open(running.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = ::open(running.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(99);
  }
  return running;
}

CommandResult wait_command(const RunningCommand& running) {
  CommandResult result;
  ::waitpid(running.pid, &result.raw_status, 0);
  result.exited = WIFEXITED(result.raw_status);
  if (result.exited) result.exit_code = WEXITSTATUS(result.raw_status);
  result.out = read_file(running.out_path);
  result.err = read_file(running.err_path);
  return result;
}

CommandResult run_command(const std::vector<std::string>& argv, const EnvChanges& env) {
  TempDir scratch;
  return wait_command(start_command(argv, env, scratch));
}

std::string cli_path() { return CUMEMTRACE_CLI; }

std::string empty_preload(int which) { return which == 1 ? CUMEMTRACE_TEST_PRELOAD1 : CUMEMTRACE_TEST_PRELOAD2; }

}  // namespace cumemtrace::analyzer::testing
