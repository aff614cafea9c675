// Reads a trace and builds its JSON report in process, as `report --format
// json` prints it: what `check` and `diff` evaluate.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/symbolizer.h"

namespace cumemtrace::cli {

// Throws analyzer::TraceError if the trace cannot be read. Shows progress on
// a terminal for a long read. `symbolize`: frames get file and line from
// their object files (report --symbolize). `iteration_marker`: only that
// mark delimits iterations (--iteration-marker); empty: found by itself.
nlohmann::ordered_json load_json_report(const std::string& path, bool symbolize = false,
                                        const std::string& iteration_marker = "");

// For --symbolize: false, with the error logged, in a build without libdw.
bool symbolize_is_available();

// One warning line for each kind of object file --symbolize left as recorded.
void log_symbolization(const std::string& path, const analyzer::FrameSymbolizer::Counts& counts);

}  // namespace cumemtrace::cli
