#include "record/recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>

#include "pending/compact_event.h"
#include "output/output_template.h"
#include "text/diagnostics.h"
#include "output/output_path.h"
#include "common/process_facts.h"

namespace cumemtrace::preload {

using contract::LineBuffer;
using contract::warn;
using contract::pending::CompactEvent;

namespace {

std::uint64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// gettid is a system call: asked once per thread. Initial-exec TLS with a
// constant initialiser: no __tls_get_addr call and no guard on each event.
thread_local long t_tid __attribute__((tls_model("initial-exec"))) = 0;

long thread_id() {
  if (t_tid == 0) t_tid = static_cast<long>(::syscall(SYS_gettid));
  return t_tid;
}

// An alloc or free whose text the writer thread makes
// (pending/compact_event.h).
CompactEvent compact_event(format::Event ev, const char* api, format::MemoryKind kind, int dev, std::uintptr_t ptr,
                           std::size_t size, std::optional<std::uintptr_t> stream) {
  CompactEvent event;
  event.ev = ev;
  event.kind = kind;
  event.dev = dev;
  event.tid = thread_id();
  event.api = api;
  event.ptr = ptr;
  event.size = size;
  if (stream) {
    event.stream = *stream;
    event.optional |= CompactEvent::kHasStream;
  }
  return event;
}

FreeFamily family_of(Releases r) {
  switch (r) {
    case Releases::host_pinned: return FreeFamily::host_pinned;
    case Releases::any_kind: return FreeFamily::any;
    case Releases::device:
    case Releases::vmm_handle: break;
  }
  return FreeFamily::device;
}

FreeOutcome outcome_of(TakeResult r) {
  switch (r) {
    case TakeResult::taken: return FreeOutcome::recorded;
    case TakeResult::freed_before: return FreeOutcome::double_free;
    case TakeResult::other_kind: return FreeOutcome::other_kind;
    case TakeResult::unknown: break;
  }
  return FreeOutcome::unknown_pointer;
}

}  // namespace

Recorder::Recorder(const contract::Config& config, DeviceQuery query, const StackPlatform& stacks)
    : config_(config),
      query_(query),
      start_unix_ns_(unix_now_ns()),
      writer_(TickClock::monotonic_ns(), config.buffer_kb * 1024, config.flush_ms),
      stacks_(config.stacks, stacks, writer_) {}

bool Recorder::ensure_trace_open() {
  if (writer_.is_open()) return true;
  if (open_failed_.load(std::memory_order_relaxed)) return false;
  // The file is created on the first event, not at load: a process that never
  // touches device memory (a shell, a compiler started by the program) leaves
  // no empty trace behind.
  std::call_once(open_once_, [this] { write_header(); });
  return writer_.is_open();
}

void Recorder::write_header() {
  contract::TemplateValues values;
  values.pid = static_cast<long>(::getpid());
  values.host = host_name();
  values.rank = contract::rank_from_environment();
  values.start_unix_ns = start_unix_ns_;
  // Always a value: the start time is known here.
  std::string path = contract::expand_output_template(config_.output_template, values).value_or("");
  // A name with the pid may be taken by this very process: it exec'd, and
  // the program before the exec wrote a trace under the same pid.
  const bool pid_in_name = config_.output_template.find("%p") != std::string::npos;
  const int fd = contract::create_trace_file(path, pid_in_name);
  if (fd < 0) {
    warn("cannot create the trace file %s: %s; this process is not traced", path.c_str(),
         contract::trace_file_error(fd));
    open_failed_.store(true, std::memory_order_relaxed);
    return;
  }
  LineBuffer header;
  header.raw("{\"ev\":\"header\"")
      .field_str("format", format::kFormatName)
      .field("version", format::kVersion)
      .field_i("pid", values.pid)
      .field_i("ppid", static_cast<long>(::getppid()))
      .field_str("host", values.host)
      .field_str("exe", executable_path());
  header.key("argv").ch('[');
  bool first = true;
  for (const auto& arg : command_line()) {
    if (!first) header.ch(',');
    header.str(arg);
    first = false;
  }
  header.ch(']');
  header.field("start_unix_ns", start_unix_ns_).field_plain("pool", contract::pool_mode_name(config_.pool));
  header.key("config");
  // Whether Python frames are walked, and why not where there is an
  // interpreter they cannot be read from (an unsupported version or build).
  LineBuffer python;
  if (const std::string note = stacks_.python_note(); !note.empty()) python.field_str("python_frames", note);
  contract::append_config_json(header, config_, python.view());
  // Read now, not at load: a Python script often sets these in os.environ
  // before it imports torch, after this library was loaded.
  contract::append_header_env(header, [](const char* name) { return std::getenv(name); });
  contract::append_header_rank_env(header, config_);
  header.ch('}');
  writer_.keep_pending_file(config_.kill_safe);
  if (!writer_.attach(fd, std::move(path), header)) open_failed_.store(true, std::memory_order_relaxed);
}

void Recorder::describe_device_once(int dev) {
  if (dev < 0 || dev >= kMaxDevices) return;
  if (device_described_[dev].load(std::memory_order_acquire)) return;
  std::scoped_lock lock(device_mutex_);
  if (device_described_[dev].load(std::memory_order_relaxed)) return;
  DeviceDescription d;
  if (!query_ || !query_(dev, d)) d.name = "unknown";
  LineBuffer body;
  body.field_i("dev", dev).field_str("name", d.name).field("total", d.total_bytes);
  writer_.emit(format::name(format::Event::device), body);
  device_described_[dev].store(true, std::memory_order_release);
}

void Recorder::on_alloc(const AllocationFacts& f) {
  if (inert_.load(std::memory_order_relaxed)) return;
  const bool vmm = f.kind == format::MemoryKind::vmm;
  if (!vmm && f.ptr == 0) return;
  // The stack is captured before the allocation enters the table, which
  // keeps its id for the query API (nothing can free the pointer before
  // this hook returns it to the program).
  const bool open = ensure_trace_open();
  std::uint32_t stack = 0;
  if (open) {
    describe_device_once(f.dev);
    stack = stacks_.current_stack_id();
  }
  const std::uint32_t epoch = usage_.epoch();
  const std::uint64_t over_watch_line =
      vmm ? vmm_.create(f.ptr, f.size, f.dev, stack, epoch)
          : live_.insert(f.ptr, LiveAllocation{.size = f.size,
                                               .dev = f.dev,
                                               .kind = f.kind,
                                               .context_bound = f.context_bound,
                                               .pooled = f.block != 0,
                                               .stack = stack,
                                               .epoch = epoch});
  if (over_watch_line != 0) [[unlikely]] take_watch_snapshot(over_watch_line);
  if (!open) return;

  CompactEvent event = compact_event(format::Event::alloc, f.api, f.kind, f.dev, f.ptr, f.size, f.stream);
  event.stack = stack;
  if (f.block != 0) {
    event.block = f.block;
    event.optional |= CompactEvent::kHasBlock;
  }
  // vmm: physical memory only, a segment when it is mapped. Pooled: the pool
  // wrote its segment_alloc when it grew (on_segment_alloc). Passthrough: the
  // driver's memory is the application's block, so reserved memory changed
  // too, just before the application received it (the writer adds that
  // segment_alloc line).
  if (!vmm && f.block == 0) event.optional |= CompactEvent::kWithSegmentTwin;
  if (!writer_.emit_compact({event}) && !vmm) live_.mark_unrecorded(f.ptr);
}

void Recorder::emit_free(const char* api, std::uintptr_t ptr, const LiveAllocation& a,
                         std::optional<std::uintptr_t> stream) {
  if (!ensure_trace_open()) return;
  // A pooled block goes back to the pool, its segment staying reserved; a
  // passthrough free has its segment_free line after it.
  const std::uint64_t lines = a.pooled ? 1 : 2;
  if (!a.recorded) {
    writer_.leave_out(lines);  // its alloc line was dropped: no half pair
    return;
  }
  CompactEvent event = compact_event(format::Event::free, api, a.kind, a.dev, ptr, a.size, stream);
  event.stack = free_stack_id();
  if (!a.pooled) event.optional |= CompactEvent::kWithSegmentTwin;
  writer_.emit_compact({event});
}

FreeOutcome Recorder::on_free(const FreeFacts& f) {
  if (inert_.load(std::memory_order_relaxed)) return FreeOutcome::recorded;
  if (f.releases == Releases::vmm_handle) {
    const auto r = vmm_.release(f.ptr);
    const FreeOutcome outcome = outcome_of(r.result);
    if (outcome != FreeOutcome::recorded) {
      on_error(f.api, f.ptr, outcome == FreeOutcome::double_free ? "double_free" : "unknown_pointer");
      return outcome;
    }
    // Still referenced (cuMemRetainAllocationHandle): not given back yet.
    if (!r.last || !ensure_trace_open()) return outcome;
    CompactEvent event =
        compact_event(format::Event::free, f.api, format::MemoryKind::vmm, r.handle.dev, f.ptr, r.handle.size, {});
    event.stack = free_stack_id();
    writer_.emit_compact({event});
    return outcome;
  }
  const auto taken = live_.take(f.ptr, family_of(f.releases));
  const FreeOutcome outcome = outcome_of(taken.result);
  switch (outcome) {
    case FreeOutcome::recorded:
      emit_free(f.api, f.ptr, taken.allocation, f.stream);
      break;
    case FreeOutcome::unknown_pointer:
    case FreeOutcome::double_free:
      // A memory node's address (perhaps one the program freed before): the
      // captured free (a free node), or the program freeing what a launch
      // left it. Graph memory, not a misuse.
      if (is_graph_address(f.ptr)) return FreeOutcome::recorded;
      on_error(f.api, f.ptr, outcome == FreeOutcome::double_free ? "double_free" : "unknown_pointer");
      break;
    case FreeOutcome::other_kind:
      break;
  }
  return outcome;
}

void Recorder::on_vmm_retain(std::uint64_t handle) {
  if (inert_.load(std::memory_order_relaxed)) return;
  vmm_.retain(handle);
}

void Recorder::on_map(const char* api, std::uintptr_t ptr, std::size_t size, std::uint64_t handle,
                      int fallback_dev) {
  if (inert_.load(std::memory_order_relaxed)) return;
  const auto h = vmm_.find(handle);
  const int dev = h ? h->dev : fallback_dev;
  mapped_.map(ptr, size, dev);
  if (!ensure_trace_open()) return;
  describe_device_once(dev);
  LineBuffer segment;
  segment.field_i("dev", dev).field_hex("ptr", ptr).field("size", size).field_plain("api", api);
  writer_.emit(format::name(format::Event::segment_alloc), segment);
}

void Recorder::on_unmap(std::uintptr_t ptr, std::size_t size) {
  if (inert_.load(std::memory_order_relaxed)) return;
  const auto removed = mapped_.unmap(ptr, size);
  if (removed.empty() || !ensure_trace_open()) return;
  for (const auto& [base, range] : removed) {
    LineBuffer segment;
    segment.field_i("dev", range.dev).field_hex("ptr", base).field("size", range.size);
    writer_.emit(format::name(format::Event::segment_free), segment);
  }
}

void Recorder::on_device_reset(const char* api, int dev) {
  if (inert_.load(std::memory_order_relaxed)) return;
  const auto dropped = live_.take_device(dev);
  for (const auto& [ptr, allocation] : dropped) emit_free(api, ptr, allocation, std::nullopt);
}

void Recorder::on_error(const char* api, std::uintptr_t ptr, const char* what) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  LineBuffer body;
  body.field_i("tid", thread_id()).field_plain("api", api).field_hex("ptr", ptr).field_plain("what", what);
  append_stack(body);
  writer_.emit(format::name(format::Event::error), body);
}

