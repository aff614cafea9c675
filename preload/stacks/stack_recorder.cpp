#include "stacks/stack_recorder.h"

#include <algorithm>

#include "cumemtrace/trace_format.h"
#include "diagnostics.h"

namespace cumemtrace::preload {

StackRecorder::StackRecorder(unsigned depth, const StackPlatform& platform, TraceWriter& writer,
                             std::string perf_map_path)
    : depth_(std::min<std::size_t>(depth, StackTable::kMaxDepth)),
      capture_(platform.capture),
      writer_(writer),
      enabled_(depth_ > 0 && capture_ != nullptr),
      namer_(platform.symbol_table, std::move(perf_map_path)) {}

std::uint32_t StackRecorder::current_stack_id() {
  if (!enabled_) return 0;
  std::call_once(table_once_, [this] { table_ = std::make_unique<StackTable>(kSlots, kFrames); });
  std::uintptr_t ips[StackTable::kMaxDepth];
  const std::size_t n = std::min(capture_(ips, depth_), depth_);
  const std::uint32_t id = table_->intern(
      std::span<const std::uintptr_t>(ips, n),
      [this](std::uint32_t new_id, std::span<const std::uintptr_t> frames) {
        write_stack_event(new_id, frames);
      });
  if (id == 0 && n > 0 && table_->overflowed() && !warned_full_.exchange(true)) {
    warn("more than %u distinct call stacks; new ones are recorded without a stack",
         table_->size());
  }
  return id;
}

void StackRecorder::write_stack_event(std::uint32_t id, std::span<const std::uintptr_t> ips) {
  LineBuffer body;
  body.field("id", id);
  namer_.append_frames_json(body, ips);
  writer_.emit(format::name(format::Event::stack), body);
}

}  // namespace cumemtrace::preload
