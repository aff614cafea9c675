// Stream capture with memory nodes, relaunched while the program holds
// stamped buffers (issue 31). Run bare on the sim and under the preload
// (caching pool, passthrough): a capture-time cudaMallocAsync served from the
// pool would be handed back at the captured cudaFreeAsync, the next request
// could get the same block, and every launch's captured memset would
// overwrite that buffer's stamp. The first section makes that reuse certain
// (the stream's own cache, stream_cache_relaunch); in the second the
// stream's cache is empty, and a pool that served the request would have to
// grow, order the device and synchronise it, which a global capture forbids
// (so it fails at the captured memset instead). Also: cudaMalloc in a
// global-mode capture fails and invalidates it; in relaxed mode it
// succeeds; trim gives the graph pool's memory back. The same reuse through
// cudaStreamBeginCaptureToGraph, and a memory node added by cudaGraphAddNode.
// Exit 0 when every check holds, 1 with one line otherwise.
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "simcuda_counters.h"

__global__ void touch(unsigned char* p) { p[threadIdx.x] = 1; }

#define CHECK(cond, ...)                      \
  do {                                        \
    if (!(cond)) {                            \
      std::printf("FAIL: " __VA_ARGS__);      \
      std::printf("\n");                      \
      return 1;                               \
    }                                         \
  } while (0)

constexpr size_t kSize = 1 << 20;

// Every byte of `p` (device, kSize) equals `stamp`.
bool stamp_intact(const void* p, unsigned char stamp, std::vector<unsigned char>& host, size_t* bad) {
  if (cudaMemcpy(host.data(), p, kSize, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (size_t b = 0; b < kSize; ++b) {
    if (host[b] != stamp) {
      *bad = b;
      return false;
    }
  }
  return true;
}

// Instantiates `graph` (whose capture-time buffer is memset), allocates a
// buffer of the program's on s and stamps it, launches twice, and checks the
// stamp; then frees and destroys everything.
int relaunch_over_stamp(cudaStream_t s, cudaGraph_t graph, unsigned char stamp, const char* what,
                        std::vector<unsigned char>& host) {
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "%s instantiate", what);
  void* held = nullptr;
  CHECK(cudaMallocAsync(&held, kSize, s) == cudaSuccess, "%s held malloc", what);
  CHECK(cudaMemsetAsync(held, stamp, kSize, s) == cudaSuccess, "%s stamp", what);
  for (int launch = 0; launch < 2; ++launch) CHECK(cudaGraphLaunch(exec, s) == cudaSuccess, "%s launch", what);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "%s sync", what);
  size_t bad = 0;
  CHECK(stamp_intact(held, stamp, host, &bad), "%s: stamp of the stream-ordered buffer corrupted at byte %zu: 0x%02x",
        what, bad, host[bad]);
  CHECK(cudaFreeAsync(held, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess, "%s held free", what);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess, "%s destroy", what);
  return 0;
}

// The stream's own cache: a pool serves cudaMallocAsync on s from blocks
// freed on s without any ordering of the device, so a capture-time request
// served from it would succeed, and its address, handed back at the
// captured free, goes to the next cudaMallocAsync on s: the program's
// stamped buffer, which every launch's memset then overwrites.
int stream_cache_relaunch(cudaStream_t s, std::vector<unsigned char>& host) {
  void* warm = nullptr;
  CHECK(cudaMallocAsync(&warm, kSize, s) == cudaSuccess && cudaFreeAsync(warm, s) == cudaSuccess, "warm async");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "warm sync");
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "stream-cache begin");
  void* tmp = nullptr;
  CHECK(cudaMallocAsync(&tmp, kSize, s) == cudaSuccess, "stream-cache capture malloc");
  CHECK(cudaMemsetAsync(tmp, 0xEE, kSize, s) == cudaSuccess, "stream-cache capture memset");
  CHECK(cudaFreeAsync(tmp, s) == cudaSuccess, "stream-cache capture free");
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "stream-cache end");
  return relaunch_over_stamp(s, graph, 0x5A, "stream-cache", host);
}

