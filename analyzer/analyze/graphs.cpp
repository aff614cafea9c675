#include "cumemtrace/analyzer/graphs.h"

#include <algorithm>

namespace cumemtrace::analyzer {

GraphRecord* GraphTracker::graph_of(std::uint64_t handle, std::uint64_t t) {
  if (auto it = by_graph_.find(handle); it != by_graph_.end()) return &graphs_[it->second];
  if (graphs_.size() >= kMaxGraphs) {
    ++omitted_;
    return nullptr;
  }
  GraphRecord g;
  g.graph = handle;
  g.first_t = t;
  by_graph_[handle] = graphs_.size();
  graphs_.push_back(std::move(g));
  return &graphs_.back();
}

void GraphTracker::on_alloc(const TraceEvent& e) {
  GraphRecord* g = graph_of(e.graph, e.t);
  if (!g) return;
  if (g->memory_nodes == 0) {
    g->dev = e.dev;
    g->stack = e.stack;
    g->api = e.api;
  }
  ++g->memory_nodes;
  g->node_bytes += e.size;
}

void GraphTracker::on_exec(const TraceEvent& e) {
  GraphRecord* g = graph_of(e.graph, e.t);
  if (!g) return;
  ++g->instantiations;
  by_exec_[e.exec] = static_cast<std::size_t>(g - graphs_.data());
}

void GraphTracker::on_destroy(const TraceEvent& e) {
  // Handles may be handed out again: a later event on one is a new graph.
  if (e.exec != 0) by_exec_.erase(e.exec);
  if (e.graph == 0) return;
  if (auto it = by_graph_.find(e.graph); it != by_graph_.end()) {
    graphs_[it->second].destroyed = true;
    by_graph_.erase(it);
  }
}

void GraphTracker::on_launch(const TraceEvent& e) {
  ++launches_;
  auto it = by_exec_.find(e.exec);
  if (it == by_exec_.end()) return;  // instantiated before the trace, or past kMaxGraphs
  GraphRecord& g = graphs_[it->second];
  if (g.launches == 0) g.first_launch_t = e.t;
  ++g.launches;
  g.last_launch_t = e.t;
}

std::uint64_t GraphTracker::on_memory(const TraceEvent& e) {
  GraphMemory& m = memory_[e.dev];
  const std::uint64_t before = m.reserved;
  m.used = e.used;
  m.reserved = e.reserved;
  m.peak_used = std::max(m.peak_used, e.used);
  if (e.reserved > m.peak_reserved) {
    m.peak_reserved = e.reserved;
    m.peak_reserved_t = e.t;
  }
  return before;
}

std::uint64_t GraphTracker::reserved(int dev) const {
  auto it = memory_.find(dev);
  return it == memory_.end() ? 0 : it->second.reserved;
}

std::uint64_t GraphTracker::reserved_total() const {
  std::uint64_t sum = 0;
  for (const auto& [dev, m] : memory_) sum += m.reserved;
  return sum;
}

}  // namespace cumemtrace::analyzer
