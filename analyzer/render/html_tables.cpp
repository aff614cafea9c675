// The HTML report's tables: call sites at the peak, leaks, OOMs, growth
// leaks, phases, devices and the trace's own health. Everything from the
// report goes through append_html.
#include <cstdio>

#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/units.h"
#include "analyze/stack_folding.h"
#include "render/html_escape.h"
#include "render/html_page.h"

namespace cumemtrace::analyzer::detail {

namespace {

constexpr std::size_t kMaxRows = 25;
constexpr std::size_t kMaxPhaseRows = 200;
constexpr std::size_t kMaxFrames = 16;

void cell(std::string& out, std::string_view text) {
  out += "<td>";
  append_html(out, text);
  out += "</td>";
}

void number_cell(std::string& out, const std::string& text) {
  out += "<td class=\"num\">";
  append_html(out, text);
  out += "</td>";
}

void bytes_cell(std::string& out, std::optional<std::uint64_t> bytes) {
  number_cell(out, bytes ? format_bytes(*bytes) : "");
}

void count_cell(std::string& out, std::optional<std::uint64_t> n) { number_cell(out, n ? std::to_string(*n) : ""); }

void time_cell(std::string& out, std::optional<std::uint64_t> t) { number_cell(out, t ? seconds(*t) : ""); }

void header_row(std::string& out, std::initializer_list<std::string_view> names) {
  out += "<thead><tr>";
  for (std::string_view name : names) {
    out += "<th>";
    append_html(out, name);
    out += "</th>";
  }
  out += "</tr></thead><tbody>";
}

std::string ratio_text(double value) {
  char text[24];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * value);
  return text;
}

// The call site's name with its stack folded beneath it.
void site_cell(std::string& out, const Json& entry, bool full_stacks) {
  out += "<td>";
  const Json* frames = list_member(entry, "frames");
  const std::string label = site_label(entry);
  if (frames != nullptr && !frames->empty()) {
    out += "<details><summary><code>";
    append_html(out, label);
    out += "</code></summary>";
    render_stack(out, *frames, full_stacks);
    out += "</details>";
  } else {
    out += "<code>";
    append_html(out, label);
    out += "</code>";
  }
  out += "</td>";
}

void more_rows_note(std::string& out, std::size_t total, std::size_t shown, std::string_view what) {
  if (total <= shown) return;
  out += "<p class=\"absent\">" + std::to_string(total - shown) + " more ";
  append_html(out, what);
  out += " are in the JSON report (<code>cumemtrace report --format json</code>).</p>";
}

}  // namespace

void render_stack(std::string& out, const Json& frames, bool full_stacks) {
  std::vector<const Json*> objects;
  for (const Json& frame : frames) {
    if (frame.is_object()) objects.push_back(&frame);
  }
  // One <li> per frame, numbered from 0 as the text report numbers them.
  const auto frame_item = [&](std::size_t i, bool full_name) {
    const Json& frame = *objects[i];
    out += "<li value=\"" + std::to_string(i) + "\"><code>";
    // Long names shortened; --full-stacks gives them as recorded.
    const std::string fn = text_member(frame, "fn");
    append_html(out, fn.empty() ? "(no name)" : full_name ? fn : readable_function_name(fn));
    out += "</code> <span class=\"module\">";
    std::string where = text_member(frame, "module");
    if (const std::string off = text_member(frame, "off"); !off.empty()) where += "+" + off;
    if (const std::string file = text_member(frame, "file"); !file.empty()) {
      if (!where.empty()) where += " ";
      where += file;
      if (auto line = uint_member(frame, "line")) where += ":" + std::to_string(*line);
    }
    append_html(out, where);
    out += "</span></li>";
  };
  out += "<ol class=\"stack\" start=\"0\">";
  if (full_stacks) {
    for (std::size_t i = 0; i < objects.size(); ++i) frame_item(i, true);
    out += "</ol>";
    return;
  }
  std::vector<FrameOwner> owners;
  for (const Json* frame : objects) {
    owners.push_back(frame_owner(flag_member(*frame, "py"), text_member(*frame, "fn"), text_member(*frame, "module")));
  }
  std::size_t shown = 0;
  for (const StackLine& line : fold_stack(owners)) {
    if (shown == kMaxFrames) {
      out += "<li class=\"more\">" + std::to_string(objects.size() - line.first) + " more frames</li>";
      break;
    }
    if (!line.folded) {
      frame_item(line.first, false);
      ++shown;
      continue;
    }
    // The folded run opens in place, its frames as recorded.
    out += "<li class=\"folded\"><details><summary>";
    append_html(out, folded_text(line));
    out += "</summary><ol class=\"stack\" start=\"" + std::to_string(line.first) + "\">";
    for (std::size_t i = line.first; i < line.first + line.count; ++i) frame_item(i, true);
    out += "</ol></details></li>";
  }
  out += "</ol>";
}

