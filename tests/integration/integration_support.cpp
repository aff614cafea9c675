#include "integration_support.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace cumemtrace::testing {

EnvChanges sim_environment(const EnvChanges& more) {
  EnvChanges env = {{"LD_LIBRARY_PATH", SIMCUDA_LIBRARY_DIR},
                    {"SIMCUDA_DEVICE_MEMORY", "16GiB"},
                    {"SIMCUDA_DEVICE_COUNT", "1"}};
  for (const auto& change : more) {
    std::erase_if(env, [&](const auto& e) { return e.first == change.first; });
    env.push_back(change);
  }
  return env;
}

void for_each_json_line(const std::string& path,
                        const std::function<void(std::size_t, const nlohmann::json&)>& each) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) each(++number, nlohmann::json::parse(line));
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  for_each_json_line(path, [&](std::size_t, const nlohmann::json& line) { lines.push_back(line); });
  return lines;
}

CommandResult wait_at_most(const RunningCommand& running, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  CommandResult result;
  while (waitpid(running.pid, &result.raw_status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "still running after " << seconds << " s: killed";
      kill(running.pid, SIGKILL);
      waitpid(running.pid, &result.raw_status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.exited = WIFEXITED(result.raw_status);
  result.exit_code = result.exited ? WEXITSTATUS(result.raw_status) : 128 + WTERMSIG(result.raw_status);
  result.out = read_file(running.out_path);
  result.err = read_file(running.err_path);
  return result;
}

bool no_core_files() {
  const rlimit none{0, 0};
  return setrlimit(RLIMIT_CORE, &none) == 0;
}

std::vector<nlohmann::json> lines_of(const std::vector<nlohmann::json>& trace, const std::string& ev) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& l : trace) {
    if (l["ev"] == ev) out.push_back(l);
  }
  return out;
}

CommandResult run_at_most(const std::vector<std::string>& argv, const EnvChanges& env, int seconds) {
  TempDir scratch;
  return wait_at_most(start_command(argv, env, scratch), seconds);
}

void wait_for_ready(const RunningCommand& running) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (read_file(running.out_path).find("ready\n") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << read_file(running.err_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace cumemtrace::testing
