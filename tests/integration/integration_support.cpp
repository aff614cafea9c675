#include "integration_support.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

extern char** environ;

namespace cumemtrace::testing {
namespace {

std::string slurp_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                          const std::string& cwd) {
  // Output goes to files rather than pipes: no deadlock on large output.
  ScratchDir io;
  const std::string out_path = io / "stdout", err_path = io / "stderr";

  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& x : extra_env) overridden |= x.substr(0, x.find('=')) == name;
    if (!overridden) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp_file(out_path);
  r.err = slurp_file(err_path);
  return r;
}

std::vector<std::string> sim_environment(const std::vector<std::string>& more) {
  std::vector<std::string> env = {std::string("LD_LIBRARY_PATH=") + SIMCUDA_LIBRARY_DIR,
                                  "SIMCUDA_DEVICE_MEMORY=16GiB", "SIMCUDA_DEVICE_COUNT=1"};
  const auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (const auto& entry : more) {
    std::erase_if(env, [&](const std::string& e) { return name_of(e) == name_of(entry); });
    env.push_back(entry);
  }
  return env;
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

ScratchDir::ScratchDir() {
  char tmpl[] = "/tmp/cumemtrace-it-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace cumemtrace::testing
