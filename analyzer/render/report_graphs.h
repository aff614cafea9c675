// The report's "graphs" section (internal): text and JSON.
#pragma once

#include <sstream>

#include <nlohmann/json.hpp>

#include "analyze/site_labels.h"
#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer::detail {

using Json = nlohmann::ordered_json;

// Nothing when the trace has no graph event.
void write_graphs(std::ostringstream& out, const Analysis& analysis, const SiteLabels& labels);
Json graphs_json(const Analysis& analysis, const SiteLabels& labels);

}  // namespace cumemtrace::analyzer::detail