// cudaStreamBeginCaptureToGraph (CUDA 12.3): the same reuse made certain,
// capturing into a graph the program made, behind a node of its own. A
// pool that did not know this capture began would serve the request from
// the stream's cache, as above.
int capture_to_graph_relaunch(cudaStream_t s, std::vector<unsigned char>& host) {
  void* warm = nullptr;
  CHECK(cudaMallocAsync(&warm, kSize, s) == cudaSuccess && cudaFreeAsync(warm, s) == cudaSuccess, "to-graph warm");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "to-graph warm sync");
  cudaGraph_t graph;
  cudaGraphNode_t first;
  CHECK(cudaGraphCreate(&graph, 0) == cudaSuccess && cudaGraphAddEmptyNode(&first, graph, nullptr, 0) == cudaSuccess,
        "to-graph create");
  CHECK(cudaStreamBeginCaptureToGraph(s, graph, &first, nullptr, 1, cudaStreamCaptureModeGlobal) == cudaSuccess,
        "to-graph begin");
  void* tmp = nullptr;
  CHECK(cudaMallocAsync(&tmp, kSize, s) == cudaSuccess, "to-graph capture malloc");
  CHECK(cudaMemsetAsync(tmp, 0xEE, kSize, s) == cudaSuccess, "to-graph capture memset");
  CHECK(cudaFreeAsync(tmp, s) == cudaSuccess, "to-graph capture free");
  cudaGraph_t ended = nullptr;
  CHECK(cudaStreamEndCapture(s, &ended) == cudaSuccess && ended == graph, "to-graph end");
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess && nodes == 4, "to-graph: 4 nodes, got %zu", nodes);
  return relaunch_over_stamp(s, graph, 0x5B, "to-graph", host);
}

// cudaGraphAddNode (CUDA 12.3): a memory node added by the generic route, a
// memset into it and its free, launched once; its graph memory is in the
// trace like a captured one's.
int generic_memory_node(cudaStream_t s) {
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0) == cudaSuccess, "generic create");
  cudaGraphNodeParams alloc{};
  alloc.type = cudaGraphNodeTypeMemAlloc;
  alloc.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
  alloc.alloc.poolProps.location.type = cudaMemLocationTypeDevice;
  alloc.alloc.poolProps.location.id = 0;
  alloc.alloc.bytesize = kSize;
  cudaGraphNode_t a, m, f;
  CHECK(cudaGraphAddNode(&a, graph, nullptr, nullptr, 0, &alloc) == cudaSuccess && alloc.alloc.dptr, "generic alloc");
  cudaMemsetParams set{};
  set.dst = alloc.alloc.dptr;
  set.value = 0x77;
  set.elementSize = 1;
  set.width = kSize;
  set.height = 1;
  CHECK(cudaGraphAddMemsetNode(&m, graph, &a, 1, &set) == cudaSuccess, "generic memset");
  cudaGraphNodeParams free_node{};
  free_node.type = cudaGraphNodeTypeMemFree;
  free_node.free.dptr = alloc.alloc.dptr;
  CHECK(cudaGraphAddNode(&f, graph, &m, nullptr, 1, &free_node) == cudaSuccess, "generic free");
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "generic instantiate");
  CHECK(cudaGraphLaunch(exec, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess, "generic launch");
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess, "generic destroy");
  return 0;
}

