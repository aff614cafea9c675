// Stream capture with memory nodes, relaunched while the program holds
// stamped buffers (issue 31). Run bare on the sim and under the preload's
// caching pool: a capture-time cudaMallocAsync served from the pool would
// be handed back at the captured cudaFreeAsync, the next cudaMalloc could
// get the same block, and every launch's captured memset would overwrite
// that buffer's stamp. Also: cudaMalloc in a global-mode capture fails and
// invalidates it; in relaxed mode it succeeds; trim gives the graph pool's
// memory back. Exit 0 when every check holds, 1 with one line otherwise.
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

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

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
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
  std::vector<unsigned char> host(kSize);
  for (size_t i = 0; i < held.size(); ++i) {
    CHECK(cudaMemcpy(host.data(), held[i], kSize, cudaMemcpyDeviceToHost) == cudaSuccess, "read back");
    for (size_t b = 0; b < kSize; ++b) {
      CHECK(host[b] == 0x10 + i, "stamp of buffer %zu corrupted at byte %zu: 0x%02x", i, b, host[b]);
    }
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

  for (void* p : held) CHECK(cudaFree(p) == cudaSuccess, "free held");
  CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream destroy");
  std::printf("graph_capture: ok\n");
  return 0;
}
