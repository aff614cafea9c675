// CUDA graphs: create, add and query nodes, instantiate, upload, launch,
// destroy, and the device's graph memory pool (cuDeviceGraphMemTrim,
// cuDevice[GS]etGraphMemAttribute). Rules from cuda.h 13.0 and the
// Programming Guide's "Graph Memory Nodes", cited where applied.
//
// Graph memory. An allocation node gets its virtual range when it is created
// (GraphAllocation: address space of the device, no pages). Physical memory
// is taken from the device's capacity for an executable graph when it is
// uploaded or first launched, and stays with it ("the graph memory pool")
// until cuDeviceGraphMemTrim finds the graph idle, or the executable graph
// is destroyed and a trim follows. Not modelled: the driver's reuse of one
// physical page for allocations whose lifetimes do not overlap, inside a
// graph or across graphs (each allocation node keeps pages of its own).
#include <algorithm>
#include <cstring>
#include <set>

#include "drv_graph.h"

namespace sim {

CUresult graph_memset_work(Context* ctx, const CUDA_MEMSET_NODE_PARAMS& p, std::function<void()>* out);
CUresult graph_memcpy_work(Context* ctx, const CUDA_MEMCPY3D& c, std::function<void()>* out);

namespace {

struct ExecNode {
  NodeKind kind;
  std::function<void()> fn;
  bool pays_latency;
  std::shared_ptr<GraphAllocation> alloc;
};

struct GraphExec {
  Graph* source = nullptr;  // null once the graph is destroyed
  Device* dev = nullptr;
  std::vector<ExecNode> nodes;
  std::vector<std::shared_ptr<GraphAllocation>> allocs;  // its allocation nodes'
  std::size_t needs = 0;    // physical bytes its allocations take
  std::size_t backing = 0;  // physical bytes it holds now
  bool auto_free = false;
  int in_flight = 0;        // launches not yet finished
};

// The graph memory pool of one device (CU_GRAPH_MEM_ATTR_*).
struct GraphPool {
  std::uint64_t used = 0, used_high = 0;
  std::uint64_t reserved = 0, reserved_high = 0;
  std::uint64_t cached = 0;  // reserved but held by no executable graph
};

struct Registry {
  std::set<Graph*> graphs;
  std::set<GraphNode*> nodes;
  std::map<CUgraphExec, std::shared_ptr<GraphExec>> execs;
  // Every graph allocation by address, under its own lock: a range is
  // destroyed (and leaves it) wherever its last owner lets go, graph_mu()
  // held or not.
  std::mutex allocations_mu;
  std::map<std::uintptr_t, std::weak_ptr<GraphAllocation>> allocations;
  // Allocations a launch left for the program to free: they outlive their
  // graph ("Graph destruction does not automatically free any live
  // graph-allocated memory", Programming Guide, Graph Memory Nodes).
  std::set<std::shared_ptr<GraphAllocation>> outstanding;
  std::map<Device*, GraphPool> pools;
};
Registry& reg() {
  static auto* r = new Registry;
  return *r;
}

void raise_high(std::uint64_t now, std::uint64_t* high) { *high = std::max(*high, now); }

CUresult find_exec_locked(CUgraphExec h, std::shared_ptr<GraphExec>* out) {
  auto it = reg().execs.find(h);
  if (it == reg().execs.end()) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second;
  return CUDA_SUCCESS;
}


// Takes the physical memory exec's allocations need, from the graph pool's
// cache first, then from the device's free pages.
CUresult back_locked(GraphExec* x) {
  if (x->backing >= x->needs) return CUDA_SUCCESS;
  std::size_t want = x->needs - x->backing;
  GraphPool& gp = reg().pools[x->dev];
  const std::size_t from_cache = std::min<std::uint64_t>(gp.cached, want);
  gp.cached -= from_cache;
  want -= from_cache;
  if (want) {
    std::lock_guard<std::mutex> lk(x->dev->mu);
    if (x->dev->free_pages() * kPageSize < want) {
      gp.cached += from_cache;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->dev->used += want;
    gp.reserved += want;
    raise_high(gp.reserved, &gp.reserved_high);
  }
  x->backing = x->needs;
  return CUDA_SUCCESS;
}

void release_cache_locked(Device* dev) {
  GraphPool& gp = reg().pools[dev];
  if (!gp.cached) return;
  {
    std::lock_guard<std::mutex> lk(dev->mu);
    dev->used -= gp.cached;
  }
  gp.reserved -= gp.cached;
  gp.cached = 0;
}

CUresult instantiate(CUgraphExec* out, CUgraph h, unsigned long long flags) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  constexpr unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  // DEVICE_LAUNCH "cannot be used in conjunction with AUTO_FREE_ON_LAUNCH".
  if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lk(graph_mu());
  Graph* g = find_graph_locked(h);
  if (!g || g->capturing) return CUDA_ERROR_INVALID_VALUE;
  // "If hGraph contains any allocation or free nodes, there can be at most
  // one executable graph in existence for that graph at a time. An attempt
  // to instantiate a second ... will result in an error." (cuGraphInstantiate)
  if (g->has_memory_nodes() && g->live_execs > 0) return CUDA_ERROR_INVALID_VALUE;
  auto x = std::make_shared<GraphExec>();
  x->source = g;
  x->auto_free = flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
  Context* c = nullptr;
  if (current_ctx_any(&c) == CUDA_SUCCESS) x->dev = c->dev;
  for (const auto& n : g->nodes) {
    x->nodes.push_back({n->kind, n->fn, n->pays_latency, n->alloc});
    if (n->kind == NodeKind::MemAlloc) {
      x->allocs.push_back(n->alloc);
      x->dev = n->alloc->dev;
      x->needs += n->alloc->reserved;
    }
  }
  ++g->live_execs;
  auto* handle = reinterpret_cast<CUgraphExec>(x.get());
  reg().execs[handle] = std::move(x);
  *out = handle;
  return CUDA_SUCCESS;
}

CUresult upload(CUgraphExec h, CUstream st, bool pt) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(st, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(graph_mu());
  std::shared_ptr<GraphExec> x;
  if (CUresult r = find_exec_locked(h, &x)) return r;
  return x->dev ? back_locked(x.get()) : CUDA_SUCCESS;
}

CUresult launch(CUgraphExec h, CUstream st, bool pt) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(st, pt, &s)) return r;
  // Launching a graph into a capture would add a child graph node: not
  // modelled.
  if (capture_of(s.get())) return CUDA_ERROR_NOT_SUPPORTED;
  if (CUresult r = capture_forbids_wait(s.get())) return r;  // the legacy stream while one captures
  std::lock_guard<std::mutex> lk(graph_mu());
  std::shared_ptr<GraphExec> x;
  if (CUresult r = find_exec_locked(h, &x)) return r;
  // "If any allocations created by hGraphExec remain unfreed (from a
  // previous launch) and hGraphExec was not instantiated with
  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, the launch will fail
  // with CUDA_ERROR_INVALID_VALUE." (cuGraphLaunch)
  for (const auto& a : x->allocs) {
    if (a->outstanding && !x->auto_free) return CUDA_ERROR_INVALID_VALUE;
  }
  if (x->dev) {
    if (CUresult r = back_locked(x.get())) return r;
  }
  for (const auto& a : x->allocs) {
    if (!a->outstanding) continue;
    // AUTO_FREE_ON_LAUNCH: "each launch behave[s] as though it called
    // cuMemFreeAsync for every unfreed allocation", so in stream order,
    // after the previous launch's allocation node has run.
    a->outstanding = false;
    reg().outstanding.erase(a);
    Op free_op;
    free_op.fn = [a] {
      std::lock_guard<std::mutex> glk(graph_mu());
      reg().pools[a->dev].used -= a->size;
    };
    enqueue(s, std::move(free_op));
  }
  ++x->in_flight;
  for (const ExecNode& n : x->nodes) {
    Op op;
    op.pays_latency = n.pays_latency;
    if (n.kind == NodeKind::MemAlloc) {
      // The allocation's lifetime "begins when GPU execution reaches the
      // allocating graph node" (Programming Guide, Graph Memory Nodes).
      op.fn = [a = n.alloc] {
        std::lock_guard<std::mutex> glk(graph_mu());
        GraphPool& gp = reg().pools[a->dev];
        gp.used += a->size;
        raise_high(gp.used, &gp.used_high);
      };
    } else if (n.kind == NodeKind::MemFree && n.alloc) {
      op.fn = [a = n.alloc] {
        std::lock_guard<std::mutex> glk(graph_mu());
        reg().pools[a->dev].used -= a->size;
      };
    } else {
      op.fn = n.fn;
    }
    enqueue(s, std::move(op));
  }
  Op done;
  done.fn = [x] {
    std::lock_guard<std::mutex> glk(graph_mu());
    --x->in_flight;
  };
  enqueue(s, std::move(done));
  // Allocations the graph does not free are the program's after the launch.
  for (const auto& a : x->allocs) {
    if (a->freed_in_graph) continue;
    a->outstanding = true;
    reg().outstanding.insert(a);
  }
  return CUDA_SUCCESS;
}

