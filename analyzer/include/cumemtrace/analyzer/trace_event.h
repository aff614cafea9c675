// One decoded trace line. The reader reuses a single TraceEvent for every
// line, so decoding allocates nothing once the vectors have grown: string
// views point into the reader's buffers and stay valid only until the next
// call to TraceReader::next().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/trace_format.h"

namespace cumemtrace::analyzer {

// One frame of a `stack` event, innermost first. A Python frame (`py`) has
// `fn` (the qualified name), `file` and maybe `line`, and no ip, module or off.
struct StackFrame {
  std::uint64_t ip = 0;
  std::string_view fn;  // demangled name; empty when the trace has null
  bool has_fn = false;
  std::string_view module;
  std::optional<std::uint64_t> off;
  std::string_view file;
  std::optional<std::uint64_t> line;
  bool py = false;  // last: aggregate initialisers list the native fields
};

// The trace's first line, kept (owned) by the reader for the whole read.
struct TraceHeader {
  std::string format;
  int version = 0;
  std::int64_t pid = 0;
  std::int64_t ppid = 0;
  std::string host;
  std::string exe;
  std::vector<std::string> argv;
  std::uint64_t start_unix_ns = 0;
  std::string pool;         // "caching" or "passthrough"
  std::string config_json;  // the `config` object, minified; empty if absent
  // The `env` object, minified (README.md, "Additions to the trace format"):
  // the allocator variables set in the traced process. Empty if absent, or
  // if the field was not an object (ignored: it is informational).
  std::string env_json;

  // One variable of `env`: its value if the header recorded it as a string,
  // else nullopt (not set in the process, no `env`, or a value of another
  // type, ignored). Parses env_json on each call: for the few questions a
  // command asks once, not for a per-event loop.
  std::optional<std::string> env(std::string_view name) const;

  // The `rank_env` object, minified (README.md, "Additions to the trace
  // format"): the launcher's rank variables as the process started with
  // them. Empty if absent or not an object.
  std::string rank_env_json;
  // One variable of `rank_env`, as env() reads one of `env`.
  std::optional<std::string> rank_env(std::string_view name) const;
};

// The trace's `end` line, kept (owned) by the reader.
struct EndInfo {
  std::uint64_t t = 0;
  format::EndReason reason = format::EndReason::unknown;
  std::string reason_text;
  std::uint64_t live = 0;
  std::uint64_t live_bytes = 0;
  std::uint64_t dropped = 0;
};

// Every field of every event kind, flat: which ones are meaningful depends on
// `ev` (see TRACE_FORMAT.md). Fields an event does not carry keep their
// zero/empty defaults.
struct TraceEvent {
  format::Event ev = format::Event::unknown;
  std::uint64_t line = 0;  // 1-based line number in the trace

  std::uint64_t t = 0;
  std::uint64_t tid = 0;
  int dev = 0;
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  std::optional<std::uint64_t> block;   // alloc, oom
  std::optional<std::uint64_t> stream;  // stream-ordered alloc/free
  std::uint64_t stack = 0;              // 0: no stack captured
  std::string_view api;
  // Raw `kind` text: a memory kind for alloc/free, push/pop/instant for mark.
  std::string_view kind;
  format::MemoryKind memory_kind = format::MemoryKind::unknown;

  // device (name, total); mark (name)
  std::string_view name;
  std::uint64_t total = 0;

  // stack
  std::uint64_t id = 0;
  std::vector<StackFrame> frames;

  // oom and pool
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t cached_free = 0;
  std::uint64_t largest_free = 0;
  std::uint64_t device_free = 0;
  std::uint64_t device_total = 0;
  std::uint64_t free_blocks = 0;
  std::uint64_t inactive_split = 0;
  std::string_view cause;  // oom: "fragmentation" or "capacity"

  // graph_alloc, graph_exec, graph_destroy, graph_mem; a graph launch's mark
  std::uint64_t graph = 0;  // 0: absent
  std::uint64_t exec = 0;   // 0: absent
  std::uint64_t used = 0;   // graph_mem (its `reserved` is above)

  // error
  std::string_view what;

  // end
  std::string_view reason;
  format::EndReason end_reason = format::EndReason::unknown;
  std::uint64_t live = 0;
  std::uint64_t live_bytes = 0;
  std::uint64_t dropped = 0;

  // header: raw fields as decoded; the reader also keeps an owned copy and
  // points `header` at it when yielding the header event.
  std::string_view format_name;
  std::int64_t version = 0;
  std::int64_t pid = 0;
  std::int64_t ppid = 0;
  std::string_view host;
  std::string_view exe;
  std::vector<std::string_view> argv;
  std::uint64_t start_unix_ns = 0;
  std::string_view pool;
  std::string config_json;
  std::string env_json;
  std::string rank_env_json;
  const TraceHeader* header = nullptr;

  // Back to defaults, keeping the vectors' capacity.
  void reset();
};

}  // namespace cumemtrace::analyzer
