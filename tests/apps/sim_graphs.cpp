// Stream capture and graphs on the sim (tests/sim/driver/drv_capture.cpp,
// drv_graph.cpp): a fork and join through events and what breaks one, the
// capture interaction modes across threads, a graph built by hand with
// memory nodes, the relaunch rules of graph allocations left unfreed, the
// device's graph memory, and a captured free of memory allocated before the
// capture. Rules and their sources: tests/sim/README.md, "Stream capture and
// graphs". Small buffers, no latency: it runs in milliseconds.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>
#include <thread>
#include <vector>

#include "sim_test.h"

namespace {

constexpr std::size_t kSize = 1 << 20;

cudaStreamCaptureStatus status_of(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  SIM_RT_OK(cudaStreamIsCapturing(s, &st));
  return st;
}

std::size_t node_count(cudaGraph_t g) {
  std::size_t n = 0;
  SIM_RT_OK(cudaGraphGetNodes(g, nullptr, &n));
  return n;
}

unsigned long long graph_mem(cudaGraphMemAttributeType attr) {
  unsigned long long v = 0;
  SIM_RT_OK(cudaDeviceGetGraphMemAttribute(0, attr, &v));
  return v;
}

bool all_bytes(const void* device, std::size_t n, unsigned char want) {
  std::vector<unsigned char> host(n);
  SIM_RT_OK(cudaMemcpy(host.data(), device, n, cudaMemcpyDeviceToHost));
  for (unsigned char b : host) {
    if (b != want) return false;
  }
  return true;
}

// Fork s2 from s1 with an event, work on both, join back: one graph whose
// launch runs both streams' work.
void fork_and_join(cudaStream_t s1, cudaStream_t s2) {
  void *a = nullptr, *b = nullptr;
  SIM_RT_OK(cudaMalloc(&a, kSize));
  SIM_RT_OK(cudaMalloc(&b, kSize));
  cudaEvent_t fork, join;
  SIM_RT_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  SIM_RT_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  SIM_RT_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  SIM_RT_OK(cudaEventRecord(fork, s1));
  SIM_CHECK(status_of(s2) == cudaStreamCaptureStatusNone);
  SIM_RT_OK(cudaStreamWaitEvent(s2, fork, 0));
  // The waiting stream joined the capture: same sequence id.
  SIM_CHECK(status_of(s2) == cudaStreamCaptureStatusActive);
  cudaStreamCaptureStatus st;
  unsigned long long id1 = 0, id2 = 0;
  SIM_RT_OK(cudaStreamGetCaptureInfo(s1, &st, &id1, nullptr, nullptr, nullptr, nullptr));
  SIM_RT_OK(cudaStreamGetCaptureInfo(s2, &st, &id2, nullptr, nullptr, nullptr, nullptr));
  SIM_CHECK(id1 == id2 && id1 != 0);
  // A captured event may not be waited for from the host.
  SIM_EXPECT_RT(cudaEventQuery(fork), cudaErrorCapturedEvent);
  SIM_RT_OK(cudaMemsetAsync(a, 0x11, kSize, s1));
  SIM_RT_OK(cudaMemsetAsync(b, 0x22, kSize, s2));
  // Only the joining stream may end it.
  cudaGraph_t graph = nullptr;
  SIM_EXPECT_RT(cudaStreamEndCapture(s2, &graph), cudaErrorStreamCaptureUnmatched);
  SIM_RT_OK(cudaEventRecord(join, s2));
  SIM_RT_OK(cudaStreamWaitEvent(s1, join, 0));
  // s1's next node would depend on both memsets.
  const cudaGraphNode_t* deps = nullptr;
  std::size_t ndeps = 0;
  SIM_RT_OK(cudaStreamGetCaptureInfo(s1, &st, nullptr, nullptr, &deps, nullptr, &ndeps));
  SIM_CHECK(ndeps == 2);
  SIM_RT_OK(cudaStreamEndCapture(s1, &graph));
  SIM_CHECK(graph != nullptr);
  SIM_CHECK(status_of(s2) == cudaStreamCaptureStatusNone);  // the end took every member out
  SIM_CHECK(node_count(graph) == 2);                          // records and waits are edges, not nodes

  cudaGraphExec_t exec;
  SIM_RT_OK(cudaGraphInstantiate(&exec, graph, 0));
  SIM_RT_OK(cudaGraphLaunch(exec, s1));
  SIM_RT_OK(cudaStreamSynchronize(s1));
  SIM_CHECK(all_bytes(a, kSize, 0x11) && all_bytes(b, kSize, 0x22));
  SIM_RT_OK(cudaGraphExecDestroy(exec));
  SIM_RT_OK(cudaGraphDestroy(graph));

  // A fork never joined: the end fails, returns no graph, and still ends it.
  SIM_RT_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  SIM_RT_OK(cudaEventRecord(fork, s1));
  SIM_RT_OK(cudaStreamWaitEvent(s2, fork, 0));
  SIM_RT_OK(cudaMemsetAsync(b, 0x33, kSize, s2));
  graph = reinterpret_cast<cudaGraph_t>(1);
  SIM_EXPECT_RT(cudaStreamEndCapture(s1, &graph), cudaErrorStreamCaptureUnjoined);
  SIM_CHECK(graph == nullptr);
  SIM_CHECK(status_of(s1) == cudaStreamCaptureStatusNone && status_of(s2) == cudaStreamCaptureStatusNone);

  // Waiting for work outside the capture crosses its boundary: refused, and
  // the capture is invalidated.
  SIM_RT_OK(cudaEventRecord(join, s2));
  SIM_RT_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  SIM_EXPECT_RT(cudaStreamWaitEvent(s1, join, 0), cudaErrorStreamCaptureIsolation);
  SIM_CHECK(status_of(s1) == cudaStreamCaptureStatusInvalidated);
  SIM_EXPECT_RT(cudaMemsetAsync(a, 0, kSize, s1), cudaErrorStreamCaptureInvalidated);
  SIM_EXPECT_RT(cudaStreamEndCapture(s1, &graph), cudaErrorStreamCaptureInvalidated);
  SIM_CHECK(graph == nullptr);

  // A synchronous wait on a capturing stream: refused and invalidating.
  SIM_RT_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  SIM_EXPECT_RT(cudaStreamSynchronize(s1), cudaErrorStreamCaptureUnsupported);
  SIM_CHECK(status_of(s1) == cudaStreamCaptureStatusInvalidated);
  SIM_EXPECT_RT(cudaStreamEndCapture(s1, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();

  SIM_RT_OK(cudaEventDestroy(fork));
  SIM_RT_OK(cudaEventDestroy(join));
  SIM_RT_OK(cudaFree(a));
  SIM_RT_OK(cudaFree(b));
}

// The legacy stream while a blocking stream captures.
void legacy_stream_while_blocking_capture() {
  cudaStream_t blocking;
  SIM_RT_OK(cudaStreamCreate(&blocking));
  void* p = nullptr;
  SIM_RT_OK(cudaMalloc(&p, kSize));
  SIM_RT_OK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed));
  cudaStreamCaptureStatus st;
  SIM_EXPECT_RT(cudaStreamIsCapturing(cudaStreamLegacy, &st), cudaErrorStreamCaptureImplicit);
  SIM_EXPECT_RT(cudaMemsetAsync(p, 0, kSize, cudaStreamLegacy), cudaErrorStreamCaptureImplicit);
  cudaGraph_t graph = nullptr;
  SIM_EXPECT_RT(cudaStreamEndCapture(blocking, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  SIM_RT_OK(cudaFree(p));
  SIM_RT_OK(cudaStreamDestroy(blocking));
}

// cudaMalloc's answer on another thread while `mode` captures here, that
// thread in `theirs`; then whether this capture survived.
void malloc_elsewhere(cudaStream_t s, cudaStreamCaptureMode mode, cudaStreamCaptureMode theirs, cudaError_t want,
                      cudaStreamCaptureStatus after) {
  SIM_RT_OK(cudaStreamBeginCapture(s, mode));
  cudaError_t got = cudaSuccess;
  std::thread other([&] {
    cudaStreamCaptureMode m = theirs;
    SIM_RT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    void* p = nullptr;
    got = cudaMalloc(&p, 4096);
    if (got == cudaSuccess) SIM_RT_OK(cudaFree(p));
    cudaGetLastError();
  });
  other.join();
  SIM_CHECK(got == want);
  SIM_CHECK(status_of(s) == after);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  SIM_CHECK(end == (after == cudaStreamCaptureStatusActive ? cudaSuccess : cudaErrorStreamCaptureInvalidated));
  if (graph) SIM_RT_OK(cudaGraphDestroy(graph));
  cudaGetLastError();
}

void capture_modes(cudaStream_t s) {
  // The capturing thread itself, in thread-local mode: prohibited.
  SIM_RT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  void* p = nullptr;
  SIM_EXPECT_RT(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  SIM_EXPECT_RT(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  const auto kGlobal = cudaStreamCaptureModeGlobal, kLocal = cudaStreamCaptureModeThreadLocal,
             kRelaxed = cudaStreamCaptureModeRelaxed;
  // A thread-local capture forbids nothing to other threads.
  malloc_elsewhere(s, kLocal, kGlobal, cudaSuccess, cudaStreamCaptureStatusActive);
  // A global one forbids it to every other thread in global mode, which
  // invalidates it; not to a thread in thread-local or relaxed mode.
  malloc_elsewhere(s, kGlobal, kGlobal, cudaErrorStreamCaptureUnsupported, cudaStreamCaptureStatusInvalidated);
  malloc_elsewhere(s, kGlobal, kLocal, cudaSuccess, cudaStreamCaptureStatusActive);
  malloc_elsewhere(s, kGlobal, kRelaxed, cudaSuccess, cudaStreamCaptureStatusActive);
}

// Alloc → memset → copy to the host → free, added by hand; launched twice.
void explicit_graph(cudaStream_t s) {
  cudaGraph_t graph;
  SIM_RT_OK(cudaGraphCreate(&graph, 0));
  cudaMemAllocNodeParams ap{};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = kSize;
  cudaGraphNode_t alloc, set, copy, free_node;
  SIM_RT_OK(cudaGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &ap));
  SIM_CHECK(ap.dptr != nullptr);
  cudaMemsetParams mp{};
  mp.dst = ap.dptr;
  mp.value = 0x44;
  mp.elementSize = 1;
  mp.width = kSize;
  mp.height = 1;
  SIM_RT_OK(cudaGraphAddMemsetNode(&set, graph, &alloc, 1, &mp));
  std::vector<unsigned char> host(kSize, 0);
  SIM_RT_OK(cudaGraphAddMemcpyNode1D(&copy, graph, &set, 1, host.data(), ap.dptr, kSize, cudaMemcpyDeviceToHost));
  SIM_RT_OK(cudaGraphAddMemFreeNode(&free_node, graph, &copy, 1, ap.dptr));
  // Freed twice in one graph, or memory no allocation node returned: refused.
  cudaGraphNode_t refused;
  SIM_EXPECT_RT(cudaGraphAddMemFreeNode(&refused, graph, &copy, 1, ap.dptr), cudaErrorInvalidValue);
  void* plain = nullptr;
  SIM_RT_OK(cudaMalloc(&plain, 4096));
  SIM_EXPECT_RT(cudaGraphAddMemFreeNode(&refused, graph, nullptr, 0, plain), cudaErrorInvalidValue);
  // A dependency repeated: refused.
  const cudaGraphNode_t twice[2] = {alloc, alloc};
  SIM_EXPECT_RT(cudaGraphAddEmptyNode(&refused, graph, twice, 2), cudaErrorInvalidValue);

  cudaGraphNode_t nodes[4];
  std::size_t n = 4;
  SIM_RT_OK(cudaGraphGetNodes(graph, nodes, &n));
  SIM_CHECK(n == 4);
  const cudaGraphNodeType want[4] = {cudaGraphNodeTypeMemAlloc, cudaGraphNodeTypeMemset, cudaGraphNodeTypeMemcpy,
                                     cudaGraphNodeTypeMemFree};
  for (int i = 0; i < 4; ++i) {
    cudaGraphNodeType t;
    SIM_RT_OK(cudaGraphNodeGetType(nodes[i], &t));
    SIM_CHECK(t == want[i]);
  }

  SIM_RT_OK(cudaDeviceGraphMemTrim(0));
  const unsigned long long reserved_before = graph_mem(cudaGraphMemAttrReservedMemCurrent);
  cudaGraphExec_t exec, second;
  SIM_RT_OK(cudaGraphInstantiate(&exec, graph, 0));
  // A graph with memory nodes has at most one executable graph at a time.
  SIM_EXPECT_RT(cudaGraphInstantiate(&second, graph, 0), cudaErrorInvalidValue);
  // Physical memory is taken at the first launch (or upload), not before.
  SIM_CHECK(graph_mem(cudaGraphMemAttrReservedMemCurrent) == reserved_before);
  SIM_RT_OK(cudaGraphLaunch(exec, s));
  SIM_RT_OK(cudaGraphLaunch(exec, s));  // freed in the graph: relaunch allowed
  SIM_RT_OK(cudaStreamSynchronize(s));
  for (unsigned char b : host) SIM_CHECK(b == 0x44);
  SIM_CHECK(graph_mem(cudaGraphMemAttrReservedMemCurrent) >= reserved_before + kSize);
  SIM_CHECK(graph_mem(cudaGraphMemAttrUsedMemCurrent) == 0);  // freed by its free node
  SIM_CHECK(graph_mem(cudaGraphMemAttrUsedMemHigh) >= kSize);
  // The graph's address is no ordinary allocation: cudaFree refuses it.
  SIM_EXPECT_RT(cudaFree(ap.dptr), cudaErrorInvalidValue);
  // Destroyed, its memory stays in the graph pool until a trim.
  SIM_RT_OK(cudaGraphExecDestroy(exec));
  SIM_CHECK(graph_mem(cudaGraphMemAttrReservedMemCurrent) >= reserved_before + kSize);
  SIM_RT_OK(cudaDeviceGraphMemTrim(0));
  SIM_CHECK(graph_mem(cudaGraphMemAttrReservedMemCurrent) == 0);
  SIM_RT_OK(cudaGraphDestroy(graph));
  SIM_RT_OK(cudaFree(plain));
}

// A graph whose allocation it does not free: relaunch rules and freeing it
// outside the graph, after the graph itself is gone.
void unfreed_allocation(cudaStream_t s) {
  SIM_RT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* p = nullptr;
  SIM_RT_OK(cudaMallocAsync(&p, kSize, s));
  SIM_RT_OK(cudaMemsetAsync(p, 0x55, kSize, s));
  cudaGraph_t graph;
  SIM_RT_OK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  SIM_RT_OK(cudaGraphInstantiate(&exec, graph, 0));
  SIM_RT_OK(cudaGraphLaunch(exec, s));
  SIM_EXPECT_RT(cudaGraphLaunch(exec, s), cudaErrorInvalidValue);  // its allocation is still live
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_CHECK(graph_mem(cudaGraphMemAttrUsedMemCurrent) >= kSize);
  // The allocation outlives its graph and executable graph.
  SIM_RT_OK(cudaGraphExecDestroy(exec));
  SIM_RT_OK(cudaGraphDestroy(graph));
  SIM_CHECK(all_bytes(p, kSize, 0x55));
  SIM_RT_OK(cudaFreeAsync(p, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_CHECK(graph_mem(cudaGraphMemAttrUsedMemCurrent) == 0);

  // The same with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: each
  // launch frees what the previous one left; cudaFree frees the last.
  SIM_RT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  SIM_RT_OK(cudaMallocAsync(&p, kSize, s));
  SIM_RT_OK(cudaStreamEndCapture(s, &graph));
  SIM_RT_OK(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  SIM_RT_OK(cudaGraphLaunch(exec, s));
  SIM_RT_OK(cudaGraphLaunch(exec, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  SIM_CHECK(graph_mem(cudaGraphMemAttrUsedMemCurrent) == kSize);
  SIM_RT_OK(cudaFree(p));
  SIM_CHECK(graph_mem(cudaGraphMemAttrUsedMemCurrent) == 0);
  SIM_RT_OK(cudaGraphExecDestroy(exec));
  SIM_RT_OK(cudaGraphDestroy(graph));
  SIM_RT_OK(cudaDeviceGraphMemTrim(0));
}

// cudaFreeAsync in a capture "must ... be passed the address of a graph
// allocation" (cuMemFreeAsync): memory from before the capture is refused,
// the capture invalidated, and the memory stays the program's.
void captured_free_of_earlier_memory(cudaStream_t s) {
  void* p = nullptr;
  SIM_RT_OK(cudaMallocAsync(&p, kSize, s));
  SIM_RT_OK(cudaMemsetAsync(p, 0x66, kSize, s));
  SIM_RT_OK(cudaStreamSynchronize(s));  // s does not block: the copy below would not wait for it
  SIM_RT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  SIM_EXPECT_RT(cudaFreeAsync(p, s), cudaErrorInvalidValue);
  SIM_CHECK(status_of(s) == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = nullptr;
  SIM_EXPECT_RT(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  SIM_CHECK(all_bytes(p, kSize, 0x66));
  SIM_RT_OK(cudaFreeAsync(p, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
}

}  // namespace

int main() {
  simtest::require_runtime_on_sim();
  cudaStream_t s1, s2;
  SIM_RT_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  SIM_RT_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  fork_and_join(s1, s2);
  legacy_stream_while_blocking_capture();
  capture_modes(s1);
  explicit_graph(s1);
  unfreed_allocation(s1);
  captured_free_of_earlier_memory(s1);
  SIM_RT_OK(cudaStreamDestroy(s1));
  SIM_RT_OK(cudaStreamDestroy(s2));
  std::printf("sim_graphs: ok\n");
  return 0;
}
