#include "render/svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "render/html_escape.h"

namespace cumemtrace::analyzer::detail {

namespace {

constexpr int kLeft = 78;    // room for the y labels
constexpr int kRight = 34;   // room for the last x label
constexpr int kTop = 30;     // room for the legend
constexpr int kBottom = 30;  // room for the x labels
constexpr std::size_t kMaxLabelledMarks = 60;

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

// 1, 2 or 5 times a power of ten, at least `raw`.
std::uint64_t nice_decimal_step(double raw) {
  double power = 1;
  while (power * 10 <= raw) power *= 10;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return static_cast<std::uint64_t>(std::max(1.0, m * power));
  }
  return static_cast<std::uint64_t>(power * 10);
}

// A power of two at least `raw` (byte axes read best in binary units).
double nice_binary_step(double raw) {
  double step = 1;
  while (step < raw) step *= 2;
  return step;
}

struct Frame {
  double x0, x1, y0, y1;  // plot area: x0 left, y0 bottom (pixel y grows downwards)
  double t_end, y_max;
  double x(std::uint64_t t) const { return x0 + (x1 - x0) * std::min(1.0, static_cast<double>(t) / t_end); }
  double y(double v) const { return y0 - (y0 - y1) * std::clamp(v / y_max, 0.0, 1.0); }
};

// The step outline of a series: each value held until the next point, the
// last one until the end of the axis.
std::string step_path(const Frame& f, const std::vector<ChartPoint>& points, bool closed) {
  std::string d;
  d.reserve(points.size() * 16 + 32);
  if (closed) d += "M" + num(f.x(points.front().t)) + "," + num(f.y0);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double px = f.x(points[i].t);
    const double py = f.y(points[i].value);
    if (i == 0) {
      d += (closed ? "V" : "M" + num(px) + ",") + num(py);
    } else {
      d += "H" + num(px) + "V" + num(py);
    }
  }
  d += "H" + num(f.x1);
  if (closed) d += "V" + num(f.y0) + "Z";
  return d;
}

void draw_legend(std::string& svg, const StepChart& chart) {
  double x = kLeft;
  for (const ChartLine& line : chart.lines) {
    if (line.legend.empty()) continue;
    svg += "<rect x=\"" + num(x) + "\" y=\"8\" width=\"14\" height=\"10\" fill=\"" + line.color + "\"/>";
    svg += "<text x=\"" + num(x + 19) + "\" y=\"17\" class=\"legend\">";
    append_html(svg, line.legend);
    svg += "</text>";
    x += 30 + 6.5 * static_cast<double>(line.legend.size());
  }
}

