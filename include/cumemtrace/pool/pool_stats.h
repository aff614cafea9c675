// What the pool tells the outside: counters (the trace's `pool` samples),
// fragmentation metrics, the out-of-memory explanation (the `oom` event) and
// an observer for changes of reserved memory (`segment_alloc` /
// `segment_free`). Field names follow TRACE_FORMAT.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cumemtrace/pool/upstream.h"

namespace cumemtrace::pool {

// A snapshot of one device's pool. All byte counts are block-granular:
// allocated + pending_free + (free blocks) == reserved.
struct PoolStats {
  std::size_t allocated = 0;       // bytes in blocks the application holds
  std::size_t requested = 0;       // bytes the application asked for (≤ allocated)
  std::size_t reserved = 0;        // bytes obtained from the upstream
  std::size_t cached_free = 0;     // reserved − allocated (includes pending_free)
  std::size_t pending_free = 0;    // freed, waiting for a synchronise or a fence
  std::size_t largest_free = 0;    // largest block that could be handed out now
  std::size_t free_blocks = 0;     // number of free (not pending) blocks
  std::size_t inactive_split = 0;  // free bytes in segments that also hold live blocks
  std::size_t segments = 0;        // segments (or mapped ranges) held
  std::size_t live_blocks = 0;     // blocks the application holds
  std::size_t peak_reserved = 0;   // since construction or the last device_reset()
  std::uint64_t upstream_allocs = 0;  // segments obtained (allocate or map)
  std::uint64_t upstream_frees = 0;   // segments given back (release or unmap)
  std::uint64_t synchronizes = 0;     // device-wide synchronisations the pool made (the host waited)
  std::uint64_t orderings = 0;        // device-side orderings made instead (the host did not wait)
  std::uint64_t ooms = 0;             // failed requests
};

// DESIGN.md's fragmentation metrics; the ratios are 0 when undefined
// (nothing reserved, nothing free, nothing allocated).
struct FragmentationMetrics {
  double unused_reserved = 0;    // 1 − allocated/reserved
  double free_scatter = 0;       // 1 − largest_free/free bytes (cached free space)
  std::size_t inactive_split = 0;
  double rounding_waste = 0;     // 1 − requested/allocated
};

FragmentationMetrics fragmentation_of(const PoolStats& stats);

enum class OomCause : std::uint8_t { capacity, fragmentation };
// "capacity" / "fragmentation", as the trace writes it.
const char* to_string(OomCause cause);

// Everything the trace's `oom` event holds, taken after the whole ladder
// failed (so pending frees are already reclaimed).
struct OomReport {
  int device = 0;
  std::size_t size = 0;          // what the application asked for
  std::size_t block = 0;         // what the pool needed for it (rounded)
  std::size_t allocated = 0;
  std::size_t reserved = 0;
  std::size_t cached_free = 0;   // reserved − allocated
  std::size_t largest_free = 0;
  std::size_t device_free = 0;   // the driver's free bytes, 0 if unknown
  std::size_t device_total = 0;  // 0 if unknown
  OomCause cause = OomCause::capacity;  // fragmentation when cached_free + device_free ≥ block
  bool stream_ordered = false;
  StreamHandle stream = 0;       // meaningful when stream_ordered
  UpstreamResult result;         // the upstream failure handed back
  FragmentationMetrics fragmentation;
};

// Told synchronously about changes of reserved memory and about failures,
// on the thread that called into the pool and possibly with pool locks held:
// an observer must be quick and must not call back into the pool. Segment
// callbacks come after a successful upstream allocate/map and before
// release/unmap, so a trace shows reserved memory covering every block.
class PoolObserver {
 public:
  virtual ~PoolObserver() = default;
  virtual void on_segment_alloc(int /*device*/, DevicePtr /*ptr*/, std::size_t /*size*/) {}
  virtual void on_segment_free(int /*device*/, DevicePtr /*ptr*/, std::size_t /*size*/) {}
  virtual void on_oom(const OomReport& /*report*/) {}
};

}  // namespace cumemtrace::pool
