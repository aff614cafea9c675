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
// succeeds; trim gives the graph pool's memory back. Exit 0 when every check holds, 1 with one line otherwise.
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
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "stream-cache instantiate");
  void* held = nullptr;
  CHECK(cudaMallocAsync(&held, kSize, s) == cudaSuccess, "stream-cache held malloc");
  CHECK(cudaMemsetAsync(held, 0x5A, kSize, s) == cudaSuccess, "stream-cache stamp");
  for (int launch = 0; launch < 2; ++launch) CHECK(cudaGraphLaunch(exec, s) == cudaSuccess, "stream-cache launch");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "stream-cache sync");
  size_t bad = 0;
  CHECK(stamp_intact(held, 0x5A, host, &bad), "stamp of the stream-ordered buffer corrupted at byte %zu: 0x%02x", bad,
        host[bad]);
  CHECK(cudaFreeAsync(held, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess, "stream-cache held free");
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess, "stream-cache destroy");
  return 0;
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  std::vector<unsigned char> host(kSize);
  if (int rc = stream_cache_relaunch(s, host)) return rc;
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
