// The HTML page of several traces (the ranks of a job, a process and its
// children): the per-process table and totals, every process's allocated
// memory in one chart, then each trace's own report in a section of its own.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "cumemtrace/analyzer/html_report.h"
#include "cumemtrace/analyzer/units.h"
#include "render/html_escape.h"
#include "render/html_page.h"
#include "analyze/report_figures.h"
#include "render/svg_chart.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;
using detail::append_html;
using detail::html;

// One colour per process in the combined chart; none of them is a colour of
// the single-trace charts, so each series reads as a process. At most this
// many processes are drawn (the largest peaks); the table lists them all.
constexpr const char* kSeriesColours[] = {"#2da44e", "#8250df", "#bc4c00", "#0598bc", "#d4a72c",
                                          "#e85aad", "#1b7c83", "#a40e26", "#6e7781", "#4d6b00"};
constexpr std::size_t kMaxSeries = std::size(kSeriesColours);
constexpr const char* kSumColour = "#000000";  // darker than any text, so a screenshot tells it apart

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "rank 3", else "pid 4242"; the file name is added where that is not unique.
std::vector<std::string> short_names(const std::vector<ProcessRow>& rows) {
  std::vector<std::string> names;
  std::map<std::string, int> uses;
  for (const ProcessRow& r : rows) {
    names.push_back(r.rank ? "rank " + std::to_string(*r.rank) : "pid " + std::to_string(r.pid));
    ++uses[names.back()];
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (uses[names[i]] > 1) names[i] += " (" + base_name(rows[i].trace) + ")";
  }
  return names;
}

// "rank 0 · pid 4242 on node7 · job.rank0.jsonl"
std::string heading(const ProcessRow& r) {
  std::string text;
  if (r.rank) text = "rank " + std::to_string(*r.rank) + " \xC2\xB7 ";
  text += "pid " + std::to_string(r.pid);
  if (!r.host.empty()) text += " on " + r.host;
  return text + " \xC2\xB7 " + r.trace;
}

// Section ids and in-page links of one trace's sections, made unique on a
// page of several by a prefix. Trace text is escaped (a quote becomes
// &quot;), so ` id="` and `href="#` can only be our own markup.
std::string prefix_anchors(const std::string& body, const std::string& prefix) {
  std::string out;
  out.reserve(body.size() + 1024);
  for (std::size_t i = 0; i < body.size();) {
    bool matched = false;
    for (std::string_view anchor : {std::string_view(" id=\""), std::string_view(" href=\"#")}) {
      if (body.compare(i, anchor.size(), anchor) == 0) {
        out += anchor;
        out += prefix;
        i += anchor.size();
        matched = true;
        break;
      }
    }
    if (!matched) out += body[i++];
  }
  return out;
}

// A process's allocated bytes over time, all its devices summed: the step
// functions of its devices merged in time order.
std::vector<detail::ChartPoint> allocated_total(const TimelineCollector& timeline, std::uint64_t offset) {
  std::vector<TimelineSample> all;
  for (const auto& [dev, samples] : timeline.samples_by_device()) all.insert(all.end(), samples.begin(), samples.end());
  std::stable_sort(all.begin(), all.end(), [](const TimelineSample& a, const TimelineSample& b) { return a.t < b.t; });
  std::map<int, std::uint64_t> current;
  std::uint64_t total = 0;
  std::vector<detail::ChartPoint> points;
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::uint64_t& was = current[all[i].dev];
    total = total - was + all[i].allocated;
    was = all[i].allocated;
    if (i + 1 < all.size() && all[i + 1].t == all[i].t) continue;  // one point per instant
    points.push_back({all[i].t + offset, static_cast<double>(total)});
  }
  return points;
}

// The sum of several step functions (each holds its value until its next point).
std::vector<detail::ChartPoint> sum_of(const std::vector<std::vector<detail::ChartPoint>>& series) {
  struct Change {
    std::uint64_t t;
    std::size_t series;
    double value;
  };
  std::vector<Change> changes;
  for (std::size_t s = 0; s < series.size(); ++s) {
    for (const detail::ChartPoint& p : series[s]) changes.push_back({p.t, s, p.value});
  }
  std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) { return a.t < b.t; });
  std::vector<double> current(series.size(), 0.0);
  double total = 0;
  std::vector<detail::ChartPoint> points;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    total += changes[i].value - current[changes[i].series];
    current[changes[i].series] = changes[i].value;
    if (i + 1 < changes.size() && changes[i + 1].t == changes[i].t) continue;
    points.push_back({changes[i].t, total});
  }
  return points;
}

std::string percent_text(double ratio) {
  char text[24];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * ratio);
  return text;
}

