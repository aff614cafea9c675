#include "load_report.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::cli {

nlohmann::ordered_json load_json_report(const std::string& path, bool symbolize, const std::string& iteration_marker) {
  using namespace cumemtrace::analyzer;
  ReaderOptions options;
  options.progress = true;
  TraceReader reader(path, options);
  Analysis analysis;
  if (!iteration_marker.empty()) analysis.set_iteration_marker(iteration_marker);
  std::optional<FrameSymbolizer> symbolizer;
  if (symbolize) analysis.set_symbolizer(&symbolizer.emplace());
  while (const TraceEvent* event = reader.next()) analysis.consume(*event);
  if (symbolizer) log_symbolization(path, symbolizer->counts());
  return render_json_report(reader, analysis);
}

bool symbolize_is_available() {
  if (analyzer::FrameSymbolizer::available()) return true;
  spdlog::error("--symbolize needs libdw (elfutils), which this cumemtrace was built without");
  return false;
}

void log_symbolization(const std::string& path, const analyzer::FrameSymbolizer::Counts& counts) {
  spdlog::debug("{}: --symbolize read {} object files: {} frames given file:line, {} given a name", path,
                counts.modules_read, counts.frames_with_lines, counts.frames_named);
  if (counts.modules_changed != 0) {
    spdlog::warn("{}: --symbolize left the frames of {} object file{} as recorded: modified after the run started",
                 path, counts.modules_changed, counts.modules_changed == 1 ? "" : "s");
  }
  if (counts.modules_missing != 0) {
    spdlog::warn("{}: --symbolize left the frames of {} object file{} as recorded: not found or not readable here",
                 path, counts.modules_missing, counts.modules_missing == 1 ? "" : "s");
  }
}

}  // namespace cumemtrace::cli
