// Every field of a decoded line as one string, to compare two ways of
// decoding the same line (batch and single, with and without line shapes):
// equal digests mean equal verdicts and equal events. Header-only, for the
// unit tests and the fuzzer (built apart, with clang).
#pragma once

#include <string>

#include "cumemtrace/analyzer/trace_event.h"
#include "read/line_parser.h"

namespace cumemtrace::test {

inline std::string event_digest(const analyzer::detail::ParseResult& r, const analyzer::TraceEvent& e) {
  using std::to_string;
  std::string out = r.describe() + "|status " + to_string(static_cast<int>(r.status)) + "|unknown " +
                    to_string(r.unknown_fields);
  if (r.status != analyzer::detail::ParseResult::Status::ok) return out;
  auto add = [&](const char* name, const std::string& value) { out += std::string("|") + name + " " + value; };
  auto text = [](std::string_view v) { return "'" + std::string(v) + "'"; };
  auto maybe = [](const std::optional<std::uint64_t>& v) { return v ? to_string(*v) : std::string("-"); };
  add("ev", to_string(static_cast<int>(e.ev)));
  add("t", to_string(e.t));
  add("tid", to_string(e.tid));
  add("dev", to_string(e.dev));
  add("ptr", to_string(e.ptr));
  add("size", to_string(e.size));
  add("block", maybe(e.block));
  add("stream", maybe(e.stream));
  add("stack", to_string(e.stack));
  add("api", text(e.api));
  add("kind", text(e.kind));
  add("memory_kind", to_string(static_cast<int>(e.memory_kind)));
  add("name", text(e.name));
  add("total", to_string(e.total));
  add("id", to_string(e.id));
  for (const auto& f : e.frames) {
    add("frame", std::string(f.py ? "py " : "") + to_string(f.ip) + " " + text(f.fn) + (f.has_fn ? "+" : "-") + " " + text(f.module) + " " +
                     maybe(f.off) + " " + text(f.file) + " " + maybe(f.line));
  }
  add("allocated", to_string(e.allocated));
  add("reserved", to_string(e.reserved));
  add("cached_free", to_string(e.cached_free));
  add("largest_free", to_string(e.largest_free));
  add("device_free", to_string(e.device_free));
  add("device_total", to_string(e.device_total));
  add("free_blocks", to_string(e.free_blocks));
  add("inactive_split", to_string(e.inactive_split));
  add("cause", text(e.cause));
  add("what", text(e.what));
  add("reason", text(e.reason));
  add("end_reason", to_string(static_cast<int>(e.end_reason)));
  add("live", to_string(e.live));
  add("live_bytes", to_string(e.live_bytes));
  add("dropped", to_string(e.dropped));
  add("format", text(e.format_name));
  add("version", to_string(e.version));
  add("pid", to_string(e.pid));
  add("ppid", to_string(e.ppid));
  add("host", text(e.host));
  add("exe", text(e.exe));
  for (const auto& a : e.argv) add("argv", text(a));
  add("start_unix_ns", to_string(e.start_unix_ns));
  add("pool", text(e.pool));
  add("config", e.config_json);
  add("env", e.env_json);
  add("rank_env", e.rank_env_json);
  return out;
}

}  // namespace cumemtrace::test
