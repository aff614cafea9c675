#include "load_report.h"

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::cli {

nlohmann::ordered_json load_json_report(const std::string& path) {
  using namespace cumemtrace::analyzer;
  ReaderOptions options;
  options.progress = true;
  TraceReader reader(path, options);
  Analysis analysis;
  while (const TraceEvent* event = reader.next()) analysis.consume(*event);
  return render_json_report(reader, analysis);
}

}  // namespace cumemtrace::cli
