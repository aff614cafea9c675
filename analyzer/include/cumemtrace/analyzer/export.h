// `cumemtrace export`: a trace's events in formats other tools read
// (EXPORT_FORMATS.md). The writers read the trace once, keeping only the
// analysis' live set, the interned stacks and per-thread mark nesting; CSV
// and Perfetto write as they go, the folded stacks at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>

#include "cumemtrace/analyzer/flame.h"
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
// `points` 0 writes every change of the counters, in time order; N cuts time
// into at most N buckets per device and keeps each bucket's highest and
// lowest allocated and reserved moments (real states, so every peak stays
// exact), written after the other events (the format does not need time
// order). Marks, OOMs and errors are all kept either way.
inline constexpr std::size_t kPerfettoDefaultPoints = 10000;
ExportSummary export_perfetto(TraceReader& reader, std::ostream& out,
                              std::size_t points = kPerfettoDefaultPoints);

// Collapsed stacks ("frame;frame;…;frame BYTES", outermost frame first, one
// line per distinct stack, most bytes first), as flamegraph.pl, inferno and
// speedscope read them: `what` says which bytes (flame.h). Frames are named
// as flame_frame_name() names them; records counts the lines.
ExportSummary export_folded(TraceReader& reader, std::ostream& out, FlameWhat what);

struct TorchSnapshotSummary {
  std::uint64_t entries = 0;   // device_traces entries, all devices
  std::uint64_t devices = 0;   // devices with entries
  std::uint64_t segments = 0;  // `segments`: those live at the end
  std::uint64_t stacks = 0;    // distinct frame lists written
  // Allocations in no segment of the trace (passthrough traces without
  // segment lines, host memory), each given a segment of its own.
  std::uint64_t own_segments = 0;
  std::uint64_t unknown_frees = 0;          // frees of pointers not live: left out
  std::uint64_t unknown_segment_frees = 0;  // segment_frees of no live segment: left out
  // segment_frees while allocations were live in the segment: written when
  // the last of them was freed (or never: the segment is live at the end).
  std::uint64_t deferred_segment_frees = 0;
  std::uint64_t skipped_events = 0;         // a `dev` below 0 or past 1023: left out
};

// The pickle of torch.cuda.memory._dump_snapshot(), as PyTorch's memory_viz
// and `import-torch` read it: the segments live at the end and each device's
// events (EXPORT_FORMATS.md has the mapping). Entries wait in temporary
// files (std::tmpfile) until the end; throws std::runtime_error when those
// cannot be written.
TorchSnapshotSummary export_torch_snapshot(TraceReader& reader, std::ostream& out);

}  // namespace cumemtrace::analyzer
