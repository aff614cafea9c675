// Stream capture: cuStreamBeginCapture[_v2], cuStreamEndCapture,
// cuStreamIsCapturing, cuStreamGetCaptureInfo[_v2/_v3],
// cuThreadExchangeStreamCaptureMode (each with its _ptsz twin), and what
// capture changes for the other calls. Rules from cuda.h 13.0, cited where
// applied. While no capture is in progress every queueing path pays one
// relaxed atomic load (captures_active).
#include <algorithm>
#include <set>

#include "drv_graph.h"

namespace sim {

std::atomic<int> g_active_captures{0};

namespace {

// Guards every Stream::capture / capture_deps, Event::capture /
// capture_nodes, the Capture objects and the graphs being captured into.
std::mutex& capture_mu() {
  static auto* m = new std::mutex;
  return *m;
}
// Capture sequences in progress, for the global-mode rule.
std::set<Capture*>& live_captures() {
  static auto* s = new std::set<Capture*>;
  return *s;
}
std::atomic<unsigned long long> g_next_capture_id{1};

// "A thread's mode is one of the following: CU_STREAM_CAPTURE_MODE_GLOBAL:
// This is the default mode." (cuThreadExchangeStreamCaptureMode)
thread_local CUstreamCaptureMode tl_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

void invalidate_locked(Capture* c) { c->invalidated = true; }

// Whether the legacy stream of ctx is unusable: "When a blocking stream is
// capturing, the legacy stream is in an unusable state until the blocking
// stream capture is terminated" (cuStreamIsCapturing). Returns one such
// capture, or null.
Capture* blocking_capture_locked(const Context* ctx) {
  for (Capture* c : live_captures()) {
    for (const auto& m : c->members) {
      if (m->ctx == ctx && m->blocking()) return c;
    }
  }
  return nullptr;
}

// Ends the sequence: every member stream leaves capture.
void end_locked(const std::shared_ptr<Capture>& c) {
  for (const auto& m : c->members) {
    m->capture.reset();
    m->capture_deps.clear();
  }
  c->members.clear();
  live_captures().erase(c.get());
  g_active_captures.fetch_sub(1, std::memory_order_release);
}

// Whether `target` is `from` or reachable backwards from it.
bool reaches(const GraphNode* from, const GraphNode* target, std::set<const GraphNode*>& seen) {
  if (from == target) return true;
  if (!seen.insert(from).second) return false;
  for (const GraphNode* d : from->deps) {
    if (reaches(d, target, seen)) return true;
  }
  return false;
}

// cuStreamBeginCapture, or with `into` cuStreamBeginCaptureToGraph: "placing
// new nodes into an existing graph", `deps` being the "dependencies of the
// first node captured in the stream" (cuda.h 13.0). That graph stays the
// caller's: an invalidated capture does not destroy it (not documented;
// not checked on a GPU).
CUresult begin(CUstream h, CUstreamCaptureMode mode, bool pt, CUgraph into = nullptr,
               const CUgraphNode* deps = nullptr, std::size_t ndeps = 0) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  // "The legacy stream is not supported for stream capture" (cuStreamIsCapturing);
  // "Capture may not be initiated if stream is CU_STREAM_LEGACY" (cuStreamBeginCaptureToGraph).
  if (s->is_legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  Graph* g = nullptr;
  std::vector<GraphNode*> first_deps;
  {
    std::lock_guard<std::mutex> lk(graph_mu());
    if (into) {
      g = find_graph_locked(into);
      if (!g || g->capturing) return CUDA_ERROR_INVALID_VALUE;
      if (CUresult r = node_deps_ok_locked(g, deps, ndeps)) return r;
      for (std::size_t i = 0; i < ndeps; ++i) first_deps.push_back(reinterpret_cast<GraphNode*>(deps[i]));
    } else {
      g = new Graph;
      g->ctx = s->ctx;
      if (CUresult r = register_graph_locked(g)) {
        delete g;
        return r;
      }
    }
    g->capturing = true;
  }
  std::lock_guard<std::mutex> lk(capture_mu());
  if (s->capture) {
    // Already capturing (its own sequence or one it joined).
    std::lock_guard<std::mutex> glk(graph_mu());
    g->capturing = false;
    if (!into) unregister_graph_locked(g);
    return CUDA_ERROR_ILLEGAL_STATE;
  }
  auto c = std::make_shared<Capture>();
  c->id = g_next_capture_id.fetch_add(1);
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->graph = g;
  c->owns_graph = into == nullptr;
  c->origin = s.get();
  c->members.push_back(s);
  s->capture = c;
  s->capture_deps = std::move(first_deps);
  live_captures().insert(c.get());
  g_active_captures.fetch_add(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult end(CUstream h, CUgraph* out, bool pt) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(capture_mu());
  std::shared_ptr<Capture> c = s->capture;
  // Not capturing: not documented; CUDA_ERROR_ILLEGAL_STATE, which
  // cuStreamUpdateCaptureDependencies documents for a stream that is not
  // capturing (not checked on a GPU).
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  // "Capture must have been initiated on hStream": CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
  // ("the capture was not initiated in this stream", cuda.h's error list).
  if (c->origin != s.get()) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  // "If the mode argument to cuStreamBeginCapture was not
  // CU_STREAM_CAPTURE_MODE_RELAXED, this call must be from the same thread".
  if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  CUresult rc = CUDA_SUCCESS;
  if (c->invalidated) {
    // "If capture was invalidated ... then a NULL graph will be returned."
    rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    // CUDA_ERROR_STREAM_CAPTURE_UNJOINED: "the capture sequence contains a
    // fork that was not joined to the primary stream": another member's
    // last node must be reachable from the origin's dependencies.
    for (const auto& m : c->members) {
      if (m.get() == s.get()) continue;
      for (const GraphNode* last : m->capture_deps) {
        bool joined = false;
        for (const GraphNode* o : s->capture_deps) {
          std::set<const GraphNode*> seen;
          if (reaches(o, last, seen)) joined = true;
        }
        if (!joined) rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
      }
    }
  }
  Graph* g = c->graph;
  const bool owned = c->owns_graph;
  end_locked(c);
  std::lock_guard<std::mutex> glk(graph_mu());
  g->capturing = false;
  if (rc != CUDA_SUCCESS) {
    if (owned) unregister_graph_locked(g);
    *out = nullptr;
    return rc;
  }
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

// CU_STREAM_CAPTURE_STATUS_* of s; CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for
// the legacy stream while a blocking stream captures ("The blocking stream
// capture is not invalidated").
CUresult status_locked(const Stream* s, CUstreamCaptureStatus* st) {
  if (s->is_legacy) {
    if (blocking_capture_locked(s->ctx)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  if (!s->capture) {
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
  } else {
    *st = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream h, CUstreamCaptureStatus* st, bool pt) {
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(capture_mu());
  return status_locked(s.get(), st);
}

// The driver-owned dependency array cuStreamGetCaptureInfo hands out: "valid
// until the next API call which operates on the stream". One per thread.
thread_local std::vector<CUgraphNode> tl_deps_out;

CUresult capture_info(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* graph,
                      const CUgraphNode** deps, const CUgraphEdgeData** edges, std::size_t* ndeps, bool pt) {
  if (!st) return CUDA_ERROR_INVALID_VALUE;  // "captureStatus_out ... required"
  if (edges && !deps) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(capture_mu());
  if (CUresult r = status_locked(s.get(), st)) return r;
  // "Valid data (other than capture status) is returned only if ... the
  // returned capture status is CU_STREAM_CAPTURE_STATUS_ACTIVE".
  if (*st != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  if (id) *id = s->capture->id;
  if (graph) *graph = reinterpret_cast<CUgraph>(s->capture->graph);
  tl_deps_out.assign(s->capture_deps.size(), nullptr);
  for (std::size_t i = 0; i < s->capture_deps.size(); ++i) {
    tl_deps_out[i] = reinterpret_cast<CUgraphNode>(s->capture_deps[i]);
  }
  if (deps) *deps = tl_deps_out.data();
  if (edges) *edges = nullptr;  // no edge data is ever recorded
  if (ndeps) *ndeps = tl_deps_out.size();
  return CUDA_SUCCESS;
}

// Adds `node` to the capture of s (which must capture): it depends on the
// stream's current dependencies and becomes them.
GraphNode* capture_node_locked(Stream* s, std::unique_ptr<GraphNode> node) {
  Graph* g = s->capture->graph;
  node->graph = g;
  node->deps = s->capture_deps;
  GraphNode* raw = node.get();
  {
    std::lock_guard<std::mutex> glk(graph_mu());
    note_captured_node_locked(raw);
    g->nodes.push_back(std::move(node));
  }
  s->capture_deps.assign(1, raw);
  return raw;
}

// The error of an operation on s while it, or (legacy) its context,
// captures; CUDA_SUCCESS when capture does not concern s.
CUresult stream_capture_state_locked(const Stream* s) {
  if (s->capture) return s->capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  if (s->is_legacy) {
    // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: "a disallowed implicit dependency
    // on a current capture sequence from cudaStreamLegacy". The capture is
    // invalidated as well, since the operation it would have ordered
    // against is lost.
    if (Capture* c = blocking_capture_locked(s->ctx)) {
      invalidate_locked(c);
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

std::shared_ptr<Capture> capture_of(const Stream* s) {
  if (!captures_active()) return nullptr;
  std::lock_guard<std::mutex> lk(capture_mu());
  return s->capture;
}

CUresult submit(const std::shared_ptr<Stream>& s, Op op, NodeKind kind) {
  if (captures_active()) {
    std::lock_guard<std::mutex> lk(capture_mu());
    if (CUresult r = stream_capture_state_locked(s.get())) return r;
    if (s->capture) {
      auto node = std::make_unique<GraphNode>();
      node->kind = kind;
      node->fn = std::move(op.fn);
      node->pays_latency = op.pays_latency;
      capture_node_locked(s.get(), std::move(node));
      return CUDA_SUCCESS;
    }
  }
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult capture_forbids_wait(const Stream* s) {
  if (!captures_active()) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lk(capture_mu());
  if (s->capture) {
    // A synchronous call on a capturing stream cannot be captured: "This
    // error indicates that the operation is not permitted when the stream is
    // capturing" (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); it invalidates the
    // capture sequence ("invalidated due to a previous error").
    invalidate_locked(s->capture.get());
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return stream_capture_state_locked(s);
}

CUresult capture_check_unsafe_call() {
  if (!captures_active()) return CUDA_SUCCESS;
  const CUstreamCaptureMode mine = tl_mode;
  // "CU_STREAM_CAPTURE_MODE_RELAXED: The local thread is not prohibited from
  // potentially unsafe API calls."
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const auto self = std::this_thread::get_id();
  std::vector<Capture*> forbidding;
  std::lock_guard<std::mutex> lk(capture_mu());
  for (Capture* c : live_captures()) {
    // GLOBAL and THREAD_LOCAL: "If the local thread has an ongoing capture
    // sequence that was not initiated with CU_STREAM_CAPTURE_MODE_RELAXED";
    // GLOBAL only: "or if any other thread has a concurrent capture sequence
    // initiated with CU_STREAM_CAPTURE_MODE_GLOBAL, this thread is prohibited
    // from potentially unsafe API calls."
    const bool own = c->thread == self && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool other_global = mine == CU_STREAM_CAPTURE_MODE_GLOBAL && c->thread != self &&
                              c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || other_global) forbidding.push_back(c);
  }
  if (forbidding.empty()) return CUDA_SUCCESS;
  // The prohibited call fails and the capture it would have broken is
  // invalidated: cudaStreamEndCapture then answers
  // cudaErrorStreamCaptureInvalidated (NVIDIA/cuopt#1748, CUDA 13).
  for (Capture* c : forbidding) invalidate_locked(c);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult capture_mem_alloc(const std::shared_ptr<Stream>& s, std::size_t bytes, CUdeviceptr* out) {
  std::lock_guard<std::mutex> lk(capture_mu());
  if (CUresult r = stream_capture_state_locked(s.get())) return r;
  // "CUDA assigns virtual addresses to the graph allocation at node creation
  // time" (Programming Guide, Graph Memory Nodes): the address is handed out
  // now, the physical memory at upload or launch (drv_graph_mem.cpp).
  std::shared_ptr<GraphAllocation> a;
  if (CUresult r = new_graph_allocation(s->ctx->dev, bytes, &a)) return r;
  auto node = std::make_unique<GraphNode>();
  node->kind = NodeKind::MemAlloc;
  node->alloc = a;
  capture_node_locked(s.get(), std::move(node));
  *out = a->base;
  return CUDA_SUCCESS;
}

CUresult capture_mem_free(const std::shared_ptr<Stream>& s, CUdeviceptr p) {
  std::lock_guard<std::mutex> lk(capture_mu());
  if (CUresult r = stream_capture_state_locked(s.get())) return r;
  auto node = std::make_unique<GraphNode>();
  node->kind = NodeKind::MemFree;
  node->free_ptr = p;
  node->alloc = graph_allocation_at(p);
  // "During stream capture, this function results in the creation of a free
  // node and must therefore be passed the address of a graph allocation"
  // (cuMemFreeAsync), which "can only be freed once in the owning graph"
  // (cuGraphAddMemAllocNode). Memory from cuMemAllocAsync before the
  // capture is refused too (PyTorch's CUDAMallocAsyncAllocator defers such
  // frees to the capture's end for that reason), and "when an invalid
  // operation is attempted during stream capture, any associated capture
  // graphs are invalidated" (Programming Guide, CUDA Graphs, "Invalid
  // Capture"); the memory stays allocated. (sim_driver_probe asks a GPU.)
  bool valid = node->alloc != nullptr;
  for (const auto& n : s->capture->graph->nodes) {
    if (n->kind == NodeKind::MemFree && n->free_ptr == p) valid = false;
  }
  if (!valid) {
    invalidate_locked(s->capture.get());
    return CUDA_ERROR_INVALID_VALUE;
  }
  capture_node_locked(s.get(), std::move(node));
  return CUDA_SUCCESS;
}

CUresult capture_event_record(const std::shared_ptr<Event>& e, const std::shared_ptr<Stream>& s, bool* handled) {
  *handled = false;
  if (!captures_active()) {
    if (e->capture) {
      std::lock_guard<std::mutex> lk(capture_mu());
      e->capture.reset();
      e->capture_nodes.clear();
    }
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> lk(capture_mu());
  if (CUresult r = stream_capture_state_locked(s.get())) {
    *handled = true;
    return r;
  }
  if (!s->capture) {
    e->capture.reset();
    e->capture_nodes.clear();
    return CUDA_SUCCESS;
  }
  // Recorded in a capture: the event names the stream's current nodes, which
  // a wait on another stream joins (Programming Guide, "Cross-stream
  // Dependencies and Events").
  *handled = true;
  e->capture = s->capture;
  e->capture_nodes = s->capture_deps;
  return CUDA_SUCCESS;
}

CUresult capture_event_wait(const std::shared_ptr<Stream>& s, const std::shared_ptr<Event>& e, bool* handled) {
  *handled = false;
  if (!captures_active()) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lk(capture_mu());
  if (CUresult r = stream_capture_state_locked(s.get())) {
    *handled = true;
    return r;
  }
  std::shared_ptr<Capture> ec = e->capture;
  if (ec && ec->members.empty()) ec.reset();  // that capture has ended
  if (!ec) {
    if (!s->capture) return CUDA_SUCCESS;  // no capture involved
    // A capturing stream waiting for work outside the capture:
    // CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "a dependency would have been
    // created which crosses the capture sequence boundary".
    *handled = true;
    invalidate_locked(s->capture.get());
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  *handled = true;
  if (!s->capture) {
    // The waiting stream joins the capture (the fork of a fork/join).
    if (s->is_legacy) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    s->capture = ec;
    s->capture_deps = e->capture_nodes;
    ec->members.push_back(s);
    return CUDA_SUCCESS;
  }
  // CUDA_ERROR_STREAM_CAPTURE_MERGE: "would have resulted in a merge of two
  // independent capture sequences".
  if (s->capture != ec) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  for (GraphNode* n : e->capture_nodes) {
    if (std::find(s->capture_deps.begin(), s->capture_deps.end(), n) == s->capture_deps.end()) {
      s->capture_deps.push_back(n);
    }
  }
  return CUDA_SUCCESS;
}

CUresult capture_check_event_use(const Event* e) {
  if (!captures_active()) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lk(capture_mu());
  // CUDA_ERROR_CAPTURED_EVENT: "not permitted on an event which was last
  // recorded in a capturing stream" (only while that capture lasts).
  if (e->capture && !e->capture->members.empty()) return CUDA_ERROR_CAPTURED_EVENT;
  return CUDA_SUCCESS;
}

}  // namespace sim

using namespace sim;

CUresult CUDAAPI cuStreamBeginCapture(CUstream h) { return begin(h, CU_STREAM_CAPTURE_MODE_GLOBAL, false); }
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream h) { return begin(h, CU_STREAM_CAPTURE_MODE_GLOBAL, true); }
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) { return begin(h, mode, false); }
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) { return begin(h, mode, true); }
CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode* deps,
                                             const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  if (!default_edges(edges, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return g ? begin(h, mode, false, g, deps, n) : CUDA_ERROR_INVALID_VALUE;
}
CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph g, const CUgraphNode* deps,
                                                  const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  if (!default_edges(edges, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return g ? begin(h, mode, true, g, deps, n) : CUDA_ERROR_INVALID_VALUE;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph* g) { return end(h, g, false); }
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph* g) { return end(h, g, true); }
CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* st) { return is_capturing(h, st, false); }
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* st) { return is_capturing(h, st, true); }
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id) {
  return capture_info(h, st, id, nullptr, nullptr, nullptr, nullptr, false);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id) {
  return capture_info(h, st, id, nullptr, nullptr, nullptr, nullptr, true);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                           const CUgraphNode** deps, size_t* n) {
  return capture_info(h, st, id, g, deps, nullptr, n, false);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id,
                                                CUgraph* g, const CUgraphNode** deps, size_t* n) {
  return capture_info(h, st, id, g, deps, nullptr, n, true);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                           const CUgraphNode** deps, const CUgraphEdgeData** e, size_t* n) {
  return capture_info(h, st, id, g, deps, e, n, false);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id,
                                                CUgraph* g, const CUgraphNode** deps, const CUgraphEdgeData** e,
                                                size_t* n) {
  return capture_info(h, st, id, g, deps, e, n, true);
}
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::swap(tl_mode, *mode);
  return CUDA_SUCCESS;
}
