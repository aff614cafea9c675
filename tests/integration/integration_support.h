// Running programs under cumemtrace on the simulated device, and reading
// what they leave behind, for the integration tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cumemtrace::testing {

struct CommandResult {
  int exit_code = -1;  // as a shell reports it: 128+N for signal N
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `argv` with extra environment entries ("NAME=value") added to this
// process's environment, in directory `cwd` (empty: the current one).
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::vector<std::string>& extra_env = {},
                          const std::string& cwd = {});

// The environment that puts a program on the simulated device (a 16 GiB
// device unless `more` says otherwise: its entries replace the defaults).
std::vector<std::string> sim_environment(const std::vector<std::string>& more = {});

// Each line of a JSON Lines file, parsed independently of cumemtrace's own
// reader (so a bug shared by our writer and reader cannot hide).
std::vector<nlohmann::json> read_json_lines(const std::string& path);

// A fresh directory under /tmp, removed when the object goes away.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace cumemtrace::testing