void cell(std::string& out, std::string_view text, bool number = false) {
  out += number ? "<td class=\"num\">" : "<td>";
  append_html(out, text);
  out += "</td>";
}

struct Series {
  std::size_t row = 0;
  const char* colour = nullptr;
};

// The processes with the highest peaks get a series (and a colour), in row order.
std::vector<Series> choose_series(const std::vector<ProcessRow>& rows) {
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rows[a].peak_allocated > rows[b].peak_allocated; });
  if (order.size() > kMaxSeries) order.resize(kMaxSeries);
  std::sort(order.begin(), order.end());
  std::vector<Series> series;
  for (std::size_t i = 0; i < order.size(); ++i) series.push_back(Series{order[i], kSeriesColours[i]});
  return series;
}

void render_process_table(std::string& out, const std::vector<ProcessRow>& rows, const std::vector<std::string>& names,
                          const std::vector<Series>& series) {
  out += "<section id=\"processes\"><h2>Processes</h2><table><thead><tr>";
  for (const char* name : {"", "process", "trace", "rank", "pid", "parent", "host", "peak allocated", "peak reserved",
                           "leaked", "OOMs", "growth per iteration", "unused at reserved peak", "notes"}) {
    out += "<th>";
    out += name;
    out += "</th>";
  }
  out += "</tr></thead><tbody>";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ProcessRow& r = rows[i];
    out += "<tr><td class=\"swatchcell\">";
    for (const Series& s : series) {
      if (s.row == i) out += "<span class=\"swatch\" style=\"background:" + std::string(s.colour) + "\"></span>";
    }
    out += "</td><td><a href=\"#p" + std::to_string(i) + "-summary\">";
    append_html(out, names[i]);
    out += "</a></td>";
    cell(out, r.trace);
    cell(out, r.rank ? std::to_string(*r.rank) : "-", true);
    cell(out, std::to_string(r.pid), true);
    cell(out, r.parent ? std::to_string(r.ppid) : "-", true);
    cell(out, r.host.empty() ? "-" : r.host);
    cell(out, format_bytes(r.peak_allocated), true);
    cell(out, format_bytes(r.peak_reserved), true);
    cell(out, format_bytes(r.leaked_bytes), true);
    cell(out, std::to_string(r.ooms), true);
    cell(out, format_bytes(r.growth_bytes_per_iteration), true);
    cell(out, r.peak_reserved == 0 ? "-" : percent_text(r.fragmentation_at_peak_reserved), true);
    std::string notes;
    if (r.parent) notes = (r.forked ? "forked from pid " : "started by pid ") + std::to_string(rows[*r.parent].pid);
    if (r.truncated) notes += notes.empty() ? "TRUNCATED" : "; TRUNCATED";
    cell(out, notes);
    out += "</tr>";
  }
  const ProcessTotals t = process_totals(rows);
  out += "<tr><th></th><th>total</th><td></td><td></td><td></td><td></td><td></td>";
  cell(out, format_bytes(t.peak_allocated), true);
  cell(out, format_bytes(t.peak_reserved), true);
  cell(out, format_bytes(t.leaked_bytes), true);
  cell(out, std::to_string(t.ooms), true);
  cell(out, format_bytes(t.growth_bytes_per_iteration), true);
  cell(out, percent_text(t.fragmentation_at_peak_reserved), true);
  out += "<td></td></tr></tbody></table>";
  out += "<p>Totals: the peaks are the sums of the processes' peaks, an upper bound of the job's peak (processes "
         "need not peak at once); " +
         html(format_bytes(t.leaked_bytes)) + " leaked in " + std::to_string(t.leaked_count) + " allocations in all; " +
         std::to_string(t.ooms) + " out-of-memory failures; growth and unused reserved memory are the largest of any "
         "process.</p></section>";
}