std::string site_label(const Json& entry) {
  if (std::string label = text_member(entry, "label"); !label.empty()) return label;
  if (const Json* functions = list_member(entry, "functions")) {
    for (const Json& f : *functions) {
      if (f.is_string() && !f.get_ref<const std::string&>().empty()) return f.get<std::string>();
    }
  }
  if (const Json* frames = list_member(entry, "frames")) {
    for (const Json& frame : *frames) {
      if (frame.is_object()) {
        if (std::string fn = text_member(frame, "fn"); !fn.empty()) return fn;
      }
    }
    if (!frames->empty() && frames->front().is_object()) {
      return text_member(frames->front(), "module") + "+" + text_member(frames->front(), "off");
    }
  }
  const std::optional<std::uint64_t> stack = uint_member(entry, "stack");
  return !stack || *stack == 0 ? "(no stack)" : "stack " + std::to_string(*stack);
}

void absent_note(std::string& out, std::string_view what) {
  out += "<p class=\"absent\">This report has no ";
  append_html(out, what);
  out += " (the analyzer that wrote it does not compute them).</p>";
}

void render_top_at_peak(std::string& out, const Json& report, bool full_stacks) {
  out += "<section id=\"top-at-peak\"><h2>Call sites live at the allocated peak</h2>";
  const Json* top = list_member(report, "top_at_peak");
  if (top == nullptr) {
    absent_note(out, "call sites at the peak (top_at_peak)");
    out += "</section>";
    return;
  }
  if (top->empty()) {
    out += "<p>Nothing was live at the peak.</p></section>";
    return;
  }
  const std::uint64_t peak = uint_member(report, "peak_allocated").value_or(0);
  out += "<table>";
  header_row(out, {"#", "bytes", "share", "allocations", "call site"});
  std::size_t rank = 0;
  for (const Json& site : *top) {
    if (!site.is_object()) continue;
    if (++rank > kMaxRows) break;
    const std::uint64_t bytes = uint_member(site, "bytes").value_or(0);
    out += "<tr>";
    count_cell(out, rank);
    bytes_cell(out, bytes);
    number_cell(out, peak == 0 ? "" : ratio_text(static_cast<double>(bytes) / static_cast<double>(peak)));
    count_cell(out, uint_member(site, "count"));
    site_cell(out, site, full_stacks);
    out += "</tr>";
  }
  out += "</tbody></table>";
  more_rows_note(out, top->size(), kMaxRows, "call sites");
  out += "</section>";
}

void render_leaks(std::string& out, const Json& report, bool full_stacks) {
  out += "<section id=\"leaks\"><h2>Leaks: still live at the end</h2>";
  const Json* leaks = list_member(report, "leaks");
  if (leaks == nullptr) {
    absent_note(out, "leak list");
  } else if (leaks->empty()) {
    out += "<p>Nothing was left allocated at the end.</p>";
  } else {
    out += "<p>" + format_bytes(uint_member(report, "leaked_bytes").value_or(0)) + " in " +
           std::to_string(uint_member(report, "leaked_count").value_or(0)) + " allocations";
    if (flag_member(report, "truncated")) {
      out += " (the trace was cut short: some of these may have been freed later)";
    }
    out += ".</p><table>";
    header_row(out, {"bytes", "allocations", "oldest at", "APIs", "call site"});
    std::size_t rows = 0;
    for (const Json& group : *leaks) {
      if (!group.is_object()) continue;
      if (++rows > kMaxRows) break;
      out += "<tr>";
      bytes_cell(out, uint_member(group, "bytes"));
      count_cell(out, uint_member(group, "count"));
      time_cell(out, uint_member(group, "first_t"));
      std::string apis;
      if (const Json* list = list_member(group, "apis")) {
        for (const Json& api : *list) {
          if (!api.is_string()) continue;
          if (!apis.empty()) apis += ", ";
          apis += api.get<std::string>();
        }
      }
      cell(out, apis);
      site_cell(out, group, full_stacks);
      out += "</tr>";
    }
    out += "</tbody></table>";
    more_rows_note(out, leaks->size(), kMaxRows, "leak groups");
  }
  out += "</section>";
}

