// The driver's graph calls that change the device's graph memory (issue 31):
// memory nodes (cuGraphAddMemAllocNode, and stream-ordered allocations
// captured into a graph, which allocate() hands to note_graph_node),
// instantiation, upload, launch, destruction and cuDeviceGraphMemTrim.
// Every runtime reaches them through cuGetProcAddress (cudaGraphLaunch →
// cuGraphLaunch), so only the driver's are hooked, as for capture.
//
// Graph memory is not the program's allocations nor our pool's: the driver
// backs an executable graph's allocation nodes from the device's graph
// memory pool when the graph is uploaded or first launched, and keeps it
// until cuDeviceGraphMemTrim ("Graph Memory Nodes", CUDA Programming Guide).
// Only cuDeviceGetGraphMemAttribute can say how much: it is asked after
// each call that can change it, and a `graph_mem` line is written only when
// the answer changed (launches are frequent in graph-heavy programs).
#define __CUDA_API_VERSION_INTERNAL 1  // declares the legacy and _ptsz ABIs too
#include <atomic>
#include <mutex>

#include <cuda.h>

#include "hooks/capture.h"
#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"
#include "hooks/tables.h"

using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

namespace {

constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;

NextSymbol<decltype(&::cuDeviceGetGraphMemAttribute)> next_graph_mem_attribute{"cuDeviceGetGraphMemAttribute"};
NextSymbol<decltype(&::cuStreamGetCaptureInfo_v3)> next_capture_info_v3{"cuStreamGetCaptureInfo_v3"};
NextSymbol<decltype(&::cuStreamGetCaptureInfo_v2)> next_capture_info_v2{"cuStreamGetCaptureInfo_v2"};

// Whether any graph of the process was given a memory node through a route
// we hook (cuGraphAddMemAllocNode, cuGraphAddNode of type MEM_ALLOC, a
// stream-ordered allocation captured). Until then the device's graph memory
// is 0 and stays 0, so the calls that could change it skip the two
// attribute queries: graph launches are frequent, and most graphs have no
// memory node (PyTorch's torch.cuda.graphs serve a captured step from its
// caching allocator's private pool).
std::atomic<bool> g_memory_nodes_seen{false};

void note_memory_node() noexcept { g_memory_nodes_seen.store(true, std::memory_order_release); }

// The last figures written per device: equal figures are not written again.
// Starting at 0 and 0, a program that never has graph memory gets no line.
struct LastGraphMemory {
  std::atomic<std::uint64_t> used{0};
  std::atomic<std::uint64_t> reserved{0};
};
LastGraphMemory g_last[Recorder::kMaxDevices];
std::mutex g_write_mu;  // only when the figures changed: keeps lines in order

void sample_graph_memory(const char* api, int dev) noexcept {
  try {
    auto* get = next_graph_mem_attribute.get();
    if (!get || dev < 0 || dev >= Recorder::kMaxDevices) return;
    cuuint64_t used = 0;
    cuuint64_t reserved = 0;
    if (get(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS ||
        get(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) {
      return;
    }
    LastGraphMemory& last = g_last[dev];
    auto unchanged = [&] {
      return last.used.load(std::memory_order_relaxed) == used &&
             last.reserved.load(std::memory_order_relaxed) == reserved;
    };
    if (unchanged()) return;  // the launch's usual case: no lock, no line
    std::lock_guard<std::mutex> lk(g_write_mu);
    if (unchanged()) return;
    last.used.store(used, std::memory_order_relaxed);
    last.reserved.store(reserved, std::memory_order_relaxed);
    recorder().on_graph_mem(api, dev, used, reserved);
  } catch (...) {
  }
}

// After a call that may change the graph memory of `dev` (trim) or of the
// current device (the others): nothing at all, not even the device's
// lookup, until a memory node exists.
void sample_graph_memory_of(const char* api, int dev) noexcept {
  if (g_memory_nodes_seen.load(std::memory_order_acquire)) sample_graph_memory(api, dev);
}
void sample_current_graph_memory(const char* api) noexcept {
  if (g_memory_nodes_seen.load(std::memory_order_acquire)) sample_graph_memory(api, current_device());
}

// The graph a capturing stream is capturing into, or 0.
std::uintptr_t capturing_graph(std::uintptr_t stream) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  CUresult rc = kNoDriver;
  const auto h = reinterpret_cast<CUstream>(stream);
  if (auto* v3 = next_capture_info_v3.get()) {
    rc = v3(h, &status, nullptr, &graph, nullptr, nullptr, nullptr);
  } else if (auto* v2 = next_capture_info_v2.get()) {
    rc = v2(h, &status, nullptr, &graph, nullptr, nullptr);
  }
  if (rc != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return 0;
  return reinterpret_cast<std::uintptr_t>(graph);
}

// Calls that need the recorder but create nothing record nothing when the
// call failed, and never throw into the program.
template <typename F>
void guarded(F&& f) noexcept {
  try {
    f();
  } catch (...) {
  }
}

CUresult instantiate_done(const char* api, CUresult rc, CUgraphExec* exec, CUgraph graph) {
  if (rc != CUDA_SUCCESS || !exec) return rc;
  guarded([&] {
    recorder().on_graph_exec(api, reinterpret_cast<std::uintptr_t>(graph), reinterpret_cast<std::uintptr_t>(*exec));
  });
  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD backs the graph's memory at once.
  sample_current_graph_memory(api);
  return rc;
}

// cuGraphInstantiate (CUDA 10.0) and cuGraphInstantiate_v2 (11.0): error
// node and log buffer; no flags.
template <const char* Api>
CUresult instantiate_logged(decltype(&::cuGraphInstantiate_v2) real, CUgraphExec* exec, CUgraph graph,
                            CUgraphNode* error_node, char* log, size_t log_size) {
  if (!real) return kNoDriver;
  return instantiate_done(Api, real(exec, graph, error_node, log, log_size), exec, graph);
}

CUresult instantiate_flags(decltype(&::cuGraphInstantiateWithFlags) real, CUgraphExec* exec, CUgraph graph,
                           unsigned long long flags) {
  if (!real) return kNoDriver;
  return instantiate_done("cuGraphInstantiateWithFlags", real(exec, graph, flags), exec, graph);
}

template <bool PerThread>
CUresult instantiate_params(decltype(&::cuGraphInstantiateWithParams) real, CUgraphExec* exec, CUgraph graph,
                            CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (!real) return kNoDriver;
  return instantiate_done(PerThread ? "cuGraphInstantiateWithParams_ptsz" : "cuGraphInstantiateWithParams",
                          real(exec, graph, params), exec, graph);
}

template <bool PerThread>
CUresult upload(decltype(&::cuGraphUpload) real, CUgraphExec exec, CUstream stream) {
  if (!real) return kNoDriver;
  const CUresult rc = real(exec, stream);
  if (rc == CUDA_SUCCESS) sample_current_graph_memory(PerThread ? "cuGraphUpload_ptsz" : "cuGraphUpload");
  return rc;
}

template <bool PerThread>
CUresult launch(decltype(&::cuGraphLaunch) real, CUgraphExec exec, CUstream stream) {
  if (!real) return kNoDriver;
  const CUresult rc = real(exec, stream);
  if (rc != CUDA_SUCCESS) return rc;
  const char* api = PerThread ? "cuGraphLaunch_ptsz" : "cuGraphLaunch";
  guarded([&] { recorder().on_graph_launch(api, reinterpret_cast<std::uintptr_t>(exec)); });
  sample_current_graph_memory(api);
  return rc;
}

CUresult exec_destroy(decltype(&::cuGraphExecDestroy) real, CUgraphExec exec) {
  if (!real) return kNoDriver;
  const CUresult rc = real(exec);
  if (rc != CUDA_SUCCESS) return rc;
  guarded([&] { recorder().on_graph_destroy("cuGraphExecDestroy", 0, reinterpret_cast<std::uintptr_t>(exec)); });
  sample_current_graph_memory("cuGraphExecDestroy");
  return rc;
}

CUresult graph_destroy(decltype(&::cuGraphDestroy) real, CUgraph graph) {
  if (!real) return kNoDriver;
  const CUresult rc = real(graph);
  if (rc == CUDA_SUCCESS) {
    guarded([&] { recorder().on_graph_destroy("cuGraphDestroy", reinterpret_cast<std::uintptr_t>(graph), 0); });
  }
  return rc;
}

CUresult trim(decltype(&::cuDeviceGraphMemTrim) real, CUdevice device) {
  if (!real) return kNoDriver;
  const CUresult rc = real(device);
  if (rc == CUDA_SUCCESS) sample_graph_memory_of("cuDeviceGraphMemTrim", static_cast<int>(device));
  return rc;
}

CUresult add_mem_alloc_node(decltype(&::cuGraphAddMemAllocNode) real, CUgraphNode* node, CUgraph graph,
                            const CUgraphNode* deps, size_t n, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (!real) return kNoDriver;
  const CUresult rc = real(node, graph, deps, n, params);
  if (rc == CUDA_SUCCESS && params) {
    note_memory_node();
    guarded([&] {
      recorder().on_graph_alloc("cuGraphAddMemAllocNode", params->poolProps.location.id,
                                reinterpret_cast<std::uintptr_t>(graph), static_cast<std::uintptr_t>(params->dptr),
                                params->bytesize);
    });
  }
  return rc;
}

// cuGraphAddNode: the generic route (CUDA 12.2; _v2, 12.3, adds edge data),
// by which a library may add a memory node too.
void added_node(const char* api, CUgraph graph, const CUgraphNodeParams* params) noexcept {
  if (!params || params->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return;
  note_memory_node();
  guarded([&] {
    recorder().on_graph_alloc(api, params->alloc.poolProps.location.id, reinterpret_cast<std::uintptr_t>(graph),
                              static_cast<std::uintptr_t>(params->alloc.dptr), params->alloc.bytesize);
  });
}

CUresult add_node_v1(CUresult (*real)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*),
                     CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraphNodeParams* params) {
  if (!real) return kNoDriver;
  const CUresult rc = real(node, graph, deps, n, params);
  if (rc == CUDA_SUCCESS) added_node("cuGraphAddNode", graph, params);
  return rc;
}

CUresult add_node_v2(decltype(&::cuGraphAddNode_v2) real, CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                     const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* params) {
  if (!real) return kNoDriver;
  const CUresult rc = real(node, graph, deps, edges, n, params);
  if (rc == CUDA_SUCCESS) added_node("cuGraphAddNode", graph, params);
  return rc;
}

constexpr char kInstantiate[] = "cuGraphInstantiate";
constexpr char kInstantiateV2[] = "cuGraphInstantiate_v2";

}  // namespace

bool cumemtrace::preload::note_graph_node(const AllocRequest& request, std::uintptr_t ptr,
                                          std::size_t size) noexcept {
  try {
    const std::uintptr_t graph = capturing_graph(*request.stream);
    if (graph == 0) return false;
    note_memory_node();
    // The node's device: the capture's context, current while it captures.
    recorder().on_graph_alloc(request.api, request.dev >= 0 ? request.dev : current_device(), graph, ptr, size);
    return true;
  } catch (...) {
    return false;
  }
}

#define CUMEMTRACE_GRAPH_EXPORT(NAME, BODY, PARAMS, ...)   \
  static NextSymbol<decltype(&::NAME)> next_##NAME{#NAME}; \
  CUMEMTRACE_HOOK CUresult CUDAAPI NAME PARAMS { return BODY(next_##NAME.get(), __VA_ARGS__); }

CUMEMTRACE_GRAPH_EXPORT(cuGraphInstantiate, instantiate_logged<kInstantiate>,
                        (CUgraphExec * exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t n), exec,
                        graph, error_node, log, n)
CUMEMTRACE_GRAPH_EXPORT(cuGraphInstantiate_v2, instantiate_logged<kInstantiateV2>,
                        (CUgraphExec * exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t n), exec,
                        graph, error_node, log, n)
CUMEMTRACE_GRAPH_EXPORT(cuGraphInstantiateWithFlags, instantiate_flags,
                        (CUgraphExec * exec, CUgraph graph, unsigned long long flags), exec, graph, flags)
CUMEMTRACE_GRAPH_EXPORT(cuGraphInstantiateWithParams, instantiate_params<false>,
                        (CUgraphExec * exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params), exec, graph,
                        params)
CUMEMTRACE_GRAPH_EXPORT(cuGraphInstantiateWithParams_ptsz, instantiate_params<true>,
                        (CUgraphExec * exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params), exec, graph,
                        params)
CUMEMTRACE_GRAPH_EXPORT(cuGraphUpload, upload<false>, (CUgraphExec exec, CUstream stream), exec, stream)
CUMEMTRACE_GRAPH_EXPORT(cuGraphUpload_ptsz, upload<true>, (CUgraphExec exec, CUstream stream), exec, stream)
CUMEMTRACE_GRAPH_EXPORT(cuGraphLaunch, launch<false>, (CUgraphExec exec, CUstream stream), exec, stream)
CUMEMTRACE_GRAPH_EXPORT(cuGraphLaunch_ptsz, launch<true>, (CUgraphExec exec, CUstream stream), exec, stream)
CUMEMTRACE_GRAPH_EXPORT(cuGraphExecDestroy, exec_destroy, (CUgraphExec exec), exec)
CUMEMTRACE_GRAPH_EXPORT(cuGraphDestroy, graph_destroy, (CUgraph graph), graph)
CUMEMTRACE_GRAPH_EXPORT(cuDeviceGraphMemTrim, trim, (CUdevice device), device)
// cuGraphAddNode's CUDA 12.2 ABI (cudaTypedefs.h: PFN_cuGraphAddNode_v12020).
using AddNodeV1 = CUresult(CUDAAPI*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
static NextSymbol<AddNodeV1> next_cuGraphAddNode{"cuGraphAddNode"};
CUMEMTRACE_HOOK CUresult CUDAAPI cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                                CUgraphNodeParams* params) {
  return add_node_v1(next_cuGraphAddNode.get(), node, graph, deps, n, params);
}
CUMEMTRACE_GRAPH_EXPORT(cuGraphAddNode_v2, add_node_v2,
                        (CUgraphNode * node, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                         size_t n, CUgraphNodeParams* params),
                        node, graph, deps, edges, n, params)
CUMEMTRACE_GRAPH_EXPORT(cuGraphAddMemAllocNode, add_mem_alloc_node,
                        (CUgraphNode * node, CUgraph graph, const CUgraphNode* deps, size_t n,
                         CUDA_MEM_ALLOC_NODE_PARAMS* params),
                        node, graph, deps, n, params)

#define ROW(NAME, BASE, VERSION, PT, BODY) \
  {#NAME, BASE, VERSION, PT, &wrap_with<&BODY>, reinterpret_cast<void*>(&::NAME), &resolved<next_##NAME>}

// Versions: the PFN_ typedefs of cudaTypedefs.h. cuGetProcAddress's
// "cuGraphInstantiate" is the flags ABI from 12.0 (cuda.h: #define
// cuGraphInstantiate cuGraphInstantiateWithFlags), the logged one before.
static const InterceptedSymbol kGraphSymbols[] = {
    ROW(cuGraphInstantiate, "cuGraphInstantiate", 10000, false, instantiate_logged<kInstantiate>),
    ROW(cuGraphInstantiate_v2, "cuGraphInstantiate", 11000, false, instantiate_logged<kInstantiateV2>),
    ROW(cuGraphInstantiateWithFlags, "cuGraphInstantiate", 12000, false, instantiate_flags),
    ROW(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, false, instantiate_flags),
    ROW(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, false, instantiate_params<false>),
    ROW(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams", 12000, true, instantiate_params<true>),
    ROW(cuGraphUpload, "cuGraphUpload", 11010, false, upload<false>),
    ROW(cuGraphUpload_ptsz, "cuGraphUpload", 11010, true, upload<true>),
    ROW(cuGraphLaunch, "cuGraphLaunch", 10000, false, launch<false>),
    ROW(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, true, launch<true>),
    ROW(cuGraphExecDestroy, "cuGraphExecDestroy", 10000, false, exec_destroy),
    ROW(cuGraphDestroy, "cuGraphDestroy", 10000, false, graph_destroy),
    ROW(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, false, trim),
    ROW(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 11040, false, add_mem_alloc_node),
    ROW(cuGraphAddNode, "cuGraphAddNode", 12020, false, add_node_v1),
    ROW(cuGraphAddNode_v2, "cuGraphAddNode", 12030, false, add_node_v2),
};

std::span<const InterceptedSymbol> cumemtrace::preload::graph_symbols() { return kGraphSymbols; }
