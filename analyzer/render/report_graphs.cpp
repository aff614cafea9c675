// The report's "graphs" section, text and JSON: the device's graph memory
// (reserved by the driver for graphs' memory nodes, counted in reserved),
// and each graph: its memory nodes, where it was captured, its launches.
#include "render/report_graphs.h"

#include <algorithm>

#include "analyze/stack_folding.h"
#include "cumemtrace/analyzer/units.h"
#include "render/report_text_sections.h"

namespace cumemtrace::analyzer::detail {
namespace {

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A capture's stack is no allocating site (SiteLabels knows only those):
// labelled from its own frames, past the CUDA libraries' innermost ones: a
// memory node the runtime added for the program (cudaGraphAddNode reaching
// the hooked cuGraphAddNode) was made where the program called it, not
// "cudaGraphAddNode ← …". A stack of CUDA frames only keeps them.
std::string capture_site(const Analysis& analysis, std::uint64_t stack) {
  const std::vector<OwnedFrame>* frames = analysis.stacks().find(stack);
  if (!frames || frames->empty()) return std::string(kNoStackLabel);
  auto first = std::find_if(frames->begin(), frames->end(),
                            [](const OwnedFrame& f) { return frame_owner(f) != FrameOwner::cuda; });
  if (first == frames->end()) first = frames->begin();
  const std::vector<OwnedFrame> from_program(first, frames->end());
  return label_call_sites({&from_program}, {"stack " + std::to_string(stack)}).front();
}

}  // namespace

void write_graphs(std::ostringstream& out, const Analysis& analysis, const SiteLabels&) {
  const GraphTracker& g = analysis.graphs();
  if (!g.any()) return;
  out << "\nGraphs (" << plural(g.graphs().size() + g.graphs_omitted(), "graph", "graphs") << ", "
      << plural(g.launches(), "launch", "launches") << ")\n";
  for (const auto& [dev, m] : g.memory()) {
    out << "  device " << dev << " graph memory: reserved peak " << format_bytes(m.peak_reserved) << " at "
        << format_seconds(m.peak_reserved_t) << ", at the end " << format_bytes(m.reserved) << " reserved, "
        << format_bytes(m.used) << " used (counted in reserved above)\n";
  }
  std::size_t i = 0;
  for (const GraphRecord& r : g.graphs()) {
    out << "  " << ++i << ". graph " << hex(r.graph) << ": "
        << plural(r.memory_nodes, "memory node", "memory nodes");
    if (r.memory_nodes > 0) out << " (" << format_bytes(r.node_bytes) << " on device " << r.dev << ")";
    out << ", " << plural(r.instantiations, "instantiation", "instantiations") << ", "
        << plural(r.launches, "launch", "launches");
    if (r.launches > 0) {
      out << " (" << format_seconds(r.first_launch_t) << " to " << format_seconds(r.last_launch_t) << ")";
    }
    out << (r.destroyed ? ", destroyed" : ", alive at the end") << "\n";
    if (r.memory_nodes > 0) {
      out << "     captured by " << r.api << " from " << capture_site(analysis, r.stack) << " ("
          << stack_name(r.stack) << ")\n";
    }
  }
  if (g.graphs_omitted() > 0) out << "  ... " << g.graphs_omitted() << " more not described\n";
}

Json graphs_json(const Analysis& analysis, const SiteLabels&) {
  const GraphTracker& g = analysis.graphs();
  Json memory = Json::array();
  for (const auto& [dev, m] : g.memory()) {
    memory.push_back(Json{{"dev", dev},
                          {"reserved", m.reserved},
                          {"used", m.used},
                          {"peak_reserved", m.peak_reserved},
                          {"peak_reserved_t", m.peak_reserved_t},
                          {"peak_used", m.peak_used}});
  }
  Json graphs = Json::array();
  for (const GraphRecord& r : g.graphs()) {
    graphs.push_back(Json{{"graph", hex(r.graph)},
                          {"dev", r.dev},
                          {"memory_nodes", r.memory_nodes},
                          {"node_bytes", r.node_bytes},
                          {"api", r.api},
                          {"stack", r.stack},
                          {"site", r.memory_nodes > 0 ? Json(capture_site(analysis, r.stack)) : Json(nullptr)},
                          {"instantiations", r.instantiations},
                          {"launches", r.launches},
                          {"first_launch_t", r.first_launch_t},
                          {"last_launch_t", r.last_launch_t},
                          {"destroyed", r.destroyed}});
  }
  return Json{{"launches", g.launches()},
              {"omitted", g.graphs_omitted()},
              {"memory", std::move(memory)},
              {"graphs", std::move(graphs)}};
}

}  // namespace cumemtrace::analyzer::detail
