#include "cumemtrace/analyzer/report.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;

// The time of a peak, or null when nothing was ever allocated.
Json peak_time(const Watermark& w) { return w.peak == 0 ? Json(nullptr) : Json(w.peak_t); }

// The figures that exist both per device and in total, under the same keys.
void add_memory(Json& j, const MemoryTotals& m) {
  j["peak_allocated"] = m.allocated.peak;
  j["peak_allocated_t"] = peak_time(m.allocated);
  j["peak_reserved"] = m.reserved.peak;
  j["peak_reserved_t"] = peak_time(m.reserved);
  j["allocs"] = m.allocs;
  j["frees"] = m.frees;
  j["unknown_frees"] = m.unknown_frees;
  j["duplicate_allocs"] = m.duplicate_allocs;
  j["segment_allocs"] = m.segment_allocs;
  j["segment_frees"] = m.segment_frees;
  j["unknown_segment_frees"] = m.unknown_segment_frees;
  j["ooms"] = m.ooms;
  j["leaked_bytes"] = m.allocated.current;
  j["leaked_count"] = m.live_allocations;
  j["reserved_at_end"] = m.reserved.current;
}

Json frames_json(const std::vector<OwnedFrame>& frames) {
  Json list = Json::array();
  for (const OwnedFrame& f : frames) {
    Json frame;
    frame["ip"] = format_hex(f.ip);
    frame["fn"] = f.fn ? Json(*f.fn) : Json(nullptr);
    frame["module"] = f.module;
    if (f.off) frame["off"] = format_hex(*f.off);
    if (!f.file.empty()) frame["file"] = f.file;
    if (f.line) frame["line"] = *f.line;
    list.push_back(std::move(frame));
  }
  return list;
}

Json leaks_json(const Analysis& analysis, const ReportOptions& options) {
  Json list = Json::array();
  for (const LeakGroup& g : analysis.leaks(options.max_examples)) {
    Json group;
    group["stack"] = g.stack;
    group["bytes"] = g.bytes;
    group["count"] = g.count;
    group["first_t"] = g.first_t;
    group["apis"] = g.apis;
    group["devices"] = g.devices;
    Json kinds = Json::array();
    for (format::MemoryKind k : g.kinds) kinds.push_back(format::name(k));
    group["kinds"] = std::move(kinds);
    Json examples = Json::array();
    for (const LeakExample& e : g.examples) {
      examples.push_back(Json{{"ptr", format_hex(e.ptr)}, {"size", e.size}, {"t", e.t}});
    }
    group["examples"] = std::move(examples);
    const std::vector<OwnedFrame>* frames = g.stack == 0 ? nullptr : analysis.stacks().find(g.stack);
    group["frames"] = frames ? frames_json(*frames) : Json::array();
    list.push_back(std::move(group));
  }
  return list;
}

}  // namespace

Json render_json_report(const TraceReader& reader, const Analysis& analysis, const ReportOptions& options) {
  const TraceHeader& h = reader.header();
  const ReaderStats& stats = reader.stats();
  Json j;
  j["trace"] = reader.path();
  j["format_version"] = h.version;
  j["program"] = Json{{"argv", h.argv}, {"exe", h.exe},     {"pid", h.pid},
                      {"ppid", h.ppid}, {"host", h.host},   {"pool", h.pool},
                      {"start_unix_ns", h.start_unix_ns}};
  j["duration_t"] = analysis.last_t();
  add_memory(j, analysis.total());
  j["errors"] = analysis.errors();

  Json devices = Json::object();
  for (const auto& [dev, info] : analysis.devices()) {
    Json d;
    d["name"] = info.described ? Json(info.name) : Json(nullptr);
    d["total_bytes"] = info.described ? Json(info.total_bytes) : Json(nullptr);
    add_memory(d, info.memory);
    devices[std::to_string(dev)] = std::move(d);
  }
  j["devices"] = std::move(devices);
  j["leaks"] = leaks_json(analysis, options);

  j["truncated"] = stats.truncated;
  j["truncated_after_line"] = stats.truncated ? Json(stats.last_complete_line) : Json(nullptr);
  j["has_end"] = stats.has_end;
  if (stats.end) {
    j["end"] = Json{{"t", stats.end->t},
                    {"reason", stats.end->reason_text},
                    {"live", stats.end->live},
                    {"live_bytes", stats.end->live_bytes},
                    {"dropped", stats.end->dropped}};
  } else {
    j["end"] = nullptr;
  }
  j["lines"] = stats.lines;
  Json events = Json::object();
  for (std::size_t i = 0; i < stats.events_by_kind.size(); ++i) {
    events[std::string(format::name(static_cast<format::Event>(i)))] = stats.events_by_kind[i];
  }
  j["events"] = std::move(events);
  j["unknown_events"] = stats.unknown_events;
  j["unknown_fields"] = stats.unknown_fields;
  j["bad_lines"] = stats.bad_lines;
  Json bad = Json::array();
  for (const BadLine& b : stats.first_bad_lines) bad.push_back(Json{{"line", b.line}, {"reason", b.reason}});
  j["first_bad_lines"] = std::move(bad);
  return j;
}

}  // namespace cumemtrace::analyzer