void Recorder::on_segment_alloc(int dev, std::uintptr_t ptr, std::size_t size, const char* api) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  describe_device_once(dev);
  LineBuffer segment;
  // "pool": the caching pool's own memory (it serves the program's
  // allocations from it), not a mapping or allocation the program made
  // (README, "Additions to the trace format").
  segment.field_i("dev", dev).field_hex("ptr", ptr).field("size", size).field_plain("api", api).field_true("pool");
  writer_.emit(format::name(format::Event::segment_alloc), segment);
}

void Recorder::on_segment_free(int dev, std::uintptr_t ptr, std::size_t size) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  LineBuffer segment;
  segment.field_i("dev", dev).field_hex("ptr", ptr).field("size", size);
  writer_.emit(format::name(format::Event::segment_free), segment);
}

void Recorder::on_oom(const char* api, const pool::OomReport& r) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  describe_device_once(r.device);
  LineBuffer body;
  body.field_i("tid", thread_id())
      .field_plain("api", api)
      .field_i("dev", r.device)
      .field("size", r.size)
      .field("block", r.block)
      .field("allocated", r.allocated)
      .field("reserved", r.reserved)
      .field("cached_free", r.cached_free)
      .field("largest_free", r.largest_free)
      .field("device_free", r.device_free)
      .field("device_total", r.device_total)
      .field_plain("cause", pool::to_string(r.cause));
  if (r.stream_ordered) body.field_hex("stream", r.stream);
  append_stack(body);
  writer_.emit(format::name(format::Event::oom), body);
}

