// The lines of one record of a thread's log (log_records.h), in the order the
// trace has them: what the writer formats when it merges the logs, and what
// a recovery formats from a killed process's pending file (pending_log.h),
// so both write the same bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "text/line_buffer.h"
#include "pending/compact_event.h"
#include "pending/log_records.h"

namespace cumemtrace::contract::pending {

// Calls emit(ev, body) for each line of the record whose lines start at
// `p` (just after its RecordHeader). `api_of(event.api)` gives the name a
// compact event's api pointer stands for (the pointer itself in the process
// that recorded it).
template <typename ApiOf, typename Emit>
void for_each_record_line(const char* p, std::uint16_t lines, ApiOf&& api_of, Emit&& emit) {
  auto emit_compact = [&](const CompactEvent& event) {
    LineBuffer body;  // a CompactEvent's text: well inside the inline buffer
    event.append_body(body);
    emit(format::name(event.ev), body.view());
  };
  for (std::uint32_t i = 0; i < lines; ++i) {
    LineHeader lh;
    std::memcpy(&lh, p, sizeof lh);
    p += sizeof lh;
    if (lh.ev_size != kCompactLine) {
      emit(std::string_view(p, lh.ev_size), std::string_view(p + lh.ev_size, lh.body_size));
      p += lh.ev_size + lh.body_size;
      continue;
    }
    CompactEvent event;
    std::memcpy(&event, p, sizeof event);
    p += lh.body_size;
    event.api = api_of(event.api);
    // A passthrough allocation's segment twin comes just before its alloc
    // line, and just after its free line (TRACE_FORMAT.md: reserved memory
    // grows before the application has it, and shrinks after).
    const bool twin = (event.optional & CompactEvent::kWithSegmentTwin) != 0;
    if (twin && event.ev == format::Event::alloc) {
      emit_compact(event.twin(format::Event::segment_alloc, CompactEvent::Shape::segment_alloc_twin));
    }
    emit_compact(event);
    if (twin && event.ev == format::Event::free) {
      emit_compact(event.twin(format::Event::segment_free, CompactEvent::Shape::segment_free_twin));
    }
  }
}

}  // namespace cumemtrace::contract::pending
