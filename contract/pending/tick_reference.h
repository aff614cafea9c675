// How a record stamped in TSC ticks (RecordHeader::ticks, log_records.h)
// gets its CLOCK_MONOTONIC time: through a calibration of the writer's
// clock (preload/trace/tick_clock.h), which the writer uses itself and
// keeps in the pending file's header (pending_log.h) for a process that
// formats these ticks after the writer died.
#pragma once

#include <cstdint>

namespace cumemtrace::contract::pending {

// Ticks map to CLOCK_MONOTONIC as ns + (ticks - tsc) * ns_per_tick.
struct TickReference {
  std::uint64_t tsc;
  std::uint64_t ns;
  double ns_per_tick;
};

inline std::uint64_t monotonic_at(const TickReference& ref, std::uint64_t ticks) {
  const double delta = static_cast<double>(static_cast<std::int64_t>(ticks - ref.tsc)) * ref.ns_per_tick;
  const double at = static_cast<double>(ref.ns) + delta;
  return at <= 0 ? 0 : static_cast<std::uint64_t>(at);
}

}  // namespace cumemtrace::contract::pending