void render_combined_chart(std::string& out, const std::vector<ProcessRow>& rows, const std::vector<HtmlTrace>& traces,
                           const std::vector<std::string>& names, const std::vector<Series>& chosen) {
  out += "<section id=\"memory-all\"><h2>Allocated memory of every process</h2>";
  // On one clock when every trace says when it started; else each from its own start.
  std::uint64_t first_start = UINT64_MAX;
  bool aligned = true;
  for (const HtmlTrace& t : traces) {
    const Json* program = detail::member(t.report, "program");
    const std::uint64_t start = program == nullptr ? 0 : detail::uint_member(*program, "start_unix_ns").value_or(0);
    if (start == 0) aligned = false;
    first_start = std::min(first_start, start);
  }
  detail::StepChart chart;
  chart.title = "Allocated memory of every process";
  std::vector<std::vector<detail::ChartPoint>> all_series;
  for (const Series& s : chosen) {
    const HtmlTrace& t = traces[s.row];
    std::uint64_t offset = 0;
    if (aligned) {
      const Json* program = detail::member(t.report, "program");
      offset = detail::uint_member(*program, "start_unix_ns").value_or(first_start) - first_start;
    }
    detail::ChartLine line{detail::ChartLine::Style::line, s.colour, names[s.row], allocated_total(t.timeline, offset)};
    for (const detail::ChartPoint& p : line.points) chart.y_max = std::max(chart.y_max, p.value);
    chart.t_end = std::max(chart.t_end, std::max(t.timeline.last_t(), detail::uint_member(t.report, "duration_t").value_or(0)) + offset);
    for (std::size_t i = 0; i < t.timeline.ooms().size(); ++i) {
      const TimelineOom& oom = t.timeline.ooms()[i];
      std::string tooltip = names[s.row] + ": out of memory on device " + std::to_string(oom.dev) + ", " +
                            oom.api + " of " + format_bytes(oom.size);
      if (const Json* events = detail::list_member(t.report, "oom_events"); events != nullptr && i < events->size()) {
        if (std::string sentence = detail::text_member((*events)[i], "sentence"); !sentence.empty()) {
          tooltip = names[s.row] + ": " + sentence;
        }
      }
      chart.markers.push_back(detail::ChartMarker{detail::ChartMarker::Kind::oom, oom.t + offset, tooltip});
    }
    all_series.push_back(line.points);
    chart.lines.push_back(std::move(line));
  }
  if (aligned && chosen.size() > 1 && chosen.size() == rows.size()) {
    detail::ChartLine sum{detail::ChartLine::Style::dashed, kSumColour, "all processes", sum_of(all_series)};
    for (const detail::ChartPoint& p : sum.points) chart.y_max = std::max(chart.y_max, p.value);
    chart.lines.push_back(std::move(sum));
  }
  if (chart.y_max == 0) {
    out += "<p>No process allocated device memory.</p></section>";
    return;
  }
  out += aligned ? "<p>On one clock: the time since the first process started (from each trace's start time). Each "
                   "process's devices are summed; each time slice keeps its highest moment."
                 : "<p>Each process on its own clock, from its own start (a trace without a start time, such as an "
                   "imported snapshot, cannot be placed on a common one).";
  if (chart.lines.size() > chosen.size()) {
    out += " The dashed line is all processes together: the job's memory over time, at the chart's resolution "
           "(each process is drawn from the highest moment of each of its time slices), where the sum of the peaks "
           "in the table is only an upper bound.";
  }
  out += "</p>";
  out += detail::render_step_chart(chart);
  out += "<ul class=\"legend\">";
  for (const Series& s : chosen) {
    out += "<li><span class=\"swatch\" style=\"background:" + std::string(s.colour) + "\"></span>";
    append_html(out, names[s.row] + ": peak " + format_bytes(rows[s.row].peak_allocated) + ", " + rows[s.row].trace);
    out += "</li>";
  }
  out += "</ul>";
  if (chosen.size() < rows.size()) {
    out += "<p class=\"absent\">The " + std::to_string(chosen.size()) + " processes with the highest peaks are drawn; " +
           std::to_string(rows.size() - chosen.size()) + " more are in the table.</p>";
  }
  out += "</section>";
}

}  // namespace

std::string render_html_multi_report(const std::vector<ProcessRow>& rows, const std::vector<HtmlTrace>& traces,
                                     bool full_stacks) {
  const std::vector<std::string> names = short_names(rows);
  const std::vector<Series> chosen = choose_series(rows);
  std::string out;
  detail::open_page(out, std::to_string(rows.size()) + " traces");
  out += "<header><h1>cumemtrace report: " + std::to_string(rows.size()) +
         " processes</h1><nav><a href=\"#processes\">processes</a><a href=\"#memory-all\">memory</a>";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out += "<a href=\"#p" + std::to_string(i) + "-summary\">";
    append_html(out, names[i]);
    out += "</a>";
  }
  out += "</nav></header>";
  render_process_table(out, rows, names, chosen);
  render_combined_chart(out, rows, traces, names, chosen);
  for (std::size_t i = 0; i < traces.size() && i < rows.size(); ++i) {
    std::string note;
    const std::vector<SegmentSnapshot> maps = detail::segment_maps_for(traces[i].report, traces[i].trace_path, note);
    std::string body;
    detail::render_report_body(body, traces[i].report, traces[i].timeline, maps, note, heading(rows[i]), full_stacks,
                               traces[i].flames);
    out += "<section class=\"process\" id=\"p" + std::to_string(i) + "\">";
    out += prefix_anchors(body, "p" + std::to_string(i) + "-");
    out += "</section>";
  }
  detail::close_page(out);
  return out;
}

}  // namespace cumemtrace::analyzer
