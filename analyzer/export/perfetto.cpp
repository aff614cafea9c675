// `cumemtrace export --format perfetto`: Chrome trace-event JSON (the "JSON
// Object Format" that ui.perfetto.dev and chrome://tracing read).
//
// Perfetto names a counter track "<event name> <arg key>" and keeps counters
// per process, so each device gets the tracks "allocated dev N bytes" and
// "reserved dev N bytes" in the traced process (and "graph reserved dev N
// bytes" where the device reported CUDA graph memory). Timestamps are microseconds
// (the format's unit) with nanosecond decimals. Mark ranges become B/E slices
// on their thread's track; an E must close the slice its thread opened last,
// so pops without an open range are dropped and ranges still open at the end
// of the trace are closed there.
//
// Counters: one point per change of a 2.4-million-event trace is about as
// large as the trace itself, more than a browser opens comfortably. So by
// default (export_perfetto's `points`) the TimelineCollector cuts time into
// buckets and keeps each bucket's extremes, real moments of the trace, and
// those points go out once the trace is read, after the marks, OOMs and
// errors, which stream as they come: the trace-event format lets events come
// in any order, and the viewers sort them by time.
#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/timeline.h"
#include "cumemtrace/analyzer/units.h"
#include "export/text_builders.h"

namespace cumemtrace::analyzer {

namespace {

using detail::append_int;
using detail::append_json_string;
using detail::append_micros;
using detail::append_uint;

// Deeper nesting on one thread is not drawn (and its pops are matched up).
constexpr std::size_t kMaxNesting = 256;

class PerfettoWriter final : public TimelineSink {
 public:
  PerfettoWriter(std::ostream& out, const TraceHeader& header) : out_(out) {
    pid_ = header.pid > 0 ? header.pid : 1;
    out_.text += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
    std::string process = "cumemtrace: ";
    if (!header.argv.empty()) {
      for (std::size_t i = 0; i < header.argv.size(); ++i) process += (i ? " " : "") + header.argv[i];
    } else {
      process += header.exe.empty() ? "(unknown program)" : header.exe;
    }
    begin_event("M", 0, static_cast<std::uint64_t>(pid_));
    out_.text += ",\"name\":\"process_name\",\"args\":{\"name\":";
    append_json_string(out_.text, process);
    out_.text += "}}";
    see_thread(static_cast<std::uint64_t>(pid_));
  }

  void sample(const TimelineSample& s) override {
    Counters& c = counters_[s.dev];
    if (!c.seen || c.allocated != s.allocated) counter("allocated", s.t, s.dev, s.allocated);
    if (!c.seen || c.reserved != s.reserved) counter("reserved", s.t, s.dev, s.reserved);
    // The driver's graph memory (a part of reserved) is its own track, from
    // the device's first graph_mem on.
    if (s.graph_reserved && c.graph_reserved != s.graph_reserved) {
      counter("graph reserved", s.t, s.dev, *s.graph_reserved);
    }
    c = Counters{true, s.allocated, s.reserved, s.graph_reserved};
  }

  void on_event(const TraceEvent& e, const StackTable& stacks) {
    using format::Event;
    switch (e.ev) {
      case Event::mark: on_mark(e); break;
      case Event::oom: on_oom(e, stacks); break;
      case Event::error: on_error(e, stacks); break;
      default: break;
    }
  }

  ExportSummary finish(std::uint64_t last_t) {
    // Close what is still open, innermost first, at the end of the trace.
    for (auto& [tid, nesting] : threads_) {
      for (auto it = nesting.open.rbegin(); it != nesting.open.rend(); ++it) {
        slice_end(tid, last_t, *it);
        ++summary_.open_ranges;
      }
      nesting.open.clear();
    }
    out_.text += "\n]}\n";
    out_.flush();
    return summary_;
  }

 private:
  struct Counters {
    bool seen = false;
    std::uint64_t allocated = 0;
    std::uint64_t reserved = 0;
    std::optional<std::uint64_t> graph_reserved;
  };
  struct Nesting {
    std::vector<std::string> open;  // names of the open ranges, outermost first
    std::size_t hidden = 0;         // pushes past kMaxNesting, not drawn
  };

  // `{"ph":PH,"pid":P,"tid":T,"ts":TS` (the caller adds the rest and `}`).
  void begin_event(const char* ph, std::uint64_t t, std::uint64_t tid) {
    std::string& o = out_.text;
    if (events_ > 0) o += ",\n";
    ++events_;
    ++summary_.records;
    o += "{\"ph\":\"";
    o += ph;
    o += "\",\"pid\":";
    append_int(o, pid_);
    o += ",\"tid\":";
    append_uint(o, tid);
    o += ",\"ts\":";
    append_micros(o, t);
    out_.maybe_flush();
  }

  void see_thread(std::uint64_t tid) {
    auto [it, inserted] = threads_.try_emplace(tid);
    if (!inserted) return;
    begin_event("M", 0, tid);
    out_.text += ",\"name\":\"thread_name\",\"args\":{\"name\":\"";
    out_.text += static_cast<std::int64_t>(tid) == pid_ ? "main thread " : "thread ";
    append_uint(out_.text, tid);
    out_.text += "\"}}";
  }

