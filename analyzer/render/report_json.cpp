#include "cumemtrace/analyzer/report.h"
#include "analyze/report_figures.h"
#include "analyze/site_labels.h"
#include "render/report_graphs.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;

// The time of a peak, or null when nothing was ever allocated.
Json peak_time(const Watermark& w) { return w.peak == 0 ? Json(nullptr) : Json(w.peak_t); }

Json phase_json(const Watermark& w, const PeakPhase& phase) {
  return w.peak == 0 || phase.range == kNoRange ? Json(nullptr) : Json(phase.path);
}

// The figures that exist both per device and in total, under the same keys.
void add_memory(Json& j, const MemoryTotals& m) {
  j["peak_allocated"] = m.allocated.peak;
  j["peak_allocated_t"] = peak_time(m.allocated);
  j["peak_allocated_phase"] = phase_json(m.allocated, m.allocated_peak_phase);
  j["peak_reserved"] = m.reserved.peak;
  j["peak_reserved_t"] = peak_time(m.reserved);
  j["peak_reserved_phase"] = phase_json(m.reserved, m.reserved_peak_phase);
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
  j["fragmentation_at_peak_reserved"] = detail::round_ratio(detail::fragmentation_at_peak_reserved(m));
}

Json frames_json(const std::vector<OwnedFrame>& frames) {
  Json list = Json::array();
  for (const OwnedFrame& f : frames) {
    Json frame;
    if (f.py) {  // as TRACE_FORMAT.md writes a Python frame: no address, a line or null
      frame["py"] = true;
      frame["fn"] = f.fn ? Json(*f.fn) : Json(nullptr);
      frame["file"] = f.file;
      frame["line"] = f.line ? Json(*f.line) : Json(nullptr);
      list.push_back(std::move(frame));
      continue;
    }
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

Json stack_frames(const Analysis& analysis, std::uint64_t stack) {
  const std::vector<OwnedFrame>* frames = stack == 0 ? nullptr : analysis.stacks().find(stack);
  return frames ? frames_json(*frames) : Json::array();
}

// `stack`, `label`, `functions` and `frames` of a call site.
void add_stack(Json& j, const Analysis& analysis, const detail::SiteLabels& labels, std::uint64_t stack) {
  j["stack"] = stack;
  j["label"] = labels(stack);
  j["functions"] = detail::function_names(analysis, stack);
  j["frames"] = stack_frames(analysis, stack);
}

Json leaks_json(const Analysis& analysis, const detail::SiteLabels& labels, const ReportOptions& options) {
  Json list = Json::array();
  for (const LeakGroup& g : analysis.leaks(options.max_examples)) {
    Json group;
    group["stack"] = g.stack;
    group["label"] = labels(g.stack);
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
    group["functions"] = detail::function_names(analysis, g.stack);
    group["frames"] = stack_frames(analysis, g.stack);
    list.push_back(std::move(group));
  }
  return list;
}

Json top_at_peak_json(const Analysis& analysis, const detail::SiteLabels& labels, const ReportOptions& options) {
  Json list = Json::array();
  for (const SiteAtPeak& s : analysis.top_at_peak(options.max_top_sites_json)) {
    Json site;
    add_stack(site, analysis, labels, s.stack);
    site["bytes"] = s.bytes;
    site["count"] = s.count;
    list.push_back(std::move(site));
  }
  return list;
}

// How one thread's (or the main thread's) iterations were delimited.
Json iterations_json(const ThreadIterations& it) {
  Json j{{"source", name(it.source)},
         {"count", it.count},
         {"mark", it.source == IterationInfo::Source::marks ? Json(it.mark) : Json(nullptr)},
         {"period_allocs", it.source == IterationInfo::Source::period ? Json(it.period_allocs) : Json(nullptr)},
         {"other_threads_marks", it.other_threads_marks}};
  if (it.source != IterationInfo::Source::none) j["tid"] = it.tid;
  return j;
}

Json growth_json(const Analysis& analysis, const detail::SiteLabels& labels, const GrowthResult& growth) {
  Json list = Json::array();
  for (const GrowthLeak& g : growth.leaks) {
    Json leak;
    add_stack(leak, analysis, labels, g.stack);
    leak["bytes_per_iteration"] = g.bytes_per_iteration;
    leak["iterations"] = g.iterations;
    leak["first_live_bytes"] = g.first_live_bytes;
    leak["last_live_bytes"] = g.last_live_bytes;
    leak["rising_iterations"] = g.rising_iterations;
    leak["first_iteration"] = g.first_iteration;
    leak["tid"] = g.tid;
    leak["threads"] = g.threads;
    list.push_back(std::move(leak));
  }
  return list;
}

Json phase_json(const PhaseRecord& r) {
  return Json{{"name", r.name},
              {"path", r.path},
              {"tid", r.tid},
              {"start_t", r.start_t},
              {"end_t", r.end_t ? Json(*r.end_t) : Json(nullptr)},
              {"peak_allocated", r.peak_allocated},
              {"peak_reserved", r.peak_reserved},
              {"allocs", r.allocs},
              {"frees", r.frees}};
}

void add_phases(Json& j, const Analysis& analysis) {
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  Json list = Json::array();
  for (const PhaseRecord& r : ranges) list.push_back(phase_json(r));
  j["phases"] = std::move(list);
  Json groups = Json::array();
  for (const PhaseGroup& g : analysis.phase_groups()) {
    groups.push_back(Json{{"path", g.path},
                          {"count", g.count},
                          {"peak_allocated", g.highest.peak_allocated},
                          {"peak_reserved", g.peak_reserved},
                          {"highest", phase_json(g.highest)}});
  }
  j["phase_groups"] = std::move(groups);
}

Json moment_json(const FragmentationMoment& m, bool ratio) {
  if (!m.seen) return nullptr;
  return Json{{"value", ratio ? Json(detail::round_ratio(m.value)) : Json(m.bytes)},
              {"bytes", m.bytes},
              {"t", m.t},
              {"dev", m.dev}};
}

Json fragmentation_json(const Analysis& analysis) {
  const FragmentationTracker& f = analysis.fragmentation();
  Json j;
  j["samples"] = f.samples();
  j["at_peak_reserved"] = detail::round_ratio(detail::fragmentation_at_peak_reserved(analysis.total()));
  j["worst"] = Json{{"reserved_unused", moment_json(f.worst().reserved_unused, true)},
                    {"cached_free_scattered", moment_json(f.worst().cached_free_scattered, true)},
                    {"inactive_split_bytes", moment_json(f.worst().inactive_split_bytes, false)},
                    {"rounding_waste", moment_json(f.worst().rounding_waste, true)}};
  const detail::FragmentationAtEnd end = detail::fragmentation_at_end(analysis);
  j["at_end"] = Json{{"reserved_unused", detail::round_ratio(end.reserved_unused)},
                     {"cached_free_scattered", detail::round_ratio(end.cached_free_scattered)},
                     {"inactive_split_bytes", end.inactive_split_bytes},
                     {"rounding_waste", detail::round_ratio(end.rounding_waste)}};
  Json series = Json::array();
  for (const FragmentationPoint& p : f.series()) {
    series.push_back(Json{{"t", p.t},
                          {"reserved_unused", detail::round_ratio(p.reserved_unused)},
                          {"cached_free_scattered", detail::round_ratio(p.cached_free_scattered)},
                          {"inactive_split_bytes", p.inactive_split_bytes},
                          {"rounding_waste", detail::round_ratio(p.rounding_waste)}});
  }
  j["series"] = std::move(series);
  return j;
}

Json oom_events_json(const TraceReader& reader, const Analysis& analysis, const detail::SiteLabels& labels) {
  const OomAdviceContext context = detail::advice_context(reader.header());
  Json list = Json::array();
  for (const OomRecord& o : analysis.oom_records()) {
    Json j;
    j["t"] = o.t;
    j["dev"] = o.dev;
    j["api"] = o.api;
    j["size"] = o.size;
    j["block"] = o.block ? Json(*o.block) : Json(nullptr);
    j["allocated"] = o.allocated;
    j["reserved"] = o.reserved;
    j["cached_free"] = o.cached_free;
    j["largest_free"] = o.largest_free;
    j["device_free"] = o.device_free;
    j["device_total"] = o.device_total;
    j["cause"] = oom_cause(o) == OomCause::fragmentation ? "fragmentation" : "capacity";
    j["phase"] = o.phase.empty() ? Json(nullptr) : Json(o.phase);
    add_stack(j, analysis, labels, o.stack);
    j["sentence"] = explain_oom(o, context);
    list.push_back(std::move(j));
  }
  return list;
}

}  // namespace

Json render_json_report(const TraceReader& reader, const Analysis& analysis, const ReportOptions& options) {
  const TraceHeader& h = reader.header();
  const ReaderStats& stats = reader.stats();
  Json j;
  j["report_version"] = kReportVersion;
  j["trace"] = reader.path();
  j["format_version"] = h.version;
  j["program"] = Json{{"argv", h.argv}, {"exe", h.exe},     {"pid", h.pid},
                      {"ppid", h.ppid}, {"host", h.host},   {"pool", h.pool},
                      {"start_unix_ns", h.start_unix_ns}};
  // Where in a distributed job the process started (README.md, "Additions to
  // the trace format"); absent from a trace that does not say.
  if (!h.rank_env_json.empty()) {
    Json rank_env = Json::parse(h.rank_env_json, nullptr, false);
    if (rank_env.is_object()) j["program"]["rank_env"] = std::move(rank_env);
  }
  j["duration_t"] = analysis.last_t();
  add_memory(j, analysis.total());
  j["errors"] = analysis.errors();
  Json by_what = Json::object();
  for (const auto& [what, count] : analysis.errors_by_what()) by_what[what] = count;
  j["error_events"] = std::move(by_what);

  Json devices = Json::object();
  for (const auto& [dev, info] : analysis.devices()) {
    Json d;
    d["name"] = info.described ? Json(info.name) : Json(nullptr);
    d["total_bytes"] = info.described ? Json(info.total_bytes) : Json(nullptr);
    add_memory(d, info.memory);
    devices[std::to_string(dev)] = std::move(d);
  }
  j["devices"] = std::move(devices);
  const detail::SiteLabels labels(analysis);
  j["top_at_peak"] = top_at_peak_json(analysis, labels, options);
  j["leaks"] = leaks_json(analysis, labels, options);

  const GrowthResult growth = analysis.growth();
  j["iterations"] = iterations_json(growth.iterations);
  Json& per_thread = j["iterations"]["threads"] = Json::array();
  for (const ThreadIterations& t : growth.iterations.threads) per_thread.push_back(iterations_json(t));
  j["iterations"]["threads_without"] = growth.iterations.threads_without;
  if (!growth.iterations.marker.empty()) {
    j["iterations"]["marker"] = growth.iterations.marker;
    j["iterations"]["marker_count"] = growth.iterations.marker_count;
  }
  j["growth"] = growth_json(analysis, labels, growth);
  j["growth_bytes_per_iteration"] = growth.leaks.empty() ? 0 : growth.leaks.front().bytes_per_iteration;

  add_phases(j, analysis);
  const PhaseTracker& phases = analysis.phases();
  j["mark_ranges"] = Json{{"count", phases.pushes()},
                          {"unbalanced_pops", phases.unbalanced_pops()},
                          {"dropped_pushes", phases.dropped_pushes()},
                          {"omitted", phases.omitted_records()},
                          {"ungrouped", phases.ungrouped()}};
  j["fragmentation"] = fragmentation_json(analysis);
  // Only when the trace has graph events: reports of other traces keep their shape.
  if (analysis.graphs().any()) j["graphs"] = detail::graphs_json(analysis, labels);
  j["oom_events"] = oom_events_json(reader, analysis, labels);

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
    // Graph events (later additions) only when present: other reports keep their shape.
    if (i >= static_cast<std::size_t>(format::Event::graph_alloc) && i < static_cast<std::size_t>(format::Event::unknown) &&
        stats.events_by_kind[i] == 0) {
      continue;
    }
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
