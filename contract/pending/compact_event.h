// The body of an alloc or free line (and its passthrough segment twin) as
// the facts it is made of, not as text: the hot path stores this struct in
// its thread's log, and the writer thread formats it, on its own core, when
// it merges the logs (a recovery, when it reads them from the pending file:
// record_lines.h). Formatting the numbers of two lines (tid, dev, ptr,
// size, stack: ~700 instructions a call, callgrind, bench_malloc_free in
// passthrough) was the largest single cost an intercepted call paid.
//
// append_body() writes exactly what the Recorder wrote before it deferred
// the work (TRACE_FORMAT.md's field order), so the trace is byte for byte the
// same. It allocates nothing and calls nothing that is not async-signal-safe:
// the writer formats records from a fatal-signal handler too.
#pragma once

#include <cstdint>

#include "cumemtrace/trace_format.h"
#include "text/line_buffer.h"

namespace cumemtrace::contract::pending {

struct CompactEvent {
  // Which line: a whole alloc or free, or a passthrough allocation's segment
  // twin, which repeats dev, ptr and size (segment_alloc adds the api).
  enum class Shape : std::uint8_t { whole, segment_alloc_twin, segment_free_twin };
  // kWithSegmentTwin: a passthrough alloc or free whose segment_alloc /
  // segment_free twin the writer adds (before the alloc, after the free):
  // one struct in the thread's log for both lines.
  enum Optional : std::uint8_t { kHasBlock = 1, kHasStream = 2, kWithSegmentTwin = 4 };

  format::Event ev = format::Event::alloc;
  Shape shape = Shape::whole;
  format::MemoryKind kind = format::MemoryKind::device;
  std::uint8_t optional = 0;
  std::int32_t dev = 0;
  std::int64_t tid = 0;
  const char* api = "";  // a literal (AllocationFacts::api): it outlives the trace
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  std::uint64_t block = 0;
  std::uint64_t stream = 0;
  std::uint32_t stack = 0;

  // The same facts as another line: the segment twin of this event.
  CompactEvent twin(format::Event twin_ev, Shape twin_shape) const {
    CompactEvent t = *this;
    t.ev = twin_ev;
    t.shape = twin_shape;
    t.optional &= static_cast<std::uint8_t>(~kWithSegmentTwin);
    return t;
  }

  // The line's body: everything after "t":… up to the closing brace.
  void append_body(LineBuffer& out) const {
    if (shape == Shape::whole) {
      out.field_i("tid", tid).field_plain("api", api).field_plain("kind", format::name(kind));
    }
    out.field_i("dev", dev).field_hex("ptr", ptr).field("size", size);
    switch (shape) {
      case Shape::segment_alloc_twin:
        out.field_plain("api", api);
        return;
      case Shape::segment_free_twin:
        return;
      case Shape::whole:
        break;
    }
    if ((optional & kHasBlock) != 0) out.field("block", block);
    if ((optional & kHasStream) != 0) out.field_hex("stream", stream);
    out.field("stack", stack);
  }
};

}  // namespace cumemtrace::contract::pending