  void counter(const char* what, std::uint64_t t, int dev, std::uint64_t bytes) {
    begin_event("C", t, static_cast<std::uint64_t>(pid_));
    std::string& o = out_.text;
    o += ",\"cat\":\"memory\",\"name\":\"";
    o += what;
    o += " dev ";
    append_int(o, dev);
    o += "\",\"args\":{\"bytes\":";
    append_uint(o, bytes);
    o += "}}";
  }

  void slice_end(std::uint64_t tid, std::uint64_t t, const std::string& name) {
    begin_event("E", t, tid);
    out_.text += ",\"cat\":\"mark\",\"name\":";
    append_json_string(out_.text, name);
    out_.text += '}';
  }

  void on_mark(const TraceEvent& e) {
    see_thread(e.tid);
    Nesting& nesting = threads_[e.tid];
    if (e.kind == "push") {
      if (nesting.open.size() >= kMaxNesting) {
        ++nesting.hidden;
        return;
      }
      nesting.open.emplace_back(e.name);
      begin_event("B", e.t, e.tid);
      out_.text += ",\"cat\":\"mark\",\"name\":";
      append_json_string(out_.text, e.name);
      out_.text += '}';
    } else if (e.kind == "pop") {
      if (nesting.hidden > 0) {
        --nesting.hidden;
        return;
      }
      if (nesting.open.empty()) {
        ++summary_.unmatched_pops;
        return;
      }
      slice_end(e.tid, e.t, nesting.open.back());
      nesting.open.pop_back();
    } else {  // instant, or a kind this exporter does not know: still a moment worth seeing
      begin_event("i", e.t, e.tid);
      out_.text += ",\"s\":\"t\",\"cat\":\"mark\",\"name\":";
      append_json_string(out_.text, e.name);
      out_.text += '}';
    }
  }

  // `"python":"train_step (/work/train.py:42)"`, the innermost Python
  // frame, when the stack has one (a key added only then).
  static void append_python(std::string& o, const StackTable& stacks, std::uint64_t stack) {
    const std::string python = detail::innermost_python_frame(stacks.find(stack));
    if (python.empty()) return;
    o += ",\"python\":";
    append_json_string(o, python);
  }

  void on_oom(const TraceEvent& e, const StackTable& stacks) {
    see_thread(e.tid);
    begin_event("i", e.t, e.tid);
    std::string& o = out_.text;
    // Process scope: an OOM matters to the whole process, drawn across it.
    o += ",\"s\":\"p\",\"cat\":\"oom\",\"name\":";
    append_json_string(o, "OOM dev " + std::to_string(e.dev) + ": " + format_bytes(e.size) + " (" +
                              std::string(e.cause) + ")");
    o += ",\"args\":{\"dev\":";
    append_int(o, e.dev);
    o += ",\"api\":";
    append_json_string(o, e.api);
    o += ",\"size\":";
    append_uint(o, e.size);
    if (e.block) {
      o += ",\"block\":";
      append_uint(o, *e.block);
    }
    o += ",\"cause\":";
    append_json_string(o, e.cause);
    const std::pair<const char*, std::uint64_t> figures[] = {
        {"allocated", e.allocated},     {"reserved", e.reserved},       {"cached_free", e.cached_free},
        {"largest_free", e.largest_free}, {"device_free", e.device_free}, {"device_total", e.device_total},
        {"stack", e.stack}};
    for (const auto& [key, value] : figures) {
      o += ",\"";
      o += key;
      o += "\":";
      append_uint(o, value);
    }
    o += ",\"function\":";
    append_json_string(o, detail::innermost_function(stacks.find(e.stack)));
    append_python(o, stacks, e.stack);
    o += "}}";
  }

  void on_error(const TraceEvent& e, const StackTable& stacks) {
    see_thread(e.tid);
    begin_event("i", e.t, e.tid);
    std::string& o = out_.text;
    o += ",\"s\":\"t\",\"cat\":\"error\",\"name\":";
    append_json_string(o, "error: " + std::string(e.what));
    o += ",\"args\":{\"api\":";
    append_json_string(o, e.api);
    o += ",\"ptr\":\"";
    detail::append_hex(o, e.ptr);
    o += "\",\"stack\":";
    append_uint(o, e.stack);
    o += ",\"function\":";
    append_json_string(o, detail::innermost_function(stacks.find(e.stack)));
    append_python(o, stacks, e.stack);
    o += "}}";
  }

  detail::ChunkedOutput out_;
  std::int64_t pid_ = 1;
  std::uint64_t events_ = 0;
  std::map<int, Counters> counters_;
  std::map<std::uint64_t, Nesting> threads_;
  ExportSummary summary_;
};

}  // namespace

ExportSummary export_perfetto(TraceReader& reader, std::ostream& out, std::size_t points) {
  PerfettoWriter writer(out, reader.header());
  Analysis analysis;
  // The collector keeps no marks or OOMs: the writer sees those in on_event.
  const TimelineOptions options{.buckets = points, .max_marks = 0, .max_ooms = 0, .keep_minima = true};
  TimelineCollector counters(options, points == 0 ? &writer : nullptr);
  while (const TraceEvent* e = reader.next()) {
    analysis.consume(*e);
    counters.consume(*e, analysis);
    writer.on_event(*e, analysis.stacks());
  }
  if (points != 0) counters.replay(writer);
  return writer.finish(analysis.last_t());
}

}  // namespace cumemtrace::analyzer
