// The stream-capture hooks (capture.h says why the pool must know): the
// driver's cuStreamBeginCapture[_v2][_ptsz], cuStreamEndCapture[_ptsz] and
// cuThreadExchangeStreamCaptureMode. Every runtime reaches them through
// cuGetProcAddress (cudaStreamBeginCapture → cuStreamBeginCapture_v2), so
// only the driver's are hooked, as for streams (streams.cpp).
#define __CUDA_API_VERSION_INTERNAL 1  // declares the legacy and _ptsz ABIs too
#include <pthread.h>

#include <mutex>

#include <cuda.h>

#include "hooks/capture.h"
#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"
#include "hooks/tables.h"

using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

namespace cumemtrace::preload {
std::atomic<int> g_active_captures{0};
}

namespace {

constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;

// One capture sequence begun through our hooks: its stream (per-thread
// default streams are named by their thread), mode and beginning thread.
struct CaptureEntry {
  bool used = false;
  std::uintptr_t stream = 0;
  pthread_t thread{};
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
};
// Fixed, so the hooks allocate nothing; captures in flight at once beyond it
// are still counted (g_active_captures) and then every non-relaxed
// cudaMalloc goes to the real call, which is always correct, only slower.
constexpr int kMaxEntries = 64;
std::mutex g_mu;  // only taken while a capture is in progress
CaptureEntry g_entries[kMaxEntries];
bool g_overflow = false;

// "CU_STREAM_CAPTURE_MODE_GLOBAL: This is the default mode."
// (cuThreadExchangeStreamCaptureMode)
thread_local CUstreamCaptureMode tl_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

NextSymbol<decltype(&::cuStreamIsCapturing)> next_is_capturing{"cuStreamIsCapturing"};

std::uintptr_t key(CUstream stream, bool per_thread) {
  const auto h = reinterpret_cast<std::uintptr_t>(stream);
  return (per_thread && h == 0) ? kPerThreadStream : h;
}

void note_begin(std::uintptr_t stream, CUstreamCaptureMode mode) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_active_captures.fetch_add(1, std::memory_order_relaxed);
  for (auto& e : g_entries) {
    if (e.used) continue;
    e = {true, stream, pthread_self(), mode};
    return;
  }
  g_overflow = true;
}

void note_end(std::uintptr_t stream) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_active_captures.fetch_sub(1, std::memory_order_relaxed);
  for (auto& e : g_entries) {
    if (!e.used || e.stream != stream) continue;
    if (stream == kPerThreadStream && !pthread_equal(e.thread, pthread_self())) continue;
    e.used = false;
    break;
  }
  if (g_active_captures.load(std::memory_order_relaxed) == 0) g_overflow = false;
}

template <bool PerThread>
CUresult begin_capture_v2(decltype(&::cuStreamBeginCapture_v2) real, CUstream stream, CUstreamCaptureMode mode) {
  if (!real) return kNoDriver;
  const CUresult rc = real(stream, mode);
  if (rc == CUDA_SUCCESS) note_begin(key(stream, PerThread), mode);
  return rc;
}

// CUDA 10.0's ABI: global mode.
template <bool PerThread>
CUresult begin_capture_v1(CUresult (*real)(CUstream), CUstream stream) {
  if (!real) return kNoDriver;
  const CUresult rc = real(stream);
  if (rc == CUDA_SUCCESS) note_begin(key(stream, PerThread), CU_STREAM_CAPTURE_MODE_GLOBAL);
  return rc;
}

// CUDA 12.3: capture into a graph the program made. A capture sequence
// like the others for the pool (its stream-ordered requests become the
// graph's memory nodes), whose graph is the caller's.
template <bool PerThread>
CUresult begin_capture_to_graph(decltype(&::cuStreamBeginCaptureToGraph) real, CUstream stream, CUgraph graph,
                                const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                                CUstreamCaptureMode mode) {
  if (!real) return kNoDriver;
  const CUresult rc = real(stream, graph, deps, edges, n, mode);
  if (rc == CUDA_SUCCESS) note_begin(key(stream, PerThread), mode);
  return rc;
}

template <bool PerThread>
CUresult end_capture(decltype(&::cuStreamEndCapture) real, CUstream stream, CUgraph* graph) {
  if (!real) return kNoDriver;
  const CUresult rc = real(stream, graph);
  // The sequence ends unless the call was refused before ending it: a stream
  // not capturing, or not where it began, or the wrong thread (cuStreamEndCapture).
  const bool ended = rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
                     rc == CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  if (ended) note_end(key(stream, PerThread));
  return rc;
}

CUresult exchange_mode(decltype(&::cuThreadExchangeStreamCaptureMode) real, CUstreamCaptureMode* mode) {
  if (!real) return kNoDriver;
  const CUstreamCaptureMode wanted = mode ? *mode : CU_STREAM_CAPTURE_MODE_GLOBAL;
  const CUresult rc = real(mode);
  if (rc == CUDA_SUCCESS) tl_mode = wanted;
  return rc;
}

}  // namespace

