// Reads a trace and builds its JSON report in process, as `report --format
// json` prints it: what `check` and `diff` evaluate.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cumemtrace::cli {

// Throws analyzer::TraceError if the trace cannot be read. Shows progress on
// a terminal for a long read.
nlohmann::ordered_json load_json_report(const std::string& path);

}  // namespace cumemtrace::cli
