// The `report` command's output, as text for people and as one JSON object
// for scripts. Both are built from a finished read (the reader's header and
// stats) and the analysis of its events.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer {

struct ReportOptions {
  std::size_t max_leak_groups = 10;  // text only: JSON lists every group
  std::size_t max_examples = 3;      // example pointers per leak group
  std::size_t max_frames = 8;        // stack frames shown per leak group
};

std::string render_text_report(const TraceReader& reader, const Analysis& analysis,
                               const ReportOptions& options = {});

nlohmann::ordered_json render_json_report(const TraceReader& reader, const Analysis& analysis,
                                          const ReportOptions& options = {});

// "0x7f3a00200000"
std::string format_hex(std::uint64_t value);

}  // namespace cumemtrace::analyzer
