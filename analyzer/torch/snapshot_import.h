// Converts a PyTorch memory snapshot (the dict `torch.cuda.memory._snapshot()`
// returns and `_dump_snapshot()` pickles) into a cumemtrace trace.
//
// What the snapshot holds: the final state of PyTorch's caching allocator
// (`segments`, each with its `blocks`) and, per device, a ring buffer of the
// allocator's last events (`device_traces`). How they become our events:
//   segment_alloc / segment_map      -> segment_alloc (reserved memory grows)
//   segment_free / segment_unmap     -> segment_free
//   alloc                            -> alloc (`size` is the requested size
//                                       the event carries; `block` is
//                                       PyTorch's block size where the final
//                                       state tells it)
//   free_completed                   -> free (the block is reusable only now;
//                                       free_requested only starts the wait
//                                       for the streams that used it)
//   oom                              -> oom, with what the state then tells
//   snapshot                         -> an instant mark
// The header says pool "caching": reserved memory is PyTorch's cache, not a
// twin of every allocation as in a passthrough trace.
//
// The ring buffer starts mid-run, so the state at its start is seeded first,
// at t=0 (see ../shared/traces/torch/SOURCES.md): the final state with the
// trace's own events undone, walking them backwards. Blocks live at the end
// that the trace never allocated, and blocks the trace frees without having
// allocated them, were live when it began; the same for segments. With the
// seed, accounting never goes negative and every free matches an alloc.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "torch/pickle_reader.h"

namespace cumemtrace::analyzer {

// The file is a pickle but not a memory snapshot (missing or mistyped keys).
class TorchImportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TorchImportStats {
  std::uint64_t devices = 0;
  std::uint64_t trace_events = 0;  // entries of device_traces, all devices
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t segment_allocs = 0;
  std::uint64_t segment_frees = 0;
  std::uint64_t ooms = 0;
  std::uint64_t marks = 0;
  std::uint64_t free_requests = 0;  // free_requested: no event of ours
  std::uint64_t seeded_allocs = 0;  // live before the trace began
  std::uint64_t seeded_alloc_bytes = 0;
  std::uint64_t seeded_segments = 0;
  std::uint64_t seeded_segment_bytes = 0;
  std::uint64_t stacks = 0;
  // Events that could not be converted (an unknown action, a missing field).
  std::uint64_t skipped_events = 0;
  std::string first_skip_reason;
  // Events that contradict the state (a free of a block that is not live, an
  // alloc over a live block, a segment over a live segment): converted as
  // consistently as possible and counted.
  std::uint64_t inconsistencies = 0;
  std::string first_inconsistency;
  bool synthetic_times = false;  // the snapshot has no time_us: t counts events
  std::uint64_t live_at_end = 0;
  std::uint64_t live_bytes_at_end = 0;
};

struct TorchImportOptions {
  std::string source;  // the snapshot's path, echoed in the header's config
  // Frames kept per stack (innermost first); deeper ones are cut.
  std::size_t max_frames = 256;
};

// Appends the trace, as JSON Lines, to `out`. Throws TorchImportError when
// the document is not a snapshot.
TorchImportStats import_torch_snapshot(const pickle::Value& root, const TorchImportOptions& options,
                                       std::string& out);

}  // namespace cumemtrace::analyzer
