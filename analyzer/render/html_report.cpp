// The HTML report page: its frame, summary, charts and segment maps; the
// tables are in html_tables.cpp.
//
// Safety: the page carries a Content-Security-Policy that forbids every
// network or file load and every script but one, the flame graphs'
// (html_flame.h), allowed by its SHA-256; all trace text is escaped by
// append_html, or for the flame graphs written into a JSON block that no
// browser runs. The only <style> is the constant sheet below.
#include "cumemtrace/analyzer/html_report.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/units.h"
#include "render/html_escape.h"
#include "render/html_flame.h"
#include "render/html_page.h"
#include "render/svg_chart.h"
#include "render/svg_segment_map.h"

namespace cumemtrace::analyzer {

namespace detail {

namespace {

constexpr const char* kReservedArea = "#fde2a6";
constexpr const char* kReservedLine = "#c98500";
constexpr const char* kAllocatedArea = "#a9c8f5";
constexpr const char* kAllocatedLine = "#1f5fbf";
constexpr const char* kPeakLine = "#cf222e";
constexpr const char* kUnusedLine = "#7b4fc9";
constexpr const char* kGraphLine = "#2e8b57";
constexpr const char* kScatteredDots = "#e07b00";

constexpr std::string_view kStyle =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1f2328;background:#fff;margin:0}"
    "main{max-width:1140px;margin:0 auto;padding:12px 20px 40px}"
    "h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;"
    "padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}"
    "nav{margin:6px 0 4px}nav a{margin-right:14px;color:#0969da}"
    "table{border-collapse:collapse;margin:6px 0 12px}th,td{border:1px solid #d0d7de;padding:3px 8px;"
    "text-align:left;vertical-align:top}th{background:#f6f8fa;font-weight:600}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;word-break:break-all}"
    ".program{margin:2px 0}.facts{color:#57606a;margin:2px 0 8px}"
    ".warn{background:#fff4e5;border:1px solid #f0b35a;padding:6px 10px;margin:8px 0}"
    ".absent{color:#57606a;font-style:italic}.sentence{font-weight:600;margin:4px 0}"
    "svg.chart,svg.segmap{display:block;max-width:100%;height:auto;margin:4px 0}"
    "svg text{font:11px system-ui,sans-serif;fill:#1f2328}svg text.seglabel{font:11px ui-monospace,monospace}"
    ".grid{stroke:#eaeef2}.tick,.axisline{stroke:#57606a}.markline{stroke:#8c959f;stroke-dasharray:3 3}"
    ".hit{stroke:transparent;stroke-width:7}.oomline{stroke:#cf222e;stroke-width:1.5}.oommark{fill:#cf222e}"
    ".peak{fill:none;stroke:#cf222e;stroke-width:2}.peaklabel{font-weight:600}"
    "ul.legend{list-style:none;padding:0;margin:4px 0 14px}ul.legend li{display:inline-block;margin:2px 16px 2px 0}"
    ".swatch{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin-right:5px}"
    "details>summary{cursor:pointer}ol.stack{margin:4px 0;padding-left:24px}.module{color:#57606a}"
    "ol.sentences>li{margin-bottom:10px}"
    "section.process{border-top:3px solid #1f2328;margin-top:36px;padding-top:4px}"
    "td.swatchcell{width:14px}tr.chosen{font-weight:600;background:#dafbe1}";

std::string bytes_and_exact(std::uint64_t bytes) {
  return bytes < 1024 ? format_bytes(bytes) : format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

void fact_row(std::string& out, std::string_view label, std::string_view html_value) {
  out += "<tr><th>";
  append_html(out, label);
  out += "</th><td>";
  out += html_value;  // already escaped by the caller
  out += "</td></tr>";
}

// "1.50 GiB (… bytes) at 0.000123 s in phase epoch 1"
std::string peak_text(const Json& report, std::string_view what) {
  const std::string key = "peak_" + std::string(what);
  const std::uint64_t peak = uint_member(report, key).value_or(0);
  std::string text = html(bytes_and_exact(peak));
  if (auto t = uint_member(report, key + "_t")) text += " at " + seconds(*t);
  if (std::string phase = text_member(report, key + "_phase"); !phase.empty()) {
    text += " in phase <code>" + html(phase) + "</code>";
  }
  return text;
}

void render_header(std::string& out, const Json& report, std::string_view heading) {
  std::string program;
  const Json* program_info = member(report, "program");
  if (program_info != nullptr && program_info->is_object()) {
    if (const Json* argv = list_member(*program_info, "argv")) {
      for (const Json& arg : *argv) {
        if (!arg.is_string()) continue;
        if (!program.empty()) program += ' ';
        program += arg.get<std::string>();
      }
    }
    if (program.empty()) program = text_member(*program_info, "exe");
  }
  out += "<header>";
  if (heading.empty()) {
    out += "<h1>cumemtrace report</h1>";
  } else {
    out += "<h1 class=\"process\">";
    append_html(out, heading);
    out += "</h1>";
  }
  out += "<p class=\"program\"><code>";
  append_html(out, program.empty() ? "(unknown program)" : program);
  out += "</code></p><p class=\"facts\">";
  if (program_info != nullptr && program_info->is_object()) {
    out += "host <code>" + html(text_member(*program_info, "host")) + "</code> \xC2\xB7 ";
    // An imported snapshot has no process (pid 0).
    if (const std::uint64_t pid = uint_member(*program_info, "pid").value_or(0); pid != 0) {
      out += "pid " + std::to_string(pid) + " \xC2\xB7 ";
    }
    out += "pool <code>" + html(text_member(*program_info, "pool")) + "</code> \xC2\xB7 ";
  }
  out += "duration " + seconds(uint_member(report, "duration_t").value_or(0)) + " \xC2\xB7 trace <code>" +
         html(text_member(report, "trace")) + "</code></p>";
  out += "<nav><a href=\"#summary\">summary</a><a href=\"#memory\">memory</a><a href=\"#fragmentation\">"
         "fragmentation</a><a href=\"#top-at-peak\">at the peak</a><a href=\"#flame-graphs\">flame graphs</a>"
         "<a href=\"#segment-maps\">segment maps</a>"
         "<a href=\"#ooms\">OOMs</a><a href=\"#leaks\">leaks</a><a href=\"#growth\">growth</a>";
  if (has_graphs(report)) out += "<a href=\"#graphs\">CUDA graphs</a>";
  out += "<a href=\"#phases\">phases</a><a href=\"#trace\">trace</a></nav></header>";
}

void render_summary(std::string& out, const Json& report) {
  out += "<section id=\"summary\"><h2>Summary</h2>";
  if (flag_member(report, "truncated")) {
    out += "<p class=\"warn\">The trace was cut short";
    if (auto line = uint_member(report, "truncated_after_line")) out += " after line " + std::to_string(*line);
    out += " (the program was killed or crashed): everything before the cut is analysed.</p>";
  }
  if (auto bad = uint_member(report, "bad_lines"); bad && *bad > 0) {
    out += "<p class=\"warn\">" + std::to_string(*bad) + " lines could not be read and were skipped (see the trace section).</p>";
  }
  if (const Json* end = member(report, "end"); end != nullptr && end->is_object()) {
    if (auto dropped = uint_member(*end, "dropped"); dropped && *dropped > 0) {
      out += "<p class=\"warn\">The writer dropped " + std::to_string(*dropped) +
             " events: the figures below may be incomplete.</p>";
    }
    if (text_member(*end, "reason") == "killed") {
      out += "<p class=\"warn\">The process was killed and its trace completed afterwards: what was live then "
             "is no leak.</p>";
    }
  }
  out += "<table><tbody>";
  fact_row(out, "peak allocated", peak_text(report, "allocated"));
  fact_row(out, "peak reserved", peak_text(report, "reserved"));
  fact_row(out, "leaked at the end",
           html(bytes_and_exact(uint_member(report, "leaked_bytes").value_or(0)) + " in " +
                std::to_string(uint_member(report, "leaked_count").value_or(0)) + " allocations"));
  fact_row(out, "out-of-memory failures", std::to_string(uint_member(report, "ooms").value_or(0)));
  if (auto growth = uint_member(report, "growth_bytes_per_iteration")) {
    fact_row(out, "largest growth per iteration", html(format_bytes(*growth)));
  }
  if (const Json* fragmentation = member(report, "fragmentation"); fragmentation != nullptr && fragmentation->is_object()) {
    if (auto at_peak = number_member(*fragmentation, "at_peak_reserved")) {
      char text[64];
      std::snprintf(text, sizeof text, "%.1f%% of reserved memory unused", 100 * *at_peak);
      fact_row(out, "fragmentation at the reserved peak", text);
    }
  }
  fact_row(out, "allocations / frees",
           std::to_string(uint_member(report, "allocs").value_or(0)) + " / " +
               std::to_string(uint_member(report, "frees").value_or(0)));
  std::string errors = std::to_string(uint_member(report, "errors").value_or(0));
  if (const Json* by_what = member(report, "error_events"); by_what != nullptr && by_what->is_object() && !by_what->empty()) {
    std::string detail;
    for (const auto& [what, n] : by_what->items()) {
      if (!detail.empty()) detail += ", ";
      detail += what + " " + (n.is_number() ? n.dump() : std::string("?"));
    }
    errors += " (" + html(detail) + ")";
  }
  fact_row(out, "misuse errors (bad frees)", errors);
  out += "</tbody></table></section>";
}

// The OOM's one-line explanation from the report, or the bare facts.
std::string oom_tooltip(const Json& report, std::size_t index, const TimelineOom& oom) {
  if (const Json* events = list_member(report, "oom_events"); events != nullptr && index < events->size()) {
    if (std::string sentence = text_member((*events)[index], "sentence"); !sentence.empty()) return sentence;
  }
  return "out of memory on device " + std::to_string(oom.dev) + " at " + seconds(oom.t) + ": " + oom.api +
         " of " + format_bytes(oom.size) + " failed (" + oom.cause + ")";
}

std::vector<ChartMarker> chart_markers(const Json& report, const TimelineCollector& timeline, int dev) {
  std::vector<ChartMarker> markers;
  for (const TimelineMark& m : timeline.marks()) {
    if (m.kind == "pop") continue;  // a range is shown where it starts
    markers.push_back(ChartMarker{ChartMarker::Kind::mark, m.t,
                                  "mark \"" + m.name + "\" (" + m.kind + ", thread " + std::to_string(m.tid) +
                                      ") at " + seconds(m.t)});
  }
  for (std::size_t i = 0; i < timeline.ooms().size(); ++i) {
    const TimelineOom& oom = timeline.ooms()[i];
    if (oom.dev == dev) markers.push_back(ChartMarker{ChartMarker::Kind::oom, oom.t, oom_tooltip(report, i, oom)});
  }
  return markers;
}

std::string device_heading(const Json& report, int dev) {
  std::string heading = "Device " + std::to_string(dev);
  if (const Json* devices = member(report, "devices"); devices != nullptr && devices->is_object()) {
    if (const Json* d = member(*devices, std::to_string(dev)); d != nullptr && d->is_object()) {
      if (std::string name = text_member(*d, "name"); !name.empty()) heading += ": " + name;
      if (auto total = uint_member(*d, "total_bytes"); total && *total > 0) heading += " (" + format_bytes(*total) + ")";
    }
  }
  return heading;
}

void render_memory(std::string& out, const Json& report, const TimelineCollector& timeline, std::uint64_t t_end) {
  out += "<section id=\"memory\"><h2>Memory over time</h2>";
  const auto series = timeline.samples_by_device();
  if (series.empty()) {
    out += "<p>No device memory was allocated or reserved.</p></section>";
    return;
  }
  out += "<p>Allocated: what the program holds; reserved: what the pool holds from the driver. Each of the " +
         std::to_string(kHtmlTimelineBuckets) +
         " time slices keeps its highest moment, so no peak is lost. Hover over marks (grey) and OOMs (red) for "
         "details.</p>";
  for (const auto& [dev, samples] : series) {
    ChartLine reserved_area{ChartLine::Style::area, kReservedArea, "", {}};
    ChartLine allocated_area{ChartLine::Style::area, kAllocatedArea, "", {}};
    ChartLine reserved_line{ChartLine::Style::line, kReservedLine, "reserved", {}};
    ChartLine allocated_line{ChartLine::Style::line, kAllocatedLine, "allocated", {}};
    ChartLine peak_line{ChartLine::Style::dashed, kPeakLine, "peak allocated so far", {}};
    // Part of reserved: the driver's CUDA graph memory, drawn only where the
    // device reported some (graph_mem).
    ChartLine graph_line{ChartLine::Style::line, kGraphLine, "graph memory (in reserved)", {}};
    double y_max = 0;
    double peak_so_far = 0;
    ChartHighlight highlight;
    for (const TimelineSample& s : samples) {
      const double a = static_cast<double>(s.allocated);
      const double r = static_cast<double>(s.reserved);
      reserved_area.points.push_back({s.t, r});
      allocated_area.points.push_back({s.t, a});
      if (a > peak_so_far) {
        peak_so_far = a;
        highlight = ChartHighlight{s.t, a, ""};
      }
      peak_line.points.push_back({s.t, peak_so_far});
      if (s.graph_reserved) graph_line.points.push_back({s.t, static_cast<double>(*s.graph_reserved)});
      y_max = std::max({y_max, a, r});
    }
    reserved_line.points = reserved_area.points;
    allocated_line.points = allocated_area.points;
    highlight.label = "peak " + format_bytes(static_cast<std::uint64_t>(highlight.value)) + " at " + seconds(highlight.t);
    StepChart chart;
    chart.title = "Allocated and reserved memory on device " + std::to_string(dev);
    chart.t_end = t_end;
    chart.y_max = y_max;
    chart.lines = {reserved_area, allocated_area, reserved_line, allocated_line, peak_line};
    if (!graph_line.points.empty()) chart.lines.push_back(graph_line);
    chart.markers = chart_markers(report, timeline, dev);
    if (highlight.value > 0) chart.highlight = highlight;
    out += "<h3>" + html(device_heading(report, dev)) + "</h3>";
    out += render_step_chart(chart);
  }
  if (timeline.marks_omitted() > 0) {
    out += "<p class=\"absent\">" + std::to_string(timeline.marks_omitted()) + " later marks are not drawn.</p>";
  }
  out += "</section>";
}

void render_fragmentation_metrics(std::string& out, const Json& report) {
  const Json* fragmentation = member(report, "fragmentation");
  if (fragmentation == nullptr || !fragmentation->is_object()) {
    absent_note(out, "fragmentation metrics (fragmentation)");
    return;
  }
  const auto ratio = [](std::optional<double> v, std::string_view metric) -> std::string {
    if (!v) return "";
    char text[40];
    if (metric == "inactive_split_bytes") return format_bytes(static_cast<std::uint64_t>(*v));
    std::snprintf(text, sizeof text, "%.1f%%", 100 * *v);
    return text;
  };
  out += "<table><thead><tr><th>metric</th><th>worst</th><th>when</th><th>device</th><th>at the end</th></tr></thead><tbody>";
  const std::pair<const char*, const char*> metrics[] = {
      {"reserved_unused", "reserved but not allocated (1 \xE2\x88\x92 allocated/reserved)"},
      {"cached_free_scattered", "cached free memory scattered (1 \xE2\x88\x92 largest free/cached free)"},
      {"inactive_split_bytes", "inactive split blocks"},
      {"rounding_waste", "rounding waste (1 \xE2\x88\x92 requested/block)"}};
  const Json* worst = member(*fragmentation, "worst");
  const Json* at_end = member(*fragmentation, "at_end");
  for (const auto& [key, label] : metrics) {
    out += "<tr><td>";
    out += html(label);
    out += "</td>";
    const Json* w = worst != nullptr && worst->is_object() ? member(*worst, key) : nullptr;
    const bool has_worst = w != nullptr && w->is_object();
    out += "<td class=\"num\">" + html(has_worst ? ratio(number_member(*w, "value"), key) : "") + "</td>";
    out += "<td class=\"num\">" + html(has_worst && uint_member(*w, "t") ? seconds(*uint_member(*w, "t")) : "") + "</td>";
    out += "<td class=\"num\">" + html(has_worst && uint_member(*w, "dev") ? std::to_string(*uint_member(*w, "dev")) : "") + "</td>";
    out += "<td class=\"num\">" +
           html(at_end != nullptr && at_end->is_object() ? ratio(number_member(*at_end, key), key) : "") + "</td></tr>";
  }
  out += "</tbody></table>";
}

void render_fragmentation(std::string& out, const Json& report, const TimelineCollector& timeline, std::uint64_t t_end) {
  out += "<section id=\"fragmentation\"><h2>Fragmentation</h2>";
  render_fragmentation_metrics(out, report);
  const auto series = timeline.samples_by_device();
  const auto pool = timeline.pool_by_device();
  for (const auto& [dev, samples] : series) {
    ChartLine unused{ChartLine::Style::line, kUnusedLine, "reserved but not allocated", {}};
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const TimelineSample& s = samples[i];
      // At one instant, the state once all its events are done: a free and
      // its segment_free share a time, and the ratio between them is noise.
      if (i + 1 < samples.size() && samples[i + 1].t == s.t) continue;
      const double value = s.reserved == 0 || s.allocated >= s.reserved
                               ? 0.0
                               : 1.0 - static_cast<double>(s.allocated) / static_cast<double>(s.reserved);
      unused.points.push_back({s.t, value});
    }
    ChartLine scattered{ChartLine::Style::dots, kScatteredDots, "cached free memory scattered (pool samples)", {}};
    if (auto it = pool.find(dev); it != pool.end()) {
      for (const CacheSample& p : it->second) scattered.points.push_back({p.t, p.scattered()});
    }
    const bool reserved_any = std::any_of(samples.begin(), samples.end(), [](const TimelineSample& s) { return s.reserved > 0; });
    if (!reserved_any && scattered.points.empty()) {
      out += "<h3>" + html(device_heading(report, dev)) +
             "</h3><p class=\"absent\">No segments were recorded on this device, so there is no reserved memory "
             "to be fragmented.</p>";
      continue;
    }
    StepChart chart;
    chart.title = "Fragmentation on device " + std::to_string(dev);
    chart.y_axis = StepChart::YAxis::fraction;
    chart.t_end = t_end;
    chart.height = 220;
    chart.lines = {unused};
    if (!scattered.points.empty()) chart.lines.push_back(scattered);
    chart.markers = chart_markers(report, timeline, dev);
    out += "<h3>" + html(device_heading(report, dev)) + "</h3>" + render_step_chart(chart);
    if (scattered.points.empty()) {
      out += "<p class=\"absent\">No pool samples for this device (a passthrough pool, or none written): "
             "only the unused share of reserved memory is shown.</p>";
    }
  }
  out += "</section>";
}

void render_segment_maps(std::string& out, const std::vector<SegmentSnapshot>& maps, std::string_view note) {
  out += "<section id=\"segment-maps\"><h2>Segment maps</h2>";
  if (!note.empty()) {
    out += "<p class=\"absent\">";
    append_html(out, note);
    out += "</p>";
  }
  const std::vector<std::vector<std::uint32_t>> colours = assign_site_colours(maps);
  for (std::size_t m = 0; m < maps.size(); ++m) {
    const SegmentSnapshot& map = maps[m];
    std::string heading = map.moment == SegmentSnapshot::Moment::peak
                              ? "At the allocated peak, " + seconds(map.t)
                              : "At OOM " + std::to_string(map.oom_index + 1) + " on device " +
                                    std::to_string(map.dev.value_or(0)) + ", " + seconds(map.t);
    out += "<h3>" + html(heading) + "</h3><p>" + html(format_bytes(map.allocated)) + " allocated in " +
           html(format_bytes(map.reserved)) + " reserved";
    if (map.hidden_segments > 0) {
      out += "; the " + std::to_string(map.hidden_segments) + " smallest segments (" +
             html(format_bytes(map.hidden_segment_bytes)) + ") are not drawn";
    }
    if (map.outside_blocks > 0) {
      out += "; " + std::to_string(map.outside_blocks) +
             (map.outside_blocks == 1 ? " live block (" : " live blocks (") + html(format_bytes(map.outside_bytes)) +
             (map.outside_blocks == 1 ? ") lies" : ") lie") + " in no segment (managed or host memory, or no segment events)";
    }
    out += ".</p>";
    if (map.segments.empty()) {
      out += "<p class=\"absent\">No segments were live.</p>";
      continue;
    }
    out += render_segment_map(map, colours[m]);
  }
  out += "</section>";
}

}  // namespace

void relabel_sites(std::vector<SegmentSnapshot>& maps, const Json& report) {
  std::unordered_map<std::uint64_t, std::string> label_of;
  for (const char* key : {"top_at_peak", "leaks", "growth", "oom_events"}) {
    const Json* list = list_member(report, key);
    if (list == nullptr) continue;
    for (const Json& entry : *list) {
      const std::optional<std::uint64_t> stack = uint_member(entry, "stack");
      std::string label = text_member(entry, "label");
      if (stack && !label.empty()) label_of.emplace(*stack, std::move(label));
    }
  }
  for (SegmentSnapshot& map : maps) {
    for (SegmentMapSite& site : map.sites) {
      if (const auto it = label_of.find(site.stack); it != label_of.end()) site.label = it->second;
    }
  }
}

const Json* member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::uint64_t> uint_member(const Json& object, std::string_view key) {
  const Json* value = member(object, key);
  if (value == nullptr || !value->is_number_integer()) return std::nullopt;
  if (value->is_number_unsigned()) return value->get<std::uint64_t>();
  const std::int64_t signed_value = value->get<std::int64_t>();
  if (signed_value < 0) return std::nullopt;
  return static_cast<std::uint64_t>(signed_value);
}

std::optional<double> number_member(const Json& object, std::string_view key) {
  const Json* value = member(object, key);
  if (value == nullptr || !value->is_number()) return std::nullopt;
  return value->get<double>();
}

std::string text_member(const Json& object, std::string_view key) {
  const Json* value = member(object, key);
  return value != nullptr && value->is_string() ? value->get<std::string>() : std::string();
}

bool flag_member(const Json& object, std::string_view key) {
  const Json* value = member(object, key);
  return value != nullptr && value->is_boolean() && value->get<bool>();
}

const Json* list_member(const Json& object, std::string_view key) {
  const Json* value = member(object, key);
  return value != nullptr && value->is_array() ? value : nullptr;
}

std::string seconds(std::uint64_t t) {
  // The page is read by people: a time in the unit that suits it.
  char text[40];
  if (t >= 1000000000) {
    return format_seconds(t);
  } else if (t >= 1000000) {
    std::snprintf(text, sizeof text, "%.3f ms", static_cast<double>(t) / 1e6);
  } else if (t >= 1000) {
    std::snprintf(text, sizeof text, "%.3f \xC2\xB5s", static_cast<double>(t) / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%llu ns", static_cast<unsigned long long>(t));
  }
  return text;
}

void open_page(std::string& out, std::string_view title) {
  out.reserve(256 * 1024);
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         // No fetch of any kind and no script but ours, by its hash: whatever a
         // trace holds, the page can only be read.
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
         "script-src ";
  out += flame_script_csp_source();
  out += "; base-uri 'none'; form-action 'none'\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>cumemtrace: ";
  append_html(out, title);
  out += "</title><style>";
  out += kStyle;
  out += flame_style();
  out += "</style></head><body><main>";
}

// The script last, when the data blocks it reads are in the document.
void close_page(std::string& out) {
  out += "</main><script>";
  out += flame_script();
  out += "</script></body></html>\n";
}

void render_report_body(std::string& out, const Json& report, const TimelineCollector& timeline,
                        const std::vector<SegmentSnapshot>& maps, std::string_view maps_note,
                        std::string_view heading, bool full_stacks, const std::vector<FlameTree>& flames) {
  render_header(out, report, heading);
  render_summary(out, report);
  const std::uint64_t t_end = std::max(timeline.last_t(), uint_member(report, "duration_t").value_or(0));
  render_memory(out, report, timeline, t_end);
  render_fragmentation(out, report, timeline, t_end);
  render_top_at_peak(out, report, full_stacks);
  render_flame_section(out, flames);
  render_segment_maps(out, maps, maps_note);
  render_ooms(out, report, timeline, full_stacks);
  render_leaks(out, report, full_stacks);
  render_growth(out, report, full_stacks);
  render_graphs(out, report);
  render_advice(out, report);
  render_phases(out, report);
  render_devices(out, report);
  render_trace_health(out, report);
}

std::string render_html_page(const Json& report, const TimelineCollector& timeline,
                             const std::vector<SegmentSnapshot>& maps, std::string_view maps_note,
                             bool full_stacks, const std::vector<FlameTree>& flames) {
  std::string out;
  open_page(out, text_member(report, "trace"));
  render_report_body(out, report, timeline, maps, maps_note, {}, full_stacks, flames);
  close_page(out);
  return out;
}

std::vector<SegmentSnapshot> segment_maps_for(const Json& report, const std::string& trace_path, std::string& note) {
  SegmentMapOptions options;
  options.peak_allocated = uint_member(report, "peak_allocated").value_or(0);
  const std::uint64_t ooms = uint_member(report, "ooms").value_or(0);
  std::vector<SegmentSnapshot> maps;
  note.clear();
  if (trace_path == "-") {
    note = "Segment maps need a second read of the trace, which standard input cannot give: "
           "run cumemtrace report on the trace file instead.";
    return maps;
  }
  maps = collect_segment_maps(trace_path, options, ooms);
  relabel_sites(maps, report);
  if (ooms > options.max_ooms) {
    note = "Maps are drawn for the first " + std::to_string(options.max_ooms) + " of " + std::to_string(ooms) + " OOMs.";
  }
  if (maps.empty()) note = "Nothing was allocated, so there is no peak to map.";
  return maps;
}

}  // namespace detail

std::string render_html_report(const nlohmann::ordered_json& report, const TimelineCollector& timeline,
                               const std::string& trace_path, bool full_stacks,
                               const std::vector<FlameTree>& flames) {
  std::string note;
  const std::vector<SegmentSnapshot> maps = detail::segment_maps_for(report, trace_path, note);
  return detail::render_html_page(report, timeline, maps, note, full_stacks, flames);
}

}  // namespace cumemtrace::analyzer
