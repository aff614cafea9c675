#include "stacks/stack_recorder.h"

#include "cumemtrace/trace_format.h"
#include "common/diagnostics.h"

namespace cumemtrace::preload {
namespace {

std::uint32_t next_owner() {
  static std::atomic<std::uint32_t> last{0};
  std::uint32_t owner = last.fetch_add(1, std::memory_order_relaxed) + 1;
  return owner != 0 ? owner : 1;  // 0 would mean "never noted" to the walker
}

}  // namespace

StackRecorder::StackRecorder(unsigned depth, const StackPlatform& platform, TraceWriter& writer,
                             std::string perf_map_path)
    : depth_(std::min<std::size_t>(depth, StackTable::kMaxDepth)),
      capture_(platform.capture),
      resolve_backtrace_(platform.raw_backtrace),
      owner_(next_owner()),
      writer_(writer),
      enabled_(depth_ > 0 && (capture_ != nullptr || resolve_backtrace_ != nullptr)),
      namer_(platform.symbol_table, std::move(perf_map_path)) {}

void StackRecorder::prepare() {
  std::call_once(prepare_once_, [this] {
    table_ = std::make_unique<StackTable>(kSlots, kFrames);
    if (resolve_backtrace_ != nullptr) {
      const RawBacktraceRoute route = resolve_backtrace_();
      own_begin_ = route.own_begin;
      own_size_ = route.own_end > route.own_begin ? route.own_end - route.own_begin : 0;
      backtrace_ = route.backtrace;
      noting_ = route.noting;
    }
    prepared_.store(true, std::memory_order_release);
  });
}

void StackRecorder::grow_own_room(std::size_t own) {
  const std::size_t wanted = std::min(own, kOwnFramesAllowance);
  std::size_t room = own_room_.load(std::memory_order_relaxed);
  while (room < wanted && !own_room_.compare_exchange_weak(room, wanted, std::memory_order_relaxed)) {
  }
}

std::uint32_t StackRecorder::intern(std::span<const std::uintptr_t> ips) {
  const std::size_t n = ips.size();
  const std::uint32_t id = table_->intern(
      ips,
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