void draw_axes(std::string& svg, const StepChart& chart, const Frame& f) {
  // y: gridlines and labels
  if (chart.y_axis == StepChart::YAxis::fraction) {
    for (int pct = 0; pct <= 100; pct += 25) {
      const double y = f.y(pct / 100.0);
      svg += "<line class=\"grid\" x1=\"" + num(f.x0) + "\" x2=\"" + num(f.x1) + "\" y1=\"" + num(y) + "\" y2=\"" + num(y) + "\"/>";
      svg += "<text class=\"axis\" x=\"" + num(f.x0 - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
             std::to_string(pct) + "%</text>";
    }
  } else {
    const double step = nice_binary_step(f.y_max / 5);
    for (double v = 0; v <= f.y_max * 1.0001; v += step) {
      const double y = f.y(v);
      svg += "<line class=\"grid\" x1=\"" + num(f.x0) + "\" x2=\"" + num(f.x1) + "\" y1=\"" + num(y) + "\" y2=\"" + num(y) + "\"/>";
      svg += "<text class=\"axis\" x=\"" + num(f.x0 - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
             short_bytes(v) + "</text>";
    }
  }
  // x: time ticks
  const std::uint64_t step = nice_decimal_step(f.t_end / 8);
  for (std::uint64_t t = 0; static_cast<double>(t) <= f.t_end; t += step) {
    const double x = f.x(t);
    svg += "<line class=\"tick\" x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(f.y0) + "\" y2=\"" + num(f.y0 + 5) + "\"/>";
    svg += "<text class=\"axis\" x=\"" + num(x) + "\" y=\"" + num(f.y0 + 18) + "\" text-anchor=\"middle\">" +
           axis_time(t, step) + "</text>";
    if (t > UINT64_MAX - step) break;
  }
  svg += "<line class=\"axisline\" x1=\"" + num(f.x0) + "\" x2=\"" + num(f.x1) + "\" y1=\"" + num(f.y0) + "\" y2=\"" + num(f.y0) + "\"/>";
  svg += "<line class=\"axisline\" x1=\"" + num(f.x0) + "\" x2=\"" + num(f.x0) + "\" y1=\"" + num(f.y1) + "\" y2=\"" + num(f.y0) + "\"/>";
}

void draw_line(std::string& svg, const ChartLine& line, const Frame& f) {
  if (line.points.empty()) return;
  switch (line.style) {
    case ChartLine::Style::area:
      svg += "<path d=\"" + step_path(f, line.points, true) + "\" fill=\"" + line.color + "\" stroke=\"none\"/>";
      break;
    case ChartLine::Style::line:
    case ChartLine::Style::dashed:
      svg += "<path d=\"" + step_path(f, line.points, false) + "\" fill=\"none\" stroke=\"" + line.color +
             "\" stroke-width=\"2\"" + (line.style == ChartLine::Style::dashed ? " stroke-dasharray=\"6 4\"" : "") +
             "/>";
      break;
    case ChartLine::Style::dots:
      svg += "<g fill=\"" + line.color + "\">";
      for (const ChartPoint& p : line.points) {
        svg += "<circle cx=\"" + num(f.x(p.t)) + "\" cy=\"" + num(f.y(p.value)) + "\" r=\"2.5\"/>";
      }
      svg += "</g>";
      break;
  }
}

void draw_markers(std::string& svg, const StepChart& chart, const Frame& f) {
  // Marks: a thin line each, with a wide invisible twin to hover. A long
  // trace can have thousands; an even selection keeps the page light.
  std::vector<const ChartMarker*> marks;
  for (const ChartMarker& m : chart.markers) {
    if (m.kind == ChartMarker::Kind::mark) marks.push_back(&m);
  }
  const std::size_t shown = std::min(marks.size(), kMaxLabelledMarks);
  for (std::size_t i = 0; i < shown; ++i) {
    const ChartMarker& m = *marks[marks.size() <= kMaxLabelledMarks ? i : i * marks.size() / shown];
    const std::string x = num(f.x(m.t));
    svg += "<g class=\"mark\"><title>";
    append_html(svg, m.tooltip);
    svg += "</title><line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + num(f.y1) + "\" y2=\"" + num(f.y0) +
           "\" class=\"markline\"/><line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + num(f.y1) + "\" y2=\"" +
           num(f.y0) + "\" class=\"hit\"/></g>";
  }
  for (const ChartMarker& m : chart.markers) {
    if (m.kind != ChartMarker::Kind::oom) continue;
    const double x = f.x(m.t);
    svg += "<g class=\"oom\"><title>";
    append_html(svg, m.tooltip);
    svg += "</title><line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(f.y1) + "\" y2=\"" + num(f.y0) +
           "\" class=\"oomline\"/><path d=\"M" + num(x - 7) + "," + num(f.y1 - 10) + "H" + num(x + 7) + "L" + num(x) +
           "," + num(f.y1 + 2) + "Z\" class=\"oommark\"/></g>";
  }
}

}  // namespace

std::string short_bytes(double bytes) {
  constexpr std::array<const char*, 7> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  while (unit + 1 < kUnits.size() && bytes >= 1024) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%g %s", std::round(bytes * 100) / 100, kUnits[unit]);
  return text;
}

std::string axis_time(std::uint64_t t, std::uint64_t step) {
  const char* unit = "ns";
  double scale = 1;
  if (step >= 1000000000) {
    unit = "s", scale = 1e9;
  } else if (step >= 1000000) {
    unit = "ms", scale = 1e6;
  } else if (step >= 1000) {
    unit = "\xC2\xB5s", scale = 1e3;  // µs
  }
  char text[40];
  std::snprintf(text, sizeof text, "%g %s", static_cast<double>(t) / scale, unit);
  return text;
}

std::string render_step_chart(const StepChart& chart) {
  Frame f;
  f.x0 = kLeft;
  f.x1 = chart.width - kRight;
  f.y1 = kTop;
  f.y0 = chart.height - kBottom;
  f.t_end = std::max<double>(1, static_cast<double>(chart.t_end));
  if (chart.y_axis == StepChart::YAxis::fraction) {
    f.y_max = 1;
  } else {
    const double step = nice_binary_step(std::max(1.0, chart.y_max) / 5);
    f.y_max = std::max(1.0, std::ceil(chart.y_max / step)) * step;
  }

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" + std::to_string(chart.width) +
                    "\" height=\"" + std::to_string(chart.height) + "\" viewBox=\"0 0 " + std::to_string(chart.width) +
                    " " + std::to_string(chart.height) + "\" role=\"img\"><title>";
  append_html(svg, chart.title);
  svg += "</title>";
  draw_axes(svg, chart, f);
  for (const ChartLine& line : chart.lines) {
    if (line.style == ChartLine::Style::area) draw_line(svg, line, f);
  }
  for (const ChartLine& line : chart.lines) {
    if (line.style != ChartLine::Style::area) draw_line(svg, line, f);
  }
  draw_markers(svg, chart, f);
  if (chart.highlight) {
    const double x = f.x(chart.highlight->t);
    const double y = f.y(chart.highlight->value);
    const bool right_half = x > (f.x0 + f.x1) / 2;
    svg += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"5\" class=\"peak\"/>";
    svg += "<text x=\"" + num(right_half ? x - 9 : x + 9) + "\" y=\"" + num(std::max(f.y1 + 12, y - 8)) +
           "\" class=\"peaklabel\" text-anchor=\"" + (right_half ? "end" : "start") + "\">";
    append_html(svg, chart.highlight->label);
    svg += "</text>";
  }
  draw_legend(svg, chart);
  svg += "</svg>";
  return svg;
}

}  // namespace cumemtrace::analyzer::detail
