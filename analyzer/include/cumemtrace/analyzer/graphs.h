// CUDA graphs and the device's graph memory, from the graph events of a
// trace (README, "Additions to the trace format"): each graph's memory nodes
// (their virtual ranges; the capture's call stack), its instantiations and
// launches, and per device the graph memory the driver reserved and used.
// Graph memory is reserved device memory that no segment shows: Analysis
// counts it in reserved.
//
// Memory is bounded: at most kMaxGraphs graphs are described (the rest are
// counted in graphs_omitted()), whatever the trace's length.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "cumemtrace/analyzer/trace_event.h"

namespace cumemtrace::analyzer {

struct GraphRecord {
  std::uint64_t graph = 0;  // the handle (the driver may reuse it once destroyed)
  int dev = 0;              // its memory nodes' device
  std::uint64_t first_t = 0;
  std::uint64_t memory_nodes = 0;
  std::uint64_t node_bytes = 0;  // their sizes: the virtual ranges the graph holds
  std::uint64_t stack = 0;       // the first memory node's: where it was captured or built
  std::string api;               // that node's api (cudaMallocAsync, cuGraphAddMemAllocNode, …)
  std::uint64_t instantiations = 0;
  std::uint64_t launches = 0;
  std::uint64_t first_launch_t = 0;
  std::uint64_t last_launch_t = 0;
  bool destroyed = false;
};

// The device's graph memory pool as the driver reported it (graph_mem).
struct GraphMemory {
  std::uint64_t used = 0;
  std::uint64_t reserved = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_reserved_t = 0;
  std::uint64_t peak_used = 0;
};

class GraphTracker {
 public:
  static constexpr std::size_t kMaxGraphs = 1000;

  void on_alloc(const TraceEvent& e);
  void on_exec(const TraceEvent& e);
  void on_destroy(const TraceEvent& e);
  // A mark with `exec`: a launch of that executable graph.
  void on_launch(const TraceEvent& e);
  // graph_mem: returns the device's graph memory reserved before it.
  std::uint64_t on_memory(const TraceEvent& e);

  // In the order they were first seen.
  const std::vector<GraphRecord>& graphs() const { return graphs_; }
  const std::map<int, GraphMemory>& memory() const { return memory_; }
  std::uint64_t graphs_omitted() const { return omitted_; }
  std::uint64_t launches() const { return launches_; }
  // The graph memory reserved on `dev` now (0 if none was reported).
  std::uint64_t reserved(int dev) const;
  std::uint64_t reserved_total() const;  // on all devices
  bool any() const { return !graphs_.empty() || !memory_.empty() || launches_ != 0 || omitted_ != 0; }

 private:
  GraphRecord* graph_of(std::uint64_t handle, std::uint64_t t);

  std::vector<GraphRecord> graphs_;
  std::unordered_map<std::uint64_t, std::size_t> by_graph_;  // live handle → index
  std::unordered_map<std::uint64_t, std::size_t> by_exec_;   // live exec → its graph's index
  std::map<int, GraphMemory> memory_;
  std::uint64_t omitted_ = 0;
  std::uint64_t launches_ = 0;
};

}  // namespace cumemtrace::analyzer