void render_ooms(std::string& out, const Json& report, const TimelineCollector& timeline, bool full_stacks) {
  out += "<section id=\"ooms\"><h2>Out-of-memory failures</h2>";
  const Json* events = list_member(report, "oom_events");
  const std::uint64_t count = uint_member(report, "ooms").value_or(timeline.ooms().size());
  if (count == 0 && (events == nullptr || events->empty())) {
    out += "<p>No allocation failed.</p></section>";
    return;
  }
  if (events != nullptr) {
    out += "<ol class=\"sentences\">";
    std::size_t rows = 0;
    for (const Json& oom : *events) {
      if (!oom.is_object()) continue;
      if (++rows > kMaxRows) break;
      out += "<li><p class=\"sentence\">";
      append_html(out, text_member(oom, "sentence"));
      out += "</p><table><tbody>";
      const std::pair<const char*, const char*> figures[] = {
          {"t", "when"}, {"size", "requested"}, {"block", "rounded to"}, {"allocated", "allocated"},
          {"reserved", "reserved"}, {"cached_free", "cached free"}, {"largest_free", "largest free block"},
          {"device_free", "free on the device"}, {"device_total", "device total"}};
      out += "<tr><th>device</th>";
      count_cell(out, uint_member(oom, "dev"));
      out += "<th>API</th>";
      cell(out, text_member(oom, "api"));
      out += "<th>cause</th>";
      cell(out, text_member(oom, "cause"));
      out += "</tr><tr>";
      int in_row = 0;
      for (const auto& [key, label] : figures) {
        if (in_row == 3) {
          out += "</tr><tr>";
          in_row = 0;
        }
        out += "<th>";
        out += label;
        out += "</th>";
        if (std::string_view(key) == "t") {
          time_cell(out, uint_member(oom, key));
        } else {
          bytes_cell(out, uint_member(oom, key));
        }
        ++in_row;
      }
      out += "</tr></tbody></table>";
      if (const Json* frames = list_member(oom, "frames"); frames != nullptr && !frames->empty()) {
        out += "<details><summary>stack of the failed call: <code>";
        append_html(out, site_label(oom));
        out += "</code></summary>";
        render_stack(out, *frames, full_stacks);
        out += "</details>";
      }
      out += "</li>";
    }
    out += "</ol>";
    more_rows_note(out, events->size(), kMaxRows, "OOMs");
  } else {
    // Without the report's sentences: the facts from the events themselves.
    absent_note(out, "OOM explanations (oom_events)");
    out += "<table>";
    header_row(out, {"when", "device", "API", "requested", "allocated", "reserved", "cached free", "largest free",
                     "device free", "cause"});
    std::size_t rows = 0;
    for (const TimelineOom& oom : timeline.ooms()) {
      if (++rows > kMaxRows) break;
      out += "<tr>";
      time_cell(out, oom.t);
      count_cell(out, static_cast<std::uint64_t>(oom.dev));
      cell(out, oom.api);
      bytes_cell(out, oom.size);
      bytes_cell(out, oom.allocated);
      bytes_cell(out, oom.reserved);
      bytes_cell(out, oom.cached_free);
      bytes_cell(out, oom.largest_free);
      bytes_cell(out, oom.device_free);
      cell(out, oom.cause);
      out += "</tr>";
    }
    out += "</tbody></table>";
  }
  out += "</section>";
}

