// Derived figures of the pool's counters (DESIGN.md's fragmentation metrics).
#include "cumemtrace/pool/pool_stats.h"

namespace cumemtrace::pool {
namespace {
double one_minus_ratio(std::size_t part, std::size_t whole) {
  if (whole == 0) return 0.0;
  return 1.0 - static_cast<double>(part) / static_cast<double>(whole);
}
}  // namespace

FragmentationMetrics fragmentation_of(const PoolStats& s) {
  FragmentationMetrics m;
  m.unused_reserved = one_minus_ratio(s.allocated, s.reserved);
  // Cached free space that can be handed out: pending blocks are excluded,
  // they are not yet part of the free space whose scatter we measure.
  const std::size_t free_bytes = s.cached_free - s.pending_free;
  m.free_scatter = one_minus_ratio(s.largest_free, free_bytes);
  m.inactive_split = s.inactive_split;
  m.rounding_waste = one_minus_ratio(s.requested, s.allocated);
  return m;
}

const char* to_string(OomCause cause) {
  return cause == OomCause::fragmentation ? "fragmentation" : "capacity";
}

}  // namespace cumemtrace::pool