CUresult exec_destroy(CUgraphExec h) {
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(graph_mu());
  std::shared_ptr<GraphExec> x;
  if (CUresult r = find_exec_locked(h, &x)) return r;
  reg().execs.erase(h);
  if (x->source) --x->source->live_execs;
  // Its physical memory stays in the device's graph pool until a trim.
  if (x->dev) reg().pools[x->dev].cached += x->backing;
  x->backing = 0;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult node_deps_ok_locked(Graph* g, const CUgraphNode* deps, std::size_t n) {
  if (n && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (std::size_t i = 0; i < n; ++i) {
    auto* d = reinterpret_cast<GraphNode*>(deps[i]);
    if (!reg().nodes.count(d) || d->graph != g) return CUDA_ERROR_INVALID_VALUE;
    // "dependencies may not have any duplicate entries"
    for (std::size_t j = 0; j < i; ++j) {
      if (deps[j] == deps[i]) return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

namespace {

template <typename Fill>
CUresult add(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, std::size_t n, NodeKind kind, Fill fill) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  auto node = std::make_unique<GraphNode>();
  node->kind = kind;
  if (CUresult r = fill(*node)) return r;
  std::lock_guard<std::mutex> lk(graph_mu());
  Graph* g = find_graph_locked(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  return add_node_locked(g, deps, n, std::move(node), out);
}

Context* node_ctx(CUcontext c) {
  if (c) return reinterpret_cast<Context*>(c);
  Context* cur = nullptr;
  return current_ctx(&cur) == CUDA_SUCCESS ? cur : nullptr;
}

CUresult device_of_ordinal(CUdevice d, Device** out) {
  if (CUresult r = check_init()) return r;
  *out = device_at(d);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

}  // namespace

std::mutex& graph_mu() {
  static auto* m = new std::mutex;
  return *m;
}

bool Graph::has_memory_nodes() const {
  return std::any_of(nodes.begin(), nodes.end(), [](const auto& n) {
    return n->kind == NodeKind::MemAlloc || n->kind == NodeKind::MemFree;
  });
}

CUresult register_graph_locked(Graph* g) {
  reg().graphs.insert(g);
  return CUDA_SUCCESS;
}

void unregister_graph_locked(Graph* g) {
  reg().graphs.erase(g);
  for (const auto& n : g->nodes) reg().nodes.erase(n.get());
  for (auto& e : reg().execs) {
    if (e.second->source == g) e.second->source = nullptr;
  }
  // Nodes go with the graph; their allocations' ranges live on while an
  // executable graph or an outstanding allocation holds them.
  delete g;
}

Graph* find_graph_locked(CUgraph h) {
  auto* g = reinterpret_cast<Graph*>(h);
  return reg().graphs.count(g) ? g : nullptr;
}

CUresult add_node_locked(Graph* g, const CUgraphNode* deps, std::size_t n, std::unique_ptr<GraphNode> node,
                         CUgraphNode* out) {
  if (CUresult r = node_deps_ok_locked(g, deps, n)) return r;
  node->graph = g;
  for (std::size_t i = 0; i < n; ++i) node->deps.push_back(reinterpret_cast<GraphNode*>(deps[i]));
  if (node->kind == NodeKind::MemFree) {
    // Graph allocations "cannot be freed outside the owning graph, and they
    // can only be freed once in the owning graph" (cuGraphAddMemAllocNode).
    if (!node->alloc) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& other : g->nodes) {
      if (other->kind == NodeKind::MemFree && other->alloc == node->alloc) return CUDA_ERROR_INVALID_VALUE;
    }
    node->alloc->freed_in_graph = true;
  }
  reg().nodes.insert(node.get());
  *out = reinterpret_cast<CUgraphNode>(node.get());
  g->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

void note_captured_node_locked(GraphNode* n) {
  reg().nodes.insert(n);
  if (n->kind == NodeKind::MemFree && n->alloc) n->alloc->freed_in_graph = true;
}

CUresult new_graph_allocation(Device* dev, std::size_t bytes, std::shared_ptr<GraphAllocation>* out) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  auto a = std::make_shared<GraphAllocation>();
  a->dev = dev;
  a->size = (bytes + kAllocAlign - 1) / kAllocAlign * kAllocAlign;
  a->reserved = (bytes + kPageSize - 1) / kPageSize * kPageSize;
  {
    std::lock_guard<std::mutex> lk(dev->mu);
    a->base = dev->space.reserve(a->reserved);
    if (!a->base) return CUDA_ERROR_OUT_OF_MEMORY;
    Allocation& rec = dev->allocs[a->base];
    rec = Allocation{};
    rec.base = a->base;
    rec.size = a->size;
    rec.requested = bytes;
    rec.kind = AllocKind::Graph;
    rec.buffer_id = G().next_buffer_id.fetch_add(1, std::memory_order_relaxed);
  }
  {
    std::lock_guard<std::mutex> lk(reg().allocations_mu);
    reg().allocations[a->base] = a;
  }
  *out = std::move(a);
  return CUDA_SUCCESS;
}

GraphAllocation::~GraphAllocation() {
  if (!base) return;
  {
    std::lock_guard<std::mutex> lk(dev->mu);
    dev->allocs.erase(base);
    dev->space.unreserve(base, reserved);
  }
  std::lock_guard<std::mutex> lk(reg().allocations_mu);
  auto it = reg().allocations.find(base);
  if (it != reg().allocations.end() && it->second.expired()) reg().allocations.erase(it);
}

std::shared_ptr<GraphAllocation> graph_allocation_at(std::uintptr_t p) {
  std::lock_guard<std::mutex> lk(reg().allocations_mu);
  auto it = reg().allocations.find(p);
  return it == reg().allocations.end() ? nullptr : it->second.lock();
}

bool graph_mem_free_outside(std::uintptr_t p, const std::shared_ptr<Stream>* s, CUresult* rc) {
  std::shared_ptr<GraphAllocation> a = graph_allocation_at(p);
  if (!a) return false;
  std::lock_guard<std::mutex> lk(graph_mu());
  // Only an allocation a launch left unfreed can be freed by the program
  // (cuGraphAddMemAllocNode: "Allocations which are not freed in the same
  // graph can be freed by passing the allocation to cuMemFreeAsync or
  // cuMemFree"); anything else is CUDA_ERROR_INVALID_VALUE.
  if (!a->outstanding) {
    *rc = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  a->outstanding = false;
  reg().outstanding.erase(a);
  auto drop = [a] {
    std::lock_guard<std::mutex> glk(graph_mu());
    reg().pools[a->dev].used -= a->size;
  };
  if (s) {
    Op op;  // "GPU execution reaches the freeing cudaFreeAsync() stream call"
    op.fn = drop;
    enqueue(*s, std::move(op));
  } else {
    // "immediately upon the freeing call to cudaFree()"
    reg().pools[a->dev].used -= a->size;
  }
  *rc = CUDA_SUCCESS;
  return true;
}

}  // namespace sim

using namespace sim;

CUresult CUDAAPI cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;  // "flags - Graph creation flags, must be 0"
  if (CUresult r = check_init()) return r;
  auto* g = new Graph;
  std::lock_guard<std::mutex> lk(graph_mu());
  register_graph_locked(g);
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph h) {
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(graph_mu());
  Graph* g = find_graph_locked(h);
  // A graph being captured into is destroyed by cuStreamEndCapture only
  // ("All operations other than destroy and node removal are permitted on
  // the graph while the capture sequence is in progress").
  if (!g || g->capturing) return CUDA_ERROR_INVALID_VALUE;
  unregister_graph_locked(g);
  return CUDA_SUCCESS;
}

// The node kinds' bodies, shared by their own entry points and cuGraphAddNode:
// the sim calls them, never its exported functions, which a preloaded
// library interposes (a real libcuda.so's internal calls do not go through
// its exports either, and cumemtrace would see such a node twice).
static CUresult add_empty(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n) {
  return add(out, g, deps, n, NodeKind::Empty, [](GraphNode&) { return CUDA_SUCCESS; });
}

static CUresult add_memset(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                           const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  return add(out, g, deps, n, NodeKind::Memset, [&](GraphNode& node) {
    Context* c = node_ctx(ctx);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    node.pays_latency = true;
    return graph_memset_work(c, *p, &node.fn);
  });
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                      const CUDA_MEMCPY3D* p, CUcontext ctx) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  return add(out, g, deps, n, NodeKind::Memcpy, [&](GraphNode& node) {
    Context* c = node_ctx(ctx);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    node.pays_latency = true;
    return graph_memcpy_work(c, *p, &node.fn);
  });
}

// Kernel nodes compute nothing, like launches (README "Modules and
// kernels"): a function and its place in the graph.
static CUresult add_kernel(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUfunction f) {
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  return add(out, g, deps, n, NodeKind::Kernel, [](GraphNode& node) {
    node.pays_latency = true;
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                      const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return add_kernel(out, g, deps, n, p ? p->func : nullptr);
}
CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                         const CUDA_KERNEL_NODE_PARAMS* p) {
  return add_kernel(out, g, deps, n, p ? p->func : nullptr);
}

static CUresult add_mem_alloc(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (!p || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Device* dev = nullptr;
  if (CUresult r = device_of_ordinal(p->poolProps.location.id, &dev)) return r;
  // "When cuGraphAddMemAllocNode creates an allocation node, it returns the
  // address of the allocation in nodeParams.dptr."
  return add(out, g, deps, n, NodeKind::MemAlloc, [&](GraphNode& node) {
    if (CUresult r = new_graph_allocation(dev, p->bytesize, &node.alloc)) return r;
    p->dptr = node.alloc->base;
    return CUDA_SUCCESS;
  });
}

static CUresult add_mem_free(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUdeviceptr dptr) {
  return add(out, g, deps, n, NodeKind::MemFree, [&](GraphNode& node) {
    node.free_ptr = dptr;
    node.alloc = graph_allocation_at(dptr);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n) {
  return add_empty(out, g, deps, n);
}
CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                      const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx) {
  return add_memset(out, g, deps, n, p, ctx);
}
CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                        CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  return add_mem_alloc(out, g, deps, n, p);
}
CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                       CUdeviceptr dptr) {
  return add_mem_free(out, g, deps, n, dptr);
}

namespace sim {
bool default_edges(const CUgraphEdgeData* edges, std::size_t n) {
  const CUgraphEdgeData none{};
  for (std::size_t i = 0; edges && i < n; ++i)
    if (std::memcmp(&edges[i], &none, sizeof none) != 0) return false;
  return true;
}
}  // namespace sim

// cuGraphAddNode (CUDA 12.2) and cuGraphAddNode_v2 (12.3, with edge data):
// the generic route, which libraries use for every node type. The sim
// models the types it models elsewhere that need no function or event:
// empty, memset, and the memory nodes (the route to graph memory that
// cuGraphAddMemAllocNode's hook would not see); other types answer "not
// supported", like every call the sim does not model.
static CUresult add_generic(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                            size_t n, CUgraphNodeParams* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (!default_edges(edges, n)) return CUDA_ERROR_NOT_SUPPORTED;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return add_empty(out, g, deps, n);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = p->memset;
      const CUDA_MEMSET_NODE_PARAMS v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      return add_memset(out, g, deps, n, &v1, m.ctx);
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      // The same layout: CUDA_MEM_ALLOC_NODE_PARAMS_v2 is v1's (cuda.h).
      static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v1) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2));
      return add_mem_alloc(out, g, deps, n, reinterpret_cast<CUDA_MEM_ALLOC_NODE_PARAMS*>(&p->alloc));
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return add_mem_free(out, g, deps, n, p->free.dptr);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}
CUresult CUDAAPI cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                CUgraphNodeParams* p) {
  return add_generic(out, g, deps, nullptr, n, p);
}
CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                   const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* p) {
  return add_generic(out, g, deps, edges, n, p);
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(graph_mu());
  auto* n = reinterpret_cast<GraphNode*>(h);
  if (!reg().nodes.count(n) || n->kind != NodeKind::MemAlloc) return CUDA_ERROR_INVALID_VALUE;
  *out = CUDA_MEM_ALLOC_NODE_PARAMS{};
  out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  out->poolProps.location.id = n->alloc->dev->ordinal;
  out->bytesize = n->alloc->size;
  out->dptr = n->alloc->base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode h, CUdeviceptr* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(graph_mu());
  auto* n = reinterpret_cast<GraphNode*>(h);
  if (!reg().nodes.count(n) || n->kind != NodeKind::MemFree) return CUDA_ERROR_INVALID_VALUE;
  *out = n->free_ptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(graph_mu());
  auto* n = reinterpret_cast<GraphNode*>(h);
  if (!reg().nodes.count(n)) return CUDA_ERROR_INVALID_VALUE;
  *out = static_cast<CUgraphNodeType>(n->kind);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph h, CUgraphNode* nodes, size_t* num) {
  if (!num) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(graph_mu());
  Graph* g = find_graph_locked(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  // "If nodes is NULL, this function will return the number of nodes in
  // numNodes. Otherwise, numNodes entries will be filled in."
  if (nodes) {
    const std::size_t k = std::min(*num, g->nodes.size());
    for (std::size_t i = 0; i < k; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
    for (std::size_t i = k; i < *num; ++i) nodes[i] = nullptr;
  }
  if (!nodes || *num > g->nodes.size()) *num = g->nodes.size();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* x, CUgraph g, unsigned long long flags) {
  return instantiate(x, g, flags);
}
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* x, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  if (err) *err = nullptr;
  if (log && n) log[0] = '\0';
  return instantiate(x, g, 0);
}
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* x, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  return cuGraphInstantiate(x, g, err, log, n);
}
static CUresult instantiate_with_params(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p, bool pt) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = instantiate(x, g, p->flags);
  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: "Automatically upload the graph
  // after instantiation" into hUploadStream.
  if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) r = upload(*x, p->hUploadStream, pt);
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  p->hErrNode_out = nullptr;
  return r;
}
CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_with_params(x, g, p, false);
}
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_with_params(x, g, p, true);
}
CUresult CUDAAPI cuGraphUpload(CUgraphExec x, CUstream s) { return upload(x, s, false); }
CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec x, CUstream s) { return upload(x, s, true); }
CUresult CUDAAPI cuGraphLaunch(CUgraphExec x, CUstream s) { return launch(x, s, false); }
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec x, CUstream s) { return launch(x, s, true); }
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec x) { return exec_destroy(x); }

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice d) {
  Device* dev = nullptr;
  if (CUresult r = device_of_ordinal(d, &dev)) return r;
  std::lock_guard<std::mutex> lk(graph_mu());
  // "Blocks which are not in use by a graph that is either currently
  // executing or scheduled to execute are freed back to the operating
  // system": an idle executable graph with no allocation outstanding gives
  // its memory back too (its next launch takes it again).
  for (auto& e : reg().execs) {
    GraphExec& x = *e.second;
    if (x.dev != dev || x.in_flight || !x.backing) continue;
    if (std::any_of(x.allocs.begin(), x.allocs.end(), [](const auto& a) { return a->outstanding; })) continue;
    reg().pools[dev].cached += x.backing;
    x.backing = 0;
  }
  release_cache_locked(dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute attr, void* value) {
  count(Counter::graph_mem_attribute);
  Device* dev = nullptr;
  if (CUresult r = device_of_ordinal(d, &dev)) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(graph_mu());
  const GraphPool& gp = reg().pools[dev];
  cuuint64_t v = 0;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: v = gp.used; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: v = gp.used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: v = gp.reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: v = gp.reserved_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(value, &v, sizeof v);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice d, CUgraphMem_attribute attr, void* value) {
  Device* dev = nullptr;
  if (CUresult r = device_of_ordinal(d, &dev)) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t v = 0;
  std::memcpy(&v, value, sizeof v);
  // Only the high watermarks, and "High watermark can only be reset to zero."
  if (v != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(graph_mu());
  GraphPool& gp = reg().pools[dev];
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: gp.used_high = gp.used; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: gp.reserved_high = gp.reserved; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
