#include "render/live_view.h"

#include <algorithm>
#include <cstdio>

#include "cumemtrace/analyzer/units.h"
#include "render/report_text_sections.h"

namespace cumemtrace::analyzer::detail {

namespace {

constexpr const char* kBlocks[] = {"\xE2\x96\x81", "\xE2\x96\x82", "\xE2\x96\x83", "\xE2\x96\x84",
                                   "\xE2\x96\x85", "\xE2\x96\x86", "\xE2\x96\x87", "\xE2\x96\x88"};  // ▁..█
constexpr const char* kEllipsis = "\xE2\x80\xA6";  // …

// Columns of UTF-8 text: one per code point (the view's own text and the
// site labels hold no wide characters).
std::size_t columns(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// `s` cut to `width` columns, an ellipsis marking the cut.
std::string fit(const std::string& s, std::size_t width) {
  if (columns(s) <= width) return s;
  if (width == 0) return {};
  std::string out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool starts = (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    if (starts && ++n == width) break;
    out += s[i];
  }
  return out + kEllipsis;
}

// "0.123 s" style, shorter than format_seconds: tenths.
std::string seconds_text(std::uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

std::string errors_text(const LiveFigures& f) {
  std::string text = "errors " + std::to_string(f.errors);
  if (f.errors_by_what.empty()) return text;
  text += " (";
  for (std::size_t i = 0; i < f.errors_by_what.size(); ++i) {
    text += (i == 0 ? "" : ", ") + f.errors_by_what[i].first + " " + std::to_string(f.errors_by_what[i].second);
  }
  return text + ")";
}

}  // namespace

void LiveSampler::sample(const Analysis& analysis, std::size_t top_sites, LiveFigures& f) {
  f.t_ns = analysis.last_t();
  f.devices.clear();
  for (const auto& [dev, info] : analysis.devices()) {
    LiveDevice d;
    d.dev = dev;
    d.name = info.name;
    d.allocated = info.memory.allocated.current;
    d.reserved = info.memory.reserved.current;
    d.peak_allocated = info.memory.allocated.peak;
    d.peak_reserved = info.memory.reserved.peak;
    std::deque<std::uint64_t>& samples = samples_[dev];
    samples.push_back(d.allocated);
    while (samples.size() > history_) samples.pop_front();
    d.history.assign(samples.begin(), samples.end());
    f.devices.push_back(std::move(d));
  }
  const MemoryTotals& total = analysis.total();
  f.total.dev = -1;
  f.total.allocated = total.allocated.current;
  f.total.reserved = total.reserved.current;
  f.total.peak_allocated = total.allocated.peak;
  f.total.peak_reserved = total.reserved.peak;
  std::deque<std::uint64_t>& all = samples_[-1];
  all.push_back(f.total.allocated);
  while (all.size() > history_) all.pop_front();
  f.total.history.assign(all.begin(), all.end());

  // Labels over every site, as the report's: worked out again only when
  // the set of stacks changed, which stops early in a training loop.
  const std::size_t sites = analysis.sites().size(), stacks = analysis.stacks().size();
  const std::size_t ooms = analysis.oom_records().size();
  if (!labels_ || sites != labelled_sites_ || stacks != labelled_stacks_ || ooms != labelled_ooms_) {
    labels_.emplace(analysis);
    labelled_sites_ = sites;
    labelled_stacks_ = stacks;
    labelled_ooms_ = ooms;
  }
  std::vector<const CallSite*> live;
  for (const CallSite& s : analysis.sites().all()) {
    if (s.live_bytes > 0) live.push_back(&s);
  }
  f.live_sites = live.size();
  const std::size_t shown = std::min(top_sites, live.size());
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(shown), live.end(),
                    [](const CallSite* a, const CallSite* b) {
                      return a->live_bytes != b->live_bytes ? a->live_bytes > b->live_bytes : a->stack < b->stack;
                    });
  f.top_sites.clear();
  for (std::size_t i = 0; i < shown; ++i) {
    f.top_sites.push_back(LiveSite{(*labels_)(live[i]->stack), live[i]->live_bytes, live[i]->live_count});
  }

  const GrowthResult growth = analysis.growth();
  f.iterations.clear();
  if (growth.iterations.source == IterationInfo::Source::marks) {
    f.iterations = plural(growth.iterations.count, "iteration", "iterations") + ", mark '" + growth.iterations.mark + "'";
  } else if (growth.iterations.source == IterationInfo::Source::period) {
    f.iterations = plural(growth.iterations.count, "iteration", "iterations") + " of " +
                   plural(growth.iterations.period_allocs, "allocation", "allocations");
  }
  f.growth.clear();
  for (const GrowthLeak& g : growth.leaks) f.growth.push_back(LiveGrowth{(*labels_)(g.stack), per_iteration(g), g.iterations});

  f.ooms = analysis.total().ooms;
  f.last_oom.clear();
  if (!analysis.oom_records().empty()) {
    const OomRecord& o = analysis.oom_records().back();
    f.last_oom = format_bytes(o.size) + " on device " + std::to_string(o.dev);
    if (!o.cause.empty()) f.last_oom += " (" + o.cause + ")";
    f.last_oom += " from " + (*labels_)(o.stack);
  }
  f.errors = analysis.errors();
  f.errors_by_what = analysis.errors_by_what();
}

std::string sparkline(const std::vector<std::uint64_t>& values, std::size_t width) {
  const std::size_t first = values.size() > width ? values.size() - width : 0;
  if (first == values.size()) return {};  // no values, or no room (a terminal too narrow for one)
  const std::uint64_t top = *std::max_element(values.begin() + static_cast<std::ptrdiff_t>(first), values.end());
  std::string out;
  for (std::size_t i = first; i < values.size(); ++i) {
    if (values[i] == 0 || top == 0) {
      out += ' ';
      continue;
    }
    // 1..8 eighths, rounded up: any bytes at all show as the lowest block.
    const auto level = static_cast<std::size_t>((static_cast<unsigned __int128>(values[i]) * 8 + top - 1) / top);
    out += kBlocks[std::clamp<std::size_t>(level, 1, 8) - 1];
  }
  return out;
}

std::vector<std::string> live_frame(const LiveFigures& f, std::size_t width, std::size_t height) {
  // Built in order of what matters most; call sites and growth rows are
  // dropped first when the height is short.
  std::vector<std::string> head, sites, tail;
  std::string title = "cumemtrace";
  if (!f.program.empty()) title += "  " + f.program;
  title += "  [" + f.state + "]";
  if (f.events > 0) {
    title += "  " + seconds_text(f.t_ns) + ", " + plural(f.events, "event", "events");
    if (f.events_per_second > 0) title += ", " + std::to_string(f.events_per_second) + "/s";
  }
  head.push_back(title);
  if (!f.trace.empty()) head.push_back("trace " + f.trace);
  if (f.events == 0) {  // nothing read yet: the state says what it waits for
    if (head.size() > height) head.resize(height);
    for (std::string& line : head) line = fit(line, width);
    return head;
  }

  if (f.devices.empty()) {
    head.push_back("no device memory allocated yet");
  } else {
    char row[160];
    std::snprintf(row, sizeof row, "%-4s %12s %12s %12s %12s  ", "dev", "allocated", "peak", "reserved", "peak");
    const std::size_t fixed = columns(row);
    const std::size_t spark = width > fixed ? width - fixed : 0;
    head.push_back(std::string(row) + (spark >= 10 ? "allocated over time" : ""));
    std::vector<const LiveDevice*> rows;
    for (const LiveDevice& d : f.devices) rows.push_back(&d);
    if (f.devices.size() > 1) rows.push_back(&f.total);
    for (const LiveDevice* d : rows) {
      const std::string dev = d->dev < 0 ? std::string("all") : std::to_string(d->dev);
      std::snprintf(row, sizeof row, "%-4s %12s %12s %12s %12s  ", dev.c_str(), format_bytes(d->allocated).c_str(),
                    format_bytes(d->peak_allocated).c_str(), format_bytes(d->reserved).c_str(),
                    format_bytes(d->peak_reserved).c_str());
      head.push_back(std::string(row) + sparkline(d->history, spark));
    }
  }

  if (!f.top_sites.empty()) {
    sites.push_back("live now by call site (" + plural(f.live_sites, "site", "sites") + "):");
    for (const LiveSite& s : f.top_sites) {
      char row[64];
      std::snprintf(row, sizeof row, "  %12s %8llu  ", format_bytes(s.bytes).c_str(),
                    static_cast<unsigned long long>(s.count));
      sites.push_back(row + s.label);
    }
  }

  if (f.iterations.empty()) {
    tail.push_back("growth: no iterations recognised yet");
  } else if (f.growth.empty()) {
    tail.push_back("growth: none (" + f.iterations + ")");
  } else {
    tail.push_back("growth: " + plural(f.growth.size(), "site keeps", "sites keep") + " more each iteration (" +
                   f.iterations + "):");
    for (const LiveGrowth& g : f.growth) tail.push_back("  +" + g.per_iteration + "/iteration  " + g.label);
  }
  std::string problems = "out of memory " + std::to_string(f.ooms);
  if (!f.last_oom.empty()) problems += " (last: " + f.last_oom + ")";
  problems += "   " + errors_text(f);
  if (f.bad_lines > 0) problems += "   unreadable lines " + std::to_string(f.bad_lines);
  tail.push_back(problems);

  // Rows for the sites: what is left after the head, the tail's first and
  // last lines (growth's heading, the problems), and a blank between parts.
  std::vector<std::string> lines = head;
  const std::size_t reserved_tail = std::min<std::size_t>(tail.size(), 2);
  const std::size_t blanks = sites.empty() ? 1 : 2;
  std::size_t room = height > lines.size() + reserved_tail + blanks ? height - lines.size() - reserved_tail - blanks : 0;
  if (!sites.empty() && room >= 2) {
    lines.emplace_back();
    const std::size_t n = std::min(sites.size(), room);
    lines.insert(lines.end(), sites.begin(), sites.begin() + static_cast<std::ptrdiff_t>(n));
    room -= n;
  }
  lines.emplace_back();
  // The growth rows in between heading and problems, as many as fit.
  const std::size_t growth_rows = tail.size() - reserved_tail;
  lines.push_back(tail.front());
  for (std::size_t i = 1; i <= growth_rows && i <= room; ++i) lines.push_back(tail[i]);
  if (tail.size() > 1) lines.push_back(tail.back());
  if (lines.size() > height) lines.resize(height);
  for (std::string& line : lines) line = fit(line, width);
  return lines;
}

std::string live_line(const LiveFigures& f) {
  std::string line = seconds_text(f.t_ns) + ", " + plural(f.events, "event", "events");
  const LiveDevice& t = f.total;
  line += ": allocated " + format_bytes(t.allocated) + " (peak " + format_bytes(t.peak_allocated) + "), reserved " +
          format_bytes(t.reserved) + " (peak " + format_bytes(t.peak_reserved) + ")";
  if (!f.top_sites.empty()) line += ", top site " + f.top_sites.front().label + " " + format_bytes(f.top_sites.front().bytes);
  line += ", " + plural(f.growth.size(), "growth leak", "growth leaks") + ", " + plural(f.ooms, "OOM", "OOMs") + ", " +
          plural(f.errors, "error", "errors") + " [" + f.state + "]";
  return line;
}

}  // namespace cumemtrace::analyzer::detail