bool cumemtrace::preload::capture_diverts_slow(const std::optional<std::uintptr_t>& stream) noexcept {
  if (stream) {
    // Stream-ordered: the driver knows whether the stream captures, streams
    // that joined a capture through an event wait included. Asked only
    // while some capture is in progress.
    auto* is_capturing = next_is_capturing.get();
    if (!is_capturing) return true;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult rc = is_capturing(reinterpret_cast<CUstream>(*stream), &status);
    // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (the legacy stream while a blocking
    // stream captures): the real call must answer it.
    return rc != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  // cudaMalloc / cuMemAlloc, a "potentially unsafe API call": forbidden in
  // GLOBAL and THREAD_LOCAL mode while "the local thread has an ongoing
  // capture sequence that was not initiated with RELAXED", and in GLOBAL
  // mode also while "any other thread has a concurrent capture sequence
  // initiated with GLOBAL" (cuThreadExchangeStreamCaptureMode).
  const CUstreamCaptureMode mine = tl_mode;
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  const pthread_t self = pthread_self();
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_overflow) return true;
  for (const auto& e : g_entries) {
    if (!e.used) continue;
    const bool own = pthread_equal(e.thread, self) && e.mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool other_global = mine == CU_STREAM_CAPTURE_MODE_GLOBAL && !pthread_equal(e.thread, self) &&
                              e.mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || other_global) return true;
  }
  return false;
}

#define CUMEMTRACE_CAPTURE_EXPORT(NAME, BODY, PARAMS, ...)  \
  static NextSymbol<decltype(&::NAME)> next_##NAME{#NAME};  \
  CUMEMTRACE_HOOK CUresult CUDAAPI NAME PARAMS { return BODY(next_##NAME.get(), __VA_ARGS__); }

CUMEMTRACE_CAPTURE_EXPORT(cuStreamBeginCapture_v2, begin_capture_v2<false>,
                          (CUstream stream, CUstreamCaptureMode mode), stream, mode)
CUMEMTRACE_CAPTURE_EXPORT(cuStreamBeginCapture_v2_ptsz, begin_capture_v2<true>,
                          (CUstream stream, CUstreamCaptureMode mode), stream, mode)
CUMEMTRACE_CAPTURE_EXPORT(cuStreamBeginCapture, begin_capture_v1<false>, (CUstream stream), stream)
CUMEMTRACE_CAPTURE_EXPORT(cuStreamBeginCapture_ptsz, begin_capture_v1<true>, (CUstream stream), stream)
CUMEMTRACE_CAPTURE_EXPORT(cuStreamBeginCaptureToGraph, begin_capture_to_graph<false>,
                          (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                           size_t n, CUstreamCaptureMode mode),
                          stream, graph, deps, edges, n, mode)
CUMEMTRACE_CAPTURE_EXPORT(cuStreamBeginCaptureToGraph_ptsz, begin_capture_to_graph<true>,
                          (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                           size_t n, CUstreamCaptureMode mode),
                          stream, graph, deps, edges, n, mode)
CUMEMTRACE_CAPTURE_EXPORT(cuStreamEndCapture, end_capture<false>, (CUstream stream, CUgraph* graph), stream, graph)
CUMEMTRACE_CAPTURE_EXPORT(cuStreamEndCapture_ptsz, end_capture<true>, (CUstream stream, CUgraph* graph), stream,
                          graph)
CUMEMTRACE_CAPTURE_EXPORT(cuThreadExchangeStreamCaptureMode, exchange_mode, (CUstreamCaptureMode * mode), mode)

#define ROW(NAME, BASE, VERSION, PT, BODY) \
  {#NAME, BASE, VERSION, PT, &wrap_with<&BODY>, reinterpret_cast<void*>(&::NAME), &resolved<next_##NAME>}

// Versions: the PFN_ typedefs of cudaTypedefs.h (cuStreamBeginCapture_v10000,
// _v10010, cuStreamEndCapture_v10000, cuThreadExchangeStreamCaptureMode_v10010).
static const InterceptedSymbol kCaptureSymbols[] = {
    ROW(cuStreamBeginCapture, "cuStreamBeginCapture", 10000, false, begin_capture_v1<false>),
    ROW(cuStreamBeginCapture_ptsz, "cuStreamBeginCapture", 10000, true, begin_capture_v1<true>),
    ROW(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, false, begin_capture_v2<false>),
    ROW(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, true, begin_capture_v2<true>),
    ROW(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", 12030, false, begin_capture_to_graph<false>),
    ROW(cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph", 12030, true,
        begin_capture_to_graph<true>),
    ROW(cuStreamEndCapture, "cuStreamEndCapture", 10000, false, end_capture<false>),
    ROW(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, true, end_capture<true>),
    ROW(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010, false, exchange_mode),
};

std::span<const InterceptedSymbol> cumemtrace::preload::capture_symbols() { return kCaptureSymbols; }
