// Runtime stream capture and graphs: thin forwards to the driver (through
// cuGetProcAddress, as every runtime call), which models them
// (driver/drv_capture.cpp, driver/drv_graph.cpp). cudaGraph_t,
// cudaGraphNode_t and cudaGraphExec_t are the driver's handles, as in the
// real runtime.
#include "rt_internal.h"

using rt::drv;

namespace {

CUstream cs(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
CUgraph cg(cudaGraph_t g) { return reinterpret_cast<CUgraph>(g); }
CUgraphExec cx(cudaGraphExec_t x) { return reinterpret_cast<CUgraphExec>(x); }
const CUgraphNode* cn(const cudaGraphNode_t* n) { return reinterpret_cast<const CUgraphNode*>(n); }
CUgraphNode* cn(cudaGraphNode_t* n) { return reinterpret_cast<CUgraphNode*>(n); }

template <typename F>
cudaError_t call(F f) {
  RT_REQUIRE_CTX();
  return rt::ret(f());
}

}  // namespace

#define SIM_RT_PT_PAIR(NAME, PARAMS, CALL, CALL_PT)                       \
  cudaError_t CUDARTAPI NAME PARAMS { return call([&] { return CALL; }); } \
  cudaError_t CUDARTAPI NAME##_ptsz PARAMS { return call([&] { return CALL_PT; }); }

// cudaStreamCaptureMode and CUstreamCaptureMode, cudaStreamCaptureStatus
// and CUstreamCaptureStatus have the same values.
SIM_RT_PT_PAIR(cudaStreamBeginCapture, (cudaStream_t s, cudaStreamCaptureMode mode),
               drv().cuStreamBeginCapture_v2(cs(s), static_cast<CUstreamCaptureMode>(mode)),
               drv().cuStreamBeginCapture_v2_ptsz(cs(s), static_cast<CUstreamCaptureMode>(mode)))
SIM_RT_PT_PAIR(cudaStreamBeginCaptureToGraph,
               (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps, const cudaGraphEdgeData* edges, size_t n,
                cudaStreamCaptureMode mode),
               drv().cuStreamBeginCaptureToGraph(cs(s), cg(g), cn(deps),
                                                 reinterpret_cast<const CUgraphEdgeData*>(edges), n,
                                                 static_cast<CUstreamCaptureMode>(mode)),
               drv().cuStreamBeginCaptureToGraph_ptsz(cs(s), cg(g), cn(deps),
                                                      reinterpret_cast<const CUgraphEdgeData*>(edges), n,
                                                      static_cast<CUstreamCaptureMode>(mode)))
SIM_RT_PT_PAIR(cudaStreamEndCapture, (cudaStream_t s, cudaGraph_t* g),
               drv().cuStreamEndCapture(cs(s), reinterpret_cast<CUgraph*>(g)),
               drv().cuStreamEndCapture_ptsz(cs(s), reinterpret_cast<CUgraph*>(g)))
SIM_RT_PT_PAIR(cudaStreamIsCapturing, (cudaStream_t s, cudaStreamCaptureStatus* st),
               drv().cuStreamIsCapturing(cs(s), reinterpret_cast<CUstreamCaptureStatus*>(st)),
               drv().cuStreamIsCapturing_ptsz(cs(s), reinterpret_cast<CUstreamCaptureStatus*>(st)))
SIM_RT_PT_PAIR(cudaStreamGetCaptureInfo,
               (cudaStream_t s, cudaStreamCaptureStatus* st, unsigned long long* id, cudaGraph_t* g,
                const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges, size_t* n),
               drv().cuStreamGetCaptureInfo_v3(cs(s), reinterpret_cast<CUstreamCaptureStatus*>(st), reinterpret_cast<cuuint64_t*>(id),
                                               reinterpret_cast<CUgraph*>(g),
                                               reinterpret_cast<const CUgraphNode**>(deps),
                                               reinterpret_cast<const CUgraphEdgeData**>(edges), n),
               drv().cuStreamGetCaptureInfo_v3_ptsz(cs(s), reinterpret_cast<CUstreamCaptureStatus*>(st), reinterpret_cast<cuuint64_t*>(id),
                                                    reinterpret_cast<CUgraph*>(g),
                                                    reinterpret_cast<const CUgraphNode**>(deps),
                                                    reinterpret_cast<const CUgraphEdgeData**>(edges), n))
SIM_RT_PT_PAIR(cudaGraphUpload, (cudaGraphExec_t x, cudaStream_t s), drv().cuGraphUpload(cx(x), cs(s)),
               drv().cuGraphUpload_ptsz(cx(x), cs(s)))
SIM_RT_PT_PAIR(cudaGraphLaunch, (cudaGraphExec_t x, cudaStream_t s), drv().cuGraphLaunch(cx(x), cs(s)),
               drv().cuGraphLaunch_ptsz(cx(x), cs(s)))
#undef SIM_RT_PT_PAIR

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (cudaError_t e = rt::init()) return rt::ret(e);
  return rt::ret(drv().cuThreadExchangeStreamCaptureMode(reinterpret_cast<CUstreamCaptureMode*>(mode)));
}

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t* g, unsigned int flags) {
  return call([&] { return drv().cuGraphCreate(reinterpret_cast<CUgraph*>(g), flags); });
}
cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t g) {
  return call([&] { return drv().cuGraphDestroy(cg(g)); });
}
cudaError_t CUDARTAPI cudaGraphAddEmptyNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                            size_t n) {
  return call([&] { return drv().cuGraphAddEmptyNode(cn(out), cg(g), cn(deps), n); });
}
cudaError_t CUDARTAPI cudaGraphAddMemsetNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                             size_t n, const cudaMemsetParams* p) {
  if (!p) return rt::ret(cudaErrorInvalidValue);
  CUDA_MEMSET_NODE_PARAMS d{};
  d.dst = reinterpret_cast<CUdeviceptr>(p->dst);
  d.pitch = p->pitch;
  d.value = p->value;
  d.elementSize = p->elementSize;
  d.width = p->width;
  d.height = p->height;
  return call([&] { return drv().cuGraphAddMemsetNode(cn(out), cg(g), cn(deps), n, &d, nullptr); });
}
cudaError_t CUDARTAPI cudaGraphAddMemcpyNode1D(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                               size_t n, void* dst, const void* src, size_t count,
                                               cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return rt::ret(cudaErrorInvalidMemcpyDirection);
  // Both sides as unified addresses: the driver tells host from device
  // memory by the address, which cudaMemcpyDefault asks for and the
  // explicit kinds agree with for valid arguments.
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  c.srcDevice = reinterpret_cast<CUdeviceptr>(src);
  c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  c.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
  c.WidthInBytes = count;
  c.Height = 1;
  c.Depth = 1;
  return call([&] { return drv().cuGraphAddMemcpyNode(cn(out), cg(g), cn(deps), n, &c, nullptr); });
}
cudaError_t CUDARTAPI cudaGraphAddMemAllocNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                               size_t n, cudaMemAllocNodeParams* p) {
  if (!p) return rt::ret(cudaErrorInvalidValue);
  CUDA_MEM_ALLOC_NODE_PARAMS d{};
  d.poolProps.allocType = static_cast<CUmemAllocationType>(p->poolProps.allocType);
  d.poolProps.location.type = static_cast<CUmemLocationType>(p->poolProps.location.type);
  d.poolProps.location.id = p->poolProps.location.id;
  d.bytesize = p->bytesize;
  const cudaError_t e = call([&] { return drv().cuGraphAddMemAllocNode(cn(out), cg(g), cn(deps), n, &d); });
  if (e == cudaSuccess) p->dptr = reinterpret_cast<void*>(d.dptr);
  return e;
}
cudaError_t CUDARTAPI cudaGraphAddMemFreeNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                              size_t n, void* dptr) {
  return call([&] {
    return drv().cuGraphAddMemFreeNode(cn(out), cg(g), cn(deps), n, reinterpret_cast<CUdeviceptr>(dptr));
  });
}
// cudaGraphAddNode: the node types the sim's driver models by this route
// (drv_graph.cpp: empty, memset, memory nodes), converted field by field;
// others are not simulated.
cudaError_t CUDARTAPI cudaGraphAddNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                       const cudaGraphEdgeData* edges, size_t n, cudaGraphNodeParams* p) {
  if (!p) return rt::ret(cudaErrorInvalidValue);
  CUgraphNodeParams d{};
  d.type = static_cast<CUgraphNodeType>(p->type);
  switch (p->type) {
    case cudaGraphNodeTypeEmpty:
      break;
    case cudaGraphNodeTypeMemset:
      d.memset.dst = reinterpret_cast<CUdeviceptr>(p->memset.dst);
      d.memset.pitch = p->memset.pitch;
      d.memset.value = p->memset.value;
      d.memset.elementSize = p->memset.elementSize;
      d.memset.width = p->memset.width;
      d.memset.height = p->memset.height;
      break;
    case cudaGraphNodeTypeMemAlloc:
      d.alloc.poolProps.allocType = static_cast<CUmemAllocationType>(p->alloc.poolProps.allocType);
      d.alloc.poolProps.location.type = static_cast<CUmemLocationType>(p->alloc.poolProps.location.type);
      d.alloc.poolProps.location.id = p->alloc.poolProps.location.id;
      d.alloc.bytesize = p->alloc.bytesize;
      break;
    case cudaGraphNodeTypeMemFree:
      d.free.dptr = reinterpret_cast<CUdeviceptr>(p->free.dptr);
      break;
    default:
      return rt::ret(cudaErrorNotSupported);
  }
  const cudaError_t e = call([&] {
    return drv().cuGraphAddNode_v2(cn(out), cg(g), cn(deps), reinterpret_cast<const CUgraphEdgeData*>(edges), n, &d);
  });
  if (e == cudaSuccess && p->type == cudaGraphNodeTypeMemAlloc) p->alloc.dptr = reinterpret_cast<void*>(d.alloc.dptr);
  return e;
}
cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* num) {
  return call([&] { return drv().cuGraphGetNodes(cg(g), cn(nodes), num); });
}
cudaError_t CUDARTAPI cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  // cudaGraphNodeType and CUgraphNodeType have the same values.
  return call([&] {
    return drv().cuGraphNodeGetType(reinterpret_cast<CUgraphNode>(node), reinterpret_cast<CUgraphNodeType*>(type));
  });
}
cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long flags) {
  return call([&] { return drv().cuGraphInstantiateWithFlags(reinterpret_cast<CUgraphExec*>(x), cg(g), flags); });
}
cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long flags) {
  return cudaGraphInstantiate(x, g, flags);
}
cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t x) {
  return call([&] { return drv().cuGraphExecDestroy(cx(x)); });
}
cudaError_t CUDARTAPI cudaDeviceGraphMemTrim(int device) {
  return call([&] { return drv().cuDeviceGraphMemTrim(device); });
}
// cudaGraphMemAttributeType and CUgraphMem_attribute have the same values.
cudaError_t CUDARTAPI cudaDeviceGetGraphMemAttribute(int device, cudaGraphMemAttributeType attr, void* value) {
  return call([&] {
    return drv().cuDeviceGetGraphMemAttribute(device, static_cast<CUgraphMem_attribute>(attr), value);
  });
}
cudaError_t CUDARTAPI cudaDeviceSetGraphMemAttribute(int device, cudaGraphMemAttributeType attr, void* value) {
  return call([&] {
    return drv().cuDeviceSetGraphMemAttribute(device, static_cast<CUgraphMem_attribute>(attr), value);
  });
}