void render_growth(std::string& out, const Json& report, bool full_stacks) {
  out += "<section id=\"growth\"><h2>Growth: call sites whose live memory rises every iteration</h2>";
  const Json* growth = list_member(report, "growth");
  if (growth == nullptr) {
    absent_note(out, "growth leak analysis (growth)");
    out += "</section>";
    return;
  }
  if (const Json* iterations = member(report, "iterations"); iterations != nullptr && iterations->is_object()) {
    out += "<p>Iterations: " + std::to_string(uint_member(*iterations, "count").value_or(0)) + ", delimited by ";
    const std::string source = text_member(*iterations, "source");
    append_html(out, source.empty() ? "nothing" : source);
    if (const std::string mark = text_member(*iterations, "mark"); !mark.empty()) {
      out += " (<code>";
      append_html(out, mark);
      out += "</code>)";
    }
    if (const std::string marker = text_member(*iterations, "marker"); !marker.empty()) {
      out += ", the mark named by <code>--iteration-marker ";
      append_html(out, marker);
      out += "</code>";
    }
    out += ".</p>";
  }
  if (growth->empty()) {
    out += "<p>No call site grew from iteration to iteration.</p></section>";
    return;
  }
  out += "<table>";
  header_row(out, {"per iteration", "iterations", "first live", "last live", "call site"});
  std::size_t rows = 0;
  for (const Json& g : *growth) {
    if (!g.is_object()) continue;
    if (++rows > kMaxRows) break;
    out += "<tr>";
    bytes_cell(out, uint_member(g, "bytes_per_iteration"));
    count_cell(out, uint_member(g, "iterations"));
    bytes_cell(out, uint_member(g, "first_live_bytes"));
    bytes_cell(out, uint_member(g, "last_live_bytes"));
    site_cell(out, g, full_stacks);
    out += "</tr>";
  }
  out += "</tbody></table>";
  more_rows_note(out, growth->size(), kMaxRows, "growing call sites");
  out += "</section>";
}

bool has_graphs(const Json& report) {
  const Json* graphs = member(report, "graphs");
  return graphs != nullptr && graphs->is_object();
}

// The device's graph memory (counted in the chart's reserved), then each
// graph: its memory nodes, where they were captured, its launches.
void render_graphs(std::string& out, const Json& report) {
  if (!has_graphs(report)) return;
  const Json& section = *member(report, "graphs");
  out += "<section id=\"graphs\"><h2>CUDA graphs</h2><p>" +
         std::to_string(uint_member(section, "launches").value_or(0)) +
         " graph launches. Graph memory is what the driver reserves for graphs' memory nodes "
         "(instantiation, upload, launch; <code>cudaDeviceGraphMemTrim</code> gives it back), counted in "
         "reserved.</p>";
  if (const Json* memory = list_member(section, "memory"); memory != nullptr && !memory->empty()) {
    out += "<table>";
    header_row(out, {"device", "peak reserved", "at", "peak used", "reserved at the end", "used at the end"});
    for (const Json& m : *memory) {
      if (!m.is_object()) continue;
      out += "<tr>";
      count_cell(out, uint_member(m, "dev"));
      bytes_cell(out, uint_member(m, "peak_reserved"));
      time_cell(out, uint_member(m, "peak_reserved_t"));
      bytes_cell(out, uint_member(m, "peak_used"));
      bytes_cell(out, uint_member(m, "reserved"));
      bytes_cell(out, uint_member(m, "used"));
      out += "</tr>";
    }
    out += "</tbody></table>";
  }
  const Json* graphs = list_member(section, "graphs");
  if (graphs == nullptr || graphs->empty()) {
    out += "<p>No graph is described in the trace (only launches or graph memory).</p></section>";
    return;
  }
  out += "<table>";
  header_row(out, {"graph", "device", "memory nodes", "node bytes", "instantiations", "launches", "first launch",
                   "last launch", "destroyed", "captured by", "capture site"});
  std::size_t rows = 0;
  for (const Json& g : *graphs) {
    if (!g.is_object()) continue;
    if (++rows > kMaxRows) break;
    out += "<tr><td><code>";
    append_html(out, text_member(g, "graph"));
    out += "</code></td>";
    count_cell(out, uint_member(g, "dev"));
    count_cell(out, uint_member(g, "memory_nodes"));
    bytes_cell(out, uint_member(g, "node_bytes"));
    count_cell(out, uint_member(g, "instantiations"));
    count_cell(out, uint_member(g, "launches"));
    time_cell(out, uint_member(g, "first_launch_t"));
    time_cell(out, uint_member(g, "last_launch_t"));
    out += std::string("<td>") + (flag_member(g, "destroyed") ? "yes" : "no") + "</td><td><code>";
    append_html(out, text_member(g, "api"));
    out += "</code></td><td><code>";
    append_html(out, text_member(g, "site"));
    out += "</code></td></tr>";
  }
  out += "</tbody></table>";
  more_rows_note(out, graphs->size(), kMaxRows, "graphs");
  // Past the trace's limit, graphs get no description at all (nor a JSON entry).
  if (const std::uint64_t omitted = uint_member(section, "omitted").value_or(0); omitted > 0) {
    out += "<p class=\"absent\">" + std::to_string(omitted) + " more graphs are not described.</p>";
  }
  out += "</section>";
}

