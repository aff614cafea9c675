// Static SVG charts for the HTML report, drawn in C++ so the page needs no
// script: step charts of values over trace time (memory holds its value until
// the next event changes it), with marks, OOMs and a highlighted peak.
// Every label and tooltip is escaped here; callers pass plain text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cumemtrace::analyzer::detail {

struct ChartPoint {
  std::uint64_t t = 0;  // trace nanoseconds
  double value = 0;
};

struct ChartLine {
  enum class Style { area, line, dashed, dots };
  Style style = Style::line;
  std::string color;   // a CSS colour from our own palette, never trace text
  std::string legend;  // plain text
  std::vector<ChartPoint> points;  // in time order; each value holds until the next point
};

struct ChartMarker {
  enum class Kind { mark, oom };
  Kind kind = Kind::mark;
  std::uint64_t t = 0;
  std::string tooltip;  // plain text
};

struct ChartHighlight {
  std::uint64_t t = 0;
  double value = 0;
  std::string label;  // plain text, drawn beside the point
};

struct StepChart {
  enum class YAxis { bytes, fraction };
  std::string title;  // plain text, the chart's accessible name
  YAxis y_axis = YAxis::bytes;
  std::uint64_t t_end = 0;  // the x axis spans [0, t_end]
  double y_max = 0;         // bytes: rounded up to a tick; fraction: 1
  std::vector<ChartLine> lines;  // drawn in order: areas first, then lines
  std::vector<ChartMarker> markers;
  std::optional<ChartHighlight> highlight;
  int width = 1100;
  int height = 300;
};

std::string render_step_chart(const StepChart& chart);

// "512 MiB", "1.5 GiB": axis labels, shorter than format_bytes.
std::string short_bytes(double bytes);
// "250 ms", "1.5 s": a time on the axis, in the unit of its step.
std::string axis_time(std::uint64_t t, std::uint64_t step);

}  // namespace cumemtrace::analyzer::detail