void Recorder::on_pool_sample(int dev, const pool::PoolStats& s) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  LineBuffer body;
  body.field_i("dev", dev)
      .field("allocated", s.allocated)
      .field("reserved", s.reserved)
      .field("cached_free", s.cached_free)
      .field("largest_free", s.largest_free)
      .field("free_blocks", s.free_blocks)
      .field("inactive_split", s.inactive_split)
      // Beyond TRACE_FORMAT.md's fields (readers skip unknown ones): what
      // the application asked for (rounding waste) and what waits for a
      // synchronisation before it can be reused.
      .field("requested", s.requested)
      .field("pending_free", s.pending_free);
  writer_.emit(format::name(format::Event::pool), body);
}

void Recorder::on_mark(format::MarkKind kind, std::string_view name) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  LineBuffer body;
  body.field_i("tid", thread_id()).field_str("name", name).field_plain("kind", format::name(kind));
  writer_.emit(format::name(format::Event::mark), body);
}

void Recorder::on_graph_alloc(const char* api, int dev, std::uintptr_t graph, std::uintptr_t ptr,
                              std::size_t size) {
  if (inert_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> lk(graph_mutex_);
    graph_addresses_[ptr] = graph;
  }
  if (!ensure_trace_open()) return;
  describe_device_once(dev);
  LineBuffer body;
  body.field_i("tid", thread_id())
      .field_plain("api", api)
      .field_i("dev", dev)
      .field_hex("graph", graph)
      .field_hex("ptr", ptr)
      .field("size", size);
  append_stack(body);
  writer_.emit(format::name(format::Event::graph_alloc), body);
}