void render_phases(std::string& out, const Json& report) {
  out += "<section id=\"phases\"><h2>Phases (mark ranges)</h2>";
  const Json* phases = list_member(report, "phases");
  if (phases == nullptr) {
    absent_note(out, "phase list (phases)");
  } else if (phases->empty()) {
    out += "<p>The trace has no mark ranges.</p>";
  } else {
    out += "<table>";
    header_row(out, {"phase", "start", "end", "peak allocated", "peak reserved", "allocs", "frees"});
    std::size_t rows = 0;
    for (const Json& p : *phases) {
      if (!p.is_object()) continue;
      if (++rows > kMaxPhaseRows) break;
      out += "<tr>";
      std::string path = text_member(p, "path");
      cell(out, path.empty() ? text_member(p, "name") : path);
      time_cell(out, uint_member(p, "start_t"));
      const std::optional<std::uint64_t> end = uint_member(p, "end_t");
      if (end) {
        time_cell(out, end);
      } else {
        cell(out, "(never ended)");
      }
      bytes_cell(out, uint_member(p, "peak_allocated"));
      bytes_cell(out, uint_member(p, "peak_reserved"));
      count_cell(out, uint_member(p, "allocs"));
      count_cell(out, uint_member(p, "frees"));
      out += "</tr>";
    }
    out += "</tbody></table>";
    more_rows_note(out, phases->size(), kMaxPhaseRows, "phases");
  }
  out += "</section>";
}

void render_devices(std::string& out, const Json& report) {
  const Json* devices = member(report, "devices");
  if (devices == nullptr || !devices->is_object() || devices->empty()) return;
  out += "<section id=\"devices\"><h2>Devices</h2><table>";
  header_row(out, {"device", "name", "memory", "peak allocated", "at", "peak reserved", "at", "leaked", "OOMs"});
  for (const auto& [dev, d] : devices->items()) {
    if (!d.is_object()) continue;
    out += "<tr>";
    cell(out, dev);
    cell(out, text_member(d, "name"));
    const std::optional<std::uint64_t> total = uint_member(d, "total_bytes");
    bytes_cell(out, total && *total > 0 ? total : std::nullopt);  // 0: not known (an imported snapshot)
    bytes_cell(out, uint_member(d, "peak_allocated"));
    time_cell(out, uint_member(d, "peak_allocated_t"));
    bytes_cell(out, uint_member(d, "peak_reserved"));
    time_cell(out, uint_member(d, "peak_reserved_t"));
    bytes_cell(out, uint_member(d, "leaked_bytes"));
    count_cell(out, uint_member(d, "ooms"));
    out += "</tr>";
  }
  out += "</tbody></table></section>";
}

