#include "integration_support.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

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

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace cumemtrace::testing