bool Recorder::is_graph_address(std::uintptr_t ptr) {
  std::lock_guard<std::mutex> lk(graph_mutex_);
  return graph_addresses_.count(ptr) != 0;
}

void Recorder::on_graph_exec(const char* api, std::uintptr_t graph, std::uintptr_t exec) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  LineBuffer body;
  body.field_i("tid", thread_id()).field_plain("api", api).field_hex("graph", graph).field_hex("exec", exec);
  append_stack(body);
  writer_.emit(format::name(format::Event::graph_exec), body);
}

void Recorder::on_graph_destroy(const char* api, std::uintptr_t graph, std::uintptr_t exec) {
  if (inert_.load(std::memory_order_relaxed)) return;
  if (graph != 0) {
    // The driver may hand the handle, and the nodes' addresses, out again.
    std::lock_guard<std::mutex> lk(graph_mutex_);
    std::erase_if(graph_addresses_, [graph](const auto& entry) { return entry.second == graph; });
  }
  if (!ensure_trace_open()) return;
  LineBuffer body;
  body.field_i("tid", thread_id()).field_plain("api", api);
  if (graph != 0) body.field_hex("graph", graph);
  if (exec != 0) body.field_hex("exec", exec);
  writer_.emit(format::name(format::Event::graph_destroy), body);
}

void Recorder::on_graph_mem(const char* api, int dev, std::uint64_t used, std::uint64_t reserved) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  describe_device_once(dev);
  LineBuffer body;
  body.field_plain("api", api).field_i("dev", dev).field("used", used).field("reserved", reserved);
  writer_.emit(format::name(format::Event::graph_mem), body);
}

void Recorder::on_graph_launch(const char* api, std::uintptr_t exec) {
  if (inert_.load(std::memory_order_relaxed) || !ensure_trace_open()) return;
  LineBuffer body;
  body.field_i("tid", thread_id())
      .field_plain("name", api)
      .field_plain("kind", format::name(format::MarkKind::instant))
      .field_hex("exec", exec);
  writer_.emit(format::name(format::Event::mark), body);
}

void Recorder::append_end_fields(LineBuffer& end, format::EndReason reason) const {
  end.field_plain("reason", format::name(reason))
      .field("live", live_count())
      .field("live_bytes", live_bytes());
}

void Recorder::on_exit(format::EndReason reason, int signo) {
  if (inert_.load(std::memory_order_relaxed) || !writer_.is_open()) return;
  if (auto before_end = before_end_.load(std::memory_order_acquire)) before_end();
  LineBuffer end;
  append_end_fields(end, reason);
  if (signo != 0) end.field_i("signal", signo);
  writer_.finish(end);
}

void Recorder::on_exit_from_signal() noexcept {
  if (inert_.load(std::memory_order_relaxed) || !writer_.is_open()) return;
  LineBuffer end;
  append_end_fields(end, format::EndReason::exit);
  writer_.finish_from_signal(end);
}

void Recorder::flush_from_signal() noexcept {
  if (!inert_.load(std::memory_order_relaxed)) writer_.flush_from_signal();
}

void Recorder::on_fatal_signal(int signo) noexcept {
  if (inert_.load(std::memory_order_relaxed) || !writer_.is_open()) return;
  LineBuffer end;
  append_end_fields(end, format::EndReason::signal);
  end.field_i("signal", signo);
  writer_.finish_from_signal(end);
}

bool Recorder::on_exec_begin() noexcept {
  if (inert_.load(std::memory_order_relaxed) || !writer_.is_open()) return false;
  LineBuffer end;
  append_end_fields(end, format::EndReason::exec);
  return writer_.begin_exec(end);
}

void Recorder::on_exec_failed() noexcept { writer_.exec_failed(); }

void Recorder::on_fork_child() {
  inert_.store(true, std::memory_order_relaxed);
  writer_.abandon_after_fork();
}

void Recorder::forget_thread_ids_after_fork() {
  t_tid = 0;
  TraceWriter::forget_thread_ids_after_fork();
}

}  // namespace cumemtrace::preload