// `advice` (commands/advise.h, advice_json): the settings replayed, the one
// to use and why; or why the trace could not be replayed.
void render_advice(std::string& out, const Json& report) {
  const Json* advice = member(report, "advice");
  if (advice == nullptr || !advice->is_object()) return;
  out += "<section id=\"advice\"><h2>Allocator advice</h2>";
  if (const std::string skipped = text_member(*advice, "skipped"); !skipped.empty()) {
    out += "<p class=\"absent\">";
    append_html(out, skipped);
    out += "</p></section>";
    return;
  }
  if (text_member(*advice, "replayable") != "yes") {
    out += "<p>Not replayed. ";
    append_html(out, text_member(*advice, "why"));
    out += "</p>";
    if (const std::string instead = text_member(*advice, "instead"); !instead.empty()) {
      out += "<p>Instead: ";
      append_html(out, instead);
      out += "</p>";
    }
    out += "</section>";
    return;
  }
  if (const std::string recommendation = text_member(*advice, "recommendation"); !recommendation.empty()) {
    out += "<p>Recommendation: <code>";
    append_html(out, recommendation);
    out += "</code></p>";
  }
  out += "<p>";
  append_html(out, text_member(*advice, "explanation"));
  out += "</p><table>";
  header_row(out, {"setting", "peak reserved", "x allocated", "fails on device", "smallest device"});
  const Json* rows = member(*advice, "candidates");
  const std::optional<std::uint64_t> recommended = uint_member(*advice, "recommended");
  std::uint64_t index = 0;
  for (const Json& row : rows != nullptr && rows->is_array() ? *rows : Json::array()) {
    out += recommended == index++ && text_member(*advice, "verdict") != "keep" ? "<tr class=\"chosen\">" : "<tr>";
    cell(out, text_member(row, "setting"));
    bytes_cell(out, uint_member(row, "peak_reserved"));
    const Json* r = member(row, "reserved_over_allocated");
    char factor[32] = "";
    if (r != nullptr && r->is_number()) std::snprintf(factor, sizeof factor, "%.3fx", r->get<double>());
    number_cell(out, factor);
    count_cell(out, uint_member(row, "failures_on_device"));
    bytes_cell(out, uint_member(row, "min_capacity"));
    out += "</tr>";
  }
  out += "</tbody></table><p class=\"absent\">";
  append_html(out, "Capacity: " + text_member(*advice, "capacity_source") + ".");
  out += "</p></section>";
}

void render_trace_health(std::string& out, const Json& report) {
  out += "<section id=\"trace\"><h2>The trace</h2><table><tbody>";
  const auto row = [&](std::string_view label, const std::string& value) {
    out += "<tr><th>";
    append_html(out, label);
    out += "</th>";
    cell(out, value);
    out += "</tr>";
  };
  row("file", text_member(report, "trace"));
  row("lines", std::to_string(uint_member(report, "lines").value_or(0)));
  if (const Json* events = member(report, "events"); events != nullptr && events->is_object()) {
    std::string counts;
    for (const auto& [name, n] : events->items()) {
      if (!n.is_number_unsigned() || n.get<std::uint64_t>() == 0) continue;
      if (!counts.empty()) counts += ", ";
      counts += name + " " + std::to_string(n.get<std::uint64_t>());
    }
    row("events", counts);
  }
  row("unknown events skipped", std::to_string(uint_member(report, "unknown_events").value_or(0)));
  row("bad lines", std::to_string(uint_member(report, "bad_lines").value_or(0)));
  if (const Json* end = member(report, "end"); end != nullptr && end->is_object()) {
    row("ended", text_member(*end, "reason") + " at " + seconds(uint_member(*end, "t").value_or(0)) + ", " +
                     std::to_string(uint_member(*end, "dropped").value_or(0)) + " events dropped by the writer");
  } else {
    row("ended", "no end line: the trace was cut short");
  }
  out += "</tbody></table>";
  if (const Json* bad = list_member(report, "first_bad_lines"); bad != nullptr && !bad->empty()) {
    out += "<ul>";
    for (const Json& b : *bad) {
      if (!b.is_object()) continue;
      out += "<li>line " + std::to_string(uint_member(b, "line").value_or(0)) + ": ";
      append_html(out, text_member(b, "reason"));
      out += "</li>";
    }
    out += "</ul>";
  }
  out += "</section>";
}

}  // namespace cumemtrace::analyzer::detail
