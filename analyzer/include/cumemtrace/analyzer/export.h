// `cumemtrace export`: a trace's events in formats other tools read
// (EXPORT_FORMATS.md). Both writers stream: they read the trace once and
// write as they go, keeping only the analysis' live set, the interned stacks
// and per-thread mark nesting.
#pragma once

#include <cstdint>
#include <iosfwd>

#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer {

struct ExportSummary {
  std::uint64_t records = 0;  // CSV rows / trace events written (metadata included)
  std::uint64_t unmatched_pops = 0;  // Perfetto: `pop` marks with no open range on their thread
  std::uint64_t open_ranges = 0;     // Perfetto: ranges still open at the end, closed there
};

// One CSV row per alloc, free, segment_alloc, segment_free, oom, pool, mark
// and error event, with a header row; RFC 4180 quoting.
ExportSummary export_events_csv(TraceReader& reader, std::ostream& out);

// Chrome trace-event JSON, as ui.perfetto.dev and chrome://tracing open it:
// counter tracks of allocated and reserved memory per device, instants for
// OOMs, errors and instant marks, slices for push/pop mark ranges per thread.
ExportSummary export_perfetto(TraceReader& reader, std::ostream& out);

}  // namespace cumemtrace::analyzer