// Before the process made any memory node, its graphs' launches cost no
// query of the device's graph memory (there is none to see): under the
// preload, whose graph hooks sample it after a launch once a memory node
// exists, the sim counts none here. Skipped on a GPU (no counters).
int launches_before_any_memory_node(cudaStream_t s) {
  void* buffer = nullptr;
  CHECK(cudaMalloc(&buffer, kSize) == cudaSuccess, "plain buffer");
  cudaGraph_t graph;
  cudaGraphNode_t set_node;
  cudaMemsetParams set{};
  set.dst = buffer;
  set.value = 0x33;
  set.elementSize = 1;
  set.width = kSize;
  set.height = 1;
  CHECK(cudaGraphCreate(&graph, 0) == cudaSuccess &&
            cudaGraphAddMemsetNode(&set_node, graph, nullptr, 0, &set) == cudaSuccess,
        "plain graph");
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "plain instantiate");
  SimcudaCounters before{}, after{};
  const bool counted = simcuda_counters_read(&before);
  for (int launch = 0; launch < 10; ++launch) CHECK(cudaGraphLaunch(exec, s) == cudaSuccess, "plain launch");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "plain sync");
  if (counted && simcuda_counters_read(&after) && after.size >= sizeof after) {
    CHECK(after.graph_mem_attribute == before.graph_mem_attribute,
          "10 launches without memory nodes queried the graph memory %llu times",
          after.graph_mem_attribute - before.graph_mem_attribute);
  }
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess, "plain destroy");
  CHECK(cudaFree(buffer) == cudaSuccess, "plain free");
  return 0;
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  std::vector<unsigned char> host(kSize);
  if (int rc = launches_before_any_memory_node(s)) return rc;
  if (int rc = stream_cache_relaunch(s, host)) return rc;
  if (int rc = capture_to_graph_relaunch(s, host)) return rc;
  if (int rc = generic_memory_node(s)) return rc;
  // Warm the pool: blocks of kSize cached after a free.
  void* warm[4];
  for (auto& w : warm) CHECK(cudaMalloc(&w, kSize) == cudaSuccess, "warm malloc");
  for (auto& w : warm) CHECK(cudaFree(w) == cudaSuccess, "warm free");

  // Capture: a stream-ordered allocation, a memset into it, a kernel, its free.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin");
  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive, "is capturing");
  void* tmp = nullptr;
  CHECK(cudaMallocAsync(&tmp, kSize, s) == cudaSuccess, "capture malloc");
  CHECK(cudaMemsetAsync(tmp, 0xEE, kSize, s) == cudaSuccess, "capture memset");
  touch<<<1, 32, 0, s>>>(static_cast<unsigned char*>(tmp));
  CHECK(cudaFreeAsync(tmp, s) == cudaSuccess, "capture free");
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "end");
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess && nodes == 4, "4 nodes, got %zu", nodes);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");

  // Buffers the program holds, stamped, allocated after the capture.
  std::vector<void*> held(4);
  for (size_t i = 0; i < held.size(); ++i) {
    CHECK(cudaMalloc(&held[i], kSize) == cudaSuccess, "held malloc");
    CHECK(cudaMemset(held[i], 0x10 + static_cast<int>(i), kSize) == cudaSuccess, "stamp");
  }
  for (int launch = 0; launch < 3; ++launch) CHECK(cudaGraphLaunch(exec, s) == cudaSuccess, "launch");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
  for (size_t i = 0; i < held.size(); ++i) {
    size_t bad = 0;
    CHECK(stamp_intact(held[i], static_cast<unsigned char>(0x10 + i), host, &bad),
          "stamp of buffer %zu corrupted at byte %zu: 0x%02x", i, bad, host[bad]);
  }
  unsigned long long reserved = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved) == cudaSuccess &&
            reserved > 0, "graph pool reserved after launch");
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess, "destroy");
  CHECK(cudaDeviceGraphMemTrim(0) == cudaSuccess, "trim");
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved) == cudaSuccess &&
            reserved == 0, "graph pool reserved after trim: %llu", static_cast<unsigned long long>(reserved));

  // Global mode: cudaMalloc is prohibited and invalidates the capture.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin 2");
  void* bad = nullptr;
  CHECK(cudaMalloc(&bad, kSize) == cudaErrorStreamCaptureUnsupported, "malloc in global capture");
  CHECK(cudaGetLastError() == cudaErrorStreamCaptureUnsupported, "last error");
  CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated && graph == nullptr, "invalidated");

  // Relaxed mode: allowed, served as usual, not captured.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess, "begin 3");
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess && mode == cudaStreamCaptureModeGlobal, "exchange");
  void* ok = nullptr;
  CHECK(cudaMalloc(&ok, kSize) == cudaSuccess, "malloc in relaxed capture");
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess, "exchange back");
  CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr, "relaxed end");
  CHECK(cudaGraphDestroy(graph) == cudaSuccess && cudaFree(ok) == cudaSuccess, "relaxed cleanup");

  // A captured free of memory from before the capture (a pool block under
  // the caching pool): CUDA refuses it and invalidates the capture
  // (cudaFreeAsync: "must ... be passed the address of a graph
  // allocation"); the memory stays the program's.
  void* earlier = nullptr;
  CHECK(cudaMallocAsync(&earlier, kSize, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess, "earlier");
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin 4");
  CHECK(cudaFreeAsync(earlier, s) == cudaErrorInvalidValue, "captured free of earlier memory refused");
  cudaGetLastError();
  CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated, "invalidated by the free");
  CHECK(cudaFreeAsync(earlier, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess, "earlier free");

  for (void* p : held) CHECK(cudaFree(p) == cudaSuccess, "free held");
  CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream destroy");
  std::printf("graph_capture: ok\n");
  return 0;
}
