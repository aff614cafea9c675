#include "stacks/stack_recorder.h"

#include <cstdio>
#include <string_view>

#include "cumemtrace/trace_format.h"
#include "text/diagnostics.h"

namespace cumemtrace::preload {
namespace {

// {"py":true,"fn":"Trainer.step","file":"/work/train.py","line":42}
// (TRACE_FORMAT.md, "A Python frame"); line null when unknown.
void append_python_frame_json(contract::LineBuffer& out, const python::FunctionName& function, int line) {
  out.raw("{\"py\":true");
  out.key("fn").str(function.name);
  out.key("file").str(function.file);
  out.key("line");
  if (line >= 0) out.u64(static_cast<std::uint64_t>(line)); else out.raw("null");
  out.ch('}');
}

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
      namer_(platform.symbol_table, std::move(perf_map_path)),
      python_symbols_(platform.python_symbols) {}

void StackRecorder::detect_python() {
  if (python_state_.load(std::memory_order_acquire) == kPythonKnown) return;
  // The search calls dlsym, which takes the loader's lock: no lock of ours
  // is held meanwhile (a thread inside dlopen, holding the loader's lock,
  // may be recording an allocation from a library constructor and come
  // here). Threads that race each search; the first publishes.
  python::Detection found;
  if (enabled_ && python_symbols_ != nullptr) found = python::detect_interpreter(python_symbols_);
  int expected = kPythonUnknown;
  if (python_state_.compare_exchange_strong(expected, kPythonPublishing, std::memory_order_acq_rel)) {
    python_note_ = std::move(found.note);
    if (found.outcome == python::Detection::Outcome::walkable) {
      python_owner_ = std::make_unique<python::PythonFrames>(found.interpreter);
      python_.store(python_owner_.get(), std::memory_order_release);
    }
    python_state_.store(kPythonKnown, std::memory_order_release);
    return;
  }
  // Another thread publishes what it found: a few stores, no lock, no call.
  while (python_state_.load(std::memory_order_acquire) != kPythonKnown) {
  }
}

std::string StackRecorder::python_note() {
  detect_python();
  return python_note_;
}

namespace {

// This thread's last merged stack: its recorder and id (python_stack_id).
struct LastMerged {
  std::uint32_t owner = 0;
  std::uint32_t id = 0;
};
thread_local LastMerged t_last_merged __attribute__((tls_model("initial-exec")));

}  // namespace

std::uint32_t StackRecorder::python_stack_id(python::PythonFrames& python) {
  python::PythonStack py;
  python.capture(py);
  if (py.count == 0) return kNoPythonFrames;
  void* raw[StackTable::kMaxDepth + kOwnFramesAllowance];
  std::uintptr_t raw_slots[StackTable::kMaxDepth + kOwnFramesAllowance];
  const int request = static_cast<int>(depth_ + kOwnFramesAllowance);
  int got = -1;
  std::uint64_t* note = nullptr;
  bool has_slots = false;
  if (with_slots_ != nullptr) {
    const frame_walker::Capture captured = with_slots_(raw, raw_slots, request, owner_);
    // The walker's note at a native position holds the merged stack last
    // made there. When that is the merged stack this thread made last, and
    // the Python frames are this thread's last ones too, the stack is that
    // one: both of its halves are what they were (a merged id stands for
    // exactly one Python part and one native part).
    if (captured.noted) {
      const LastMerged last = t_last_merged;
      if (py.unchanged && last.owner == owner_ && *captured.note == (std::uint64_t{owner_} << 32 | last.id)) {
        return last.id;
      }
    }
    got = captured.count;
    note = captured.note;
    has_slots = captured.has_slots;
  } else if (backtrace_ != nullptr) {
    got = backtrace_(raw, request);
  }
  std::uintptr_t native[StackTable::kMaxDepth];
  std::uintptr_t native_slots[StackTable::kMaxDepth];
  std::size_t n = 0;
  if (got >= 0) {
    for (int i = 0; i < got && n < depth_; ++i) {
      const auto ip = reinterpret_cast<std::uintptr_t>(raw[i]);
      if (ip - own_begin_ < own_size_) continue;  // ours
      if (has_slots) native_slots[n] = raw_slots[i];
      native[n++] = ip;
    }
  } else if (capture_ != nullptr) {
    n = std::min(capture_(native, depth_), depth_);
  }
  std::uintptr_t merged[StackTable::kMaxDepth];
  const std::size_t count = python::merge_stacks(
      std::span<const std::uintptr_t>(native, n), has_slots ? native_slots : nullptr, py,
      [&python](std::uintptr_t ip) { return python.in_eval_loop(ip); }, merged, StackTable::kMaxDepth);
  const std::uint32_t id = intern(std::span<const std::uintptr_t>(merged, count));
  if (id != 0) {
    if (note != nullptr) *note = std::uint64_t{owner_} << 32 | id;
    t_last_merged = LastMerged{owner_, id};
  }
  return id;
}

void StackRecorder::prepare() {
  detect_python();
  std::call_once(prepare_once_, [this] {
    table_ = std::make_unique<StackTable>(kSlots, kFrames);
    if (resolve_backtrace_ != nullptr) {
      const RawBacktraceRoute route = resolve_backtrace_();
      own_begin_ = route.own_begin;
      own_size_ = route.own_end > route.own_begin ? route.own_end - route.own_begin : 0;
      backtrace_ = route.backtrace;
      noting_ = route.noting;
      with_slots_ = route.with_slots;
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
    contract::warn("more than %u distinct call stacks; new ones are recorded without a stack",
         table_->size());
  }
  return id;
}

void StackRecorder::write_stack_event(std::uint32_t id, std::span<const std::uintptr_t> ips) {
  contract::LineBuffer body;
  body.field("id", id);
  python::PythonFrames* const python = python_.load(std::memory_order_acquire);
  const bool with_python =
      python != nullptr && std::any_of(ips.begin(), ips.end(), [](std::uintptr_t w) { return python::is_python_word(w); });
  body.key("frames").ch('[');
  bool first = true;
  for (const std::uintptr_t word : ips) {
    if (with_python && python::is_python_word(word)) {
      if (!first) body.ch(',');
      append_python_frame_json(body, python->function(python::function_of(word)), python::line_of(word));
      first = false;
      continue;
    }
    const NamedFrame frame = namer_.name(word);
    // CPython's perf trampolines (PYTHONPERFSUPPORT, 3.12+) name a native
    // frame after the Python function it runs, "py::fn:file": in a stack
    // with Python frames that function is one already, so it is not shown
    // twice.
    if (with_python && frame.fn && frame.fn->starts_with("py::") && frame.module && frame.module->ends_with(".map")) {
      continue;
    }
    if (!first) body.ch(',');
    FrameNamer::append_json(body, frame);
    first = false;
  }
  body.ch(']');
  writer_.emit(format::name(format::Event::stack), body);
}

namespace {

// A field of a describe() line: tabs and line ends would split it.
void append_field(std::string& out, std::string_view text) {
  for (const char c : text) out.push_back(c == '\t' || c == '\n' || c == '\r' ? ' ' : c);
}

}  // namespace

std::string StackRecorder::describe(std::uint32_t id) {
  if (!enabled_ || !prepared_.load(std::memory_order_acquire) || !table_) return {};
  const std::span<const std::uintptr_t> frames = table_->frames_of(id);
  python::PythonFrames* const python = python_.load(std::memory_order_acquire);
  const bool with_python = python != nullptr && std::any_of(frames.begin(), frames.end(), [](std::uintptr_t w) {
                             return python::is_python_word(w);
                           });
  std::string out;
  for (const std::uintptr_t word : frames) {
    if (with_python && python::is_python_word(word)) {
      const python::FunctionName function = python->function(python::function_of(word));
      out += "py\t";
      append_field(out, function.file);
      out += '\t';
      out += std::to_string(std::max(python::line_of(word), 0));
      out += '\t';
      append_field(out, function.name);
      out += '\n';
      continue;
    }
    const NamedFrame frame = namer_.name(word);
    // Perf trampolines repeat a Python frame (as in write_stack_event).
    if (with_python && frame.fn && frame.fn->starts_with("py::") && frame.module &&
        frame.module->ends_with(".map")) {
      continue;
    }
    out += "native\t";
    append_field(out, frame.module.value_or(""));
    out += '\t';
    if (frame.off) {
      char hex[2 + 16 + 1];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(*frame.off));
      out += hex;
    }
    out += '\t';
    append_field(out, frame.fn.value_or(""));
    out += '\n';
  }
  return out;
}

}  // namespace cumemtrace::preload
