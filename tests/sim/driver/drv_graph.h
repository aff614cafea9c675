// Stream capture and CUDA graphs (drv_capture.cpp, drv_graph.cpp). Sources: cuda.h 13.0 (the comments of
// cuStreamBeginCapture, cuThreadExchangeStreamCaptureMode,
// cuStreamEndCapture, cuStreamIsCapturing, cuStreamGetCaptureInfo,
// cuGraphAddMemAllocNode, cuGraphInstantiate, cuGraphLaunch,
// cuDeviceGraphMemTrim) and the CUDA Programming Guide's "CUDA Graphs" and
// "Graph Memory Nodes" sections; each rule is cited where it is applied.
//
// What is modelled: a graph is a list of nodes in creation order, each with
// its dependencies (creation order is a topological order, since a node can
// only depend on nodes that exist). A launch runs the nodes one after the
// other on the launch stream, which is one valid schedule of the graph.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "drv_internal.h"

namespace sim {

enum class NodeKind {
  Kernel = CU_GRAPH_NODE_TYPE_KERNEL,
  Memcpy = CU_GRAPH_NODE_TYPE_MEMCPY,
  Memset = CU_GRAPH_NODE_TYPE_MEMSET,
  Host = CU_GRAPH_NODE_TYPE_HOST,
  Empty = CU_GRAPH_NODE_TYPE_EMPTY,
  WaitEvent = CU_GRAPH_NODE_TYPE_WAIT_EVENT,
  EventRecord = CU_GRAPH_NODE_TYPE_EVENT_RECORD,
  MemAlloc = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
  MemFree = CU_GRAPH_NODE_TYPE_MEM_FREE,
};

// The virtual range of one allocation node. "CUDA assigns virtual addresses
// to the graph allocation at node creation time" and "while these virtual
// addresses are fixed for the lifetime of the allocation node, the
// allocation contents are not persistent past the freeing operation"
// (Programming Guide, Graph Memory Nodes, API Fundamentals). Shared by the
// node and every executable graph instantiated from it, so it outlives a
// cuGraphDestroy that precedes cuGraphExecDestroy.
struct GraphAllocation {
  Device* dev = nullptr;
  std::uintptr_t base = 0;
  std::size_t size = 0;      // rounded, what the graph pool counts
  std::size_t reserved = 0;  // address space taken (whole pages)
  // A launch allocated it and its graph does not free it: it awaits
  // cuMemFreeAsync / cuMemFree (cuGraphLaunch). Guarded by graph_mu().
  bool outstanding = false;
  bool freed_in_graph = false;  // the graph has a free node for it
  ~GraphAllocation();
};

struct Graph;
struct GraphNode {
  Graph* graph = nullptr;
  NodeKind kind = NodeKind::Empty;
  std::vector<GraphNode*> deps;
  std::function<void()> fn;  // the work (memset, copy, host function); may be empty
  bool pays_latency = false;
  std::shared_ptr<GraphAllocation> alloc;  // MemAlloc, and MemFree of a graph allocation
  std::uintptr_t free_ptr = 0;             // MemFree
};

struct Graph {
  Context* ctx = nullptr;  // of the first node that needed one (memory nodes)
  std::vector<std::unique_ptr<GraphNode>> nodes;
  int live_execs = 0;       // instantiations not yet destroyed
  bool capturing = false;   // a capture sequence is building it
  bool has_memory_nodes() const;
};

// Every graph and node handle, checked before use; guarded by graph_mu().
std::mutex& graph_mu();
CUresult register_graph_locked(Graph* g);
void unregister_graph_locked(Graph* g);  // and deletes it
Graph* find_graph_locked(CUgraph h);
// Edge data (CUDA 12.3): only the default edge, all zero, is modelled
// ("A zero-initialized struct indicates a standard full serialization of
// two nodes", CUgraphEdgeData); false
// when some edge is another.
bool default_edges(const CUgraphEdgeData* edges, std::size_t n);
// Whether `deps` are n distinct nodes of g.
CUresult node_deps_ok_locked(Graph* g, const CUgraphNode* deps, std::size_t n);
// Adds a node with `deps` (validated: nodes of g, no duplicates) to g.
CUresult add_node_locked(Graph* g, const CUgraphNode* deps, std::size_t ndeps,
                         std::unique_ptr<GraphNode> node, CUgraphNode* out);
// A node captured into g (drv_capture.cpp) becomes a known handle.
void note_captured_node_locked(GraphNode* n);
// A new graph allocation of `bytes` on dev's space (address space only).
CUresult new_graph_allocation(Device* dev, std::size_t bytes, std::shared_ptr<GraphAllocation>* out);
// The graph allocation starting at p, if p is one.
std::shared_ptr<GraphAllocation> graph_allocation_at(std::uintptr_t p);

// cuMemFreeAsync / cuMemFree of a graph allocation outside its graph: true
// when p is one (then *rc is the answer and the free is handled).
bool graph_mem_free_outside(std::uintptr_t p, const std::shared_ptr<Stream>* s, CUresult* rc);

// ---- capture (drv_capture.cpp) ------------------------------------------------
struct Capture {
  unsigned long long id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;          // the thread that began it
  Graph* graph = nullptr;
  bool owns_graph = true;  // false: cuStreamBeginCaptureToGraph's, the caller's graph
  Stream* origin = nullptr;
  bool invalidated = false;
  std::vector<std::shared_ptr<Stream>> members;  // streams capturing into it, origin first
};
// Number of capture sequences in progress in the process: the one check the
// queueing paths make while nothing captures.
extern std::atomic<int> g_active_captures;
inline bool captures_active() { return g_active_captures.load(std::memory_order_acquire) != 0; }

// Queues `op` on s, or, while s is capturing, adds it to the capture's graph
// as a node of `kind`. Errors: the capture was invalidated, or s is the
// legacy stream while a blocking stream of its context captures.
CUresult submit(const std::shared_ptr<Stream>& s, Op op, NodeKind kind);
// Whether s captures (its capture sequence, or null).
std::shared_ptr<Capture> capture_of(const Stream* s);
// A call that waits for s or its context (synchronous copy, stream
// synchronize or query): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when s is
// capturing, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while
// a blocking stream captures; either invalidates the capture.
CUresult capture_forbids_wait(const Stream* s);
// A "potentially unsafe API call" (cuMemAlloc, cuMemFree, cuCtxSynchronize)
// under the calling thread's capture interaction mode: CUDA_SUCCESS when
// allowed, else CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED after invalidating the
// captures that forbid it.
CUresult capture_check_unsafe_call();
// cuStreamAllocAsync / cuMemFreeAsync on a capturing stream: a memory node.
CUresult capture_mem_alloc(const std::shared_ptr<Stream>& s, std::size_t bytes, CUdeviceptr* out);
CUresult capture_mem_free(const std::shared_ptr<Stream>& s, CUdeviceptr p);
// Event record and wait on capturing streams (drv_streams.cpp calls these
// first; `handled` false means "not a capture matter, go on").
CUresult capture_event_record(const std::shared_ptr<Event>& e, const std::shared_ptr<Stream>& s, bool* handled);
CUresult capture_event_wait(const std::shared_ptr<Stream>& s, const std::shared_ptr<Event>& e, bool* handled);
// cuEventQuery / cuEventSynchronize of an event last recorded in a capture:
// CUDA_ERROR_CAPTURED_EVENT.
CUresult capture_check_event_use(const Event* e);

}  // namespace sim
