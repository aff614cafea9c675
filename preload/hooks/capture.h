// Stream capture as the caching pool must know it (issue 31). During a
// capture a stream-ordered request on a capturing stream becomes a memory
// node of the graph, whose address the graph keeps for every later launch:
// the pool must not serve it (it would hand the block back at the captured
// free, and a later launch would write into memory the pool gave to someone
// else). A cudaMalloc / cuMemAlloc that the capture interaction mode forbids
// must reach the real function, so that CUDA fails it and invalidates the
// capture exactly as without us (cudaErrorStreamCaptureUnsupported,
// NVIDIA/cuopt#1748); in relaxed mode the pool serves it as usual
// (aws/aws-ofi-nccl#1342 allocates so during capture).
//
// The capture hooks (capture.cpp) keep the state; the allocation path pays
// one relaxed atomic load while nothing captures.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

namespace cumemtrace::preload {

// Capture sequences begun through our hooks and not yet ended.
extern std::atomic<int> g_active_captures;

// Whether a pooled request must go to the real call because of a capture in
// progress: `stream` is the request's stream (stream-ordered requests), or
// nullopt for cudaMalloc / cuMemAlloc.
bool capture_diverts_slow(const std::optional<std::uintptr_t>& stream) noexcept;

inline bool capture_diverts(const std::optional<std::uintptr_t>& stream) noexcept {
  return g_active_captures.load(std::memory_order_relaxed) != 0 && capture_diverts_slow(stream);
}

}  // namespace cumemtrace::preload
