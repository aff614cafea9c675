// Running programs under cumemtrace on the simulated device, and reading
// what they leave behind, for the integration tests. Processes, scratch
// directories and files come from tests/support.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.h"

namespace cumemtrace::testing {

// The environment that puts a program on the simulated device (a 16 GiB
// device unless `more` says otherwise: its entries replace the defaults).
EnvChanges sim_environment(const EnvChanges& more = {});

// Each line of a JSON Lines file, parsed independently of cumemtrace's own
// reader (so a bug shared by our writer and reader cannot hide).
std::vector<nlohmann::json> read_json_lines(const std::string& path);

}  // namespace cumemtrace::testing
