#include "render/svg_segment_map.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>

#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/units.h"
#include "render/html_escape.h"

namespace cumemtrace::analyzer::detail {

namespace {

// Distinct hues, dark enough for white page contrast; the free part of a
// segment is light grey, sites past the palette a neutral grey.
constexpr std::array<const char*, 10> kSiteColours{"#2f6fdd", "#e07b00", "#2e9e44", "#c2185b", "#7b4fc9",
                                                    "#00897b", "#b8860b", "#5d4037", "#d84315", "#0097a7"};
constexpr const char* kOtherColour = "#8a8f98";
constexpr const char* kFreeColour = "#e3e6ea";

constexpr int kWidth = 1100;
constexpr int kLabelWidth = 270;
constexpr int kRowHeight = 18;
constexpr int kRowGap = 5;
constexpr int kHeader = 22;

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

std::string site_name(const SegmentSnapshot& map, std::uint32_t site) {
  return site == kOtherSite ? "other call sites" : map.sites[site].label;
}

}  // namespace

std::size_t site_palette_size() { return kSiteColours.size(); }

std::vector<std::vector<std::uint32_t>> assign_site_colours(const std::vector<SegmentSnapshot>& maps) {
  std::map<std::uint64_t, std::uint32_t> preferred;  // stack -> colour, in order of first appearance
  for (const SegmentSnapshot& map : maps) {
    for (const SegmentMapSite& site : map.sites) {
      preferred.try_emplace(site.stack, static_cast<std::uint32_t>(preferred.size() % kSiteColours.size()));
    }
  }
  std::vector<std::vector<std::uint32_t>> colours;
  for (const SegmentSnapshot& map : maps) {
    std::vector<bool> taken(kSiteColours.size(), false);
    std::vector<std::uint32_t>& of_site = colours.emplace_back();
    for (const SegmentMapSite& site : map.sites) {
      std::uint32_t colour = preferred[site.stack];
      for (std::size_t tries = 0; taken[colour] && tries < kSiteColours.size(); ++tries) {
        colour = static_cast<std::uint32_t>((colour + 1) % kSiteColours.size());
      }
      taken[colour] = true;
      of_site.push_back(colour);
    }
  }
  return colours;
}

std::string render_segment_map(const SegmentSnapshot& map, const std::vector<std::uint32_t>& colours) {
  const auto site_colour = [&](std::uint32_t site) {
    return site < colours.size() ? kSiteColours[colours[site] % kSiteColours.size()] : kOtherColour;
  };
  const double bar_x = kLabelWidth;
  const double bar_width = kWidth - kLabelWidth - 10;
  const int height = kHeader + static_cast<int>(map.segments.size()) * (kRowHeight + kRowGap) + 4;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"segmap\" width=\"" + std::to_string(kWidth) +
                    "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(kWidth) + " " +
                    std::to_string(height) + "\" role=\"img\"><title>Segment map: " +
                    std::to_string(map.segments.size()) + (map.segments.size() == 1 ? " segment" : " segments") +
                    "</title>";
  svg += "<text class=\"axis\" x=\"" + num(bar_x) + "\" y=\"14\">segment start</text>";
  svg += "<text class=\"axis\" x=\"" + num(bar_x + bar_width) + "\" y=\"14\" text-anchor=\"end\">segment end</text>";
  double y = kHeader;
  for (const SegmentMapSegment& s : map.segments) {
    svg += "<text class=\"seglabel\" x=\"0\" y=\"" + num(y + 13) + "\">dev " + std::to_string(s.dev) + " " +
           format_hex(s.ptr) + " " + format_bytes(s.size) + "</text>";
    svg += "<g class=\"segment\"><title>segment " + format_hex(s.ptr) + " on device " + std::to_string(s.dev) + ": " +
           format_bytes(s.size) + ", " + format_bytes(s.used) + " in " + std::to_string(s.blocks) +
           (s.blocks == 1 ? " live block (" : " live blocks (") +
           percent(s.used, s.size) + "), " + format_bytes(s.size > s.used ? s.size - s.used : 0) +
           " free</title><rect x=\"" + num(bar_x) + "\" y=\"" + num(y) + "\" width=\"" + num(bar_width) + "\" height=\"" +
           std::to_string(kRowHeight) + "\" fill=\"" + kFreeColour + "\"/></g>";
    const double scale = s.size == 0 ? 0 : bar_width / static_cast<double>(s.size);
    for (const SegmentMapRun& r : s.runs) {
      const double x = bar_x + static_cast<double>(r.begin) * scale;
      const double w = std::max(1.0, static_cast<double>(r.end - r.begin) * scale);  // a tiny block stays visible
      svg += "<g><title>";
      append_html(svg, (r.mixed ? "mostly " : "") + site_name(map, r.site));
      svg += " \xE2\x80\x94 " + std::to_string(r.blocks) + (r.blocks == 1 ? " block, " : " blocks, ") +
             format_bytes(r.bytes) + " at " + format_hex(s.ptr + r.begin) + "\xE2\x80\xA6" + format_hex(s.ptr + r.end) +
             "</title><rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
             std::to_string(kRowHeight) + "\" fill=\"" + site_colour(r.site) + "\"/></g>";
    }
    y += kRowHeight + kRowGap;
  }
  svg += "</svg>";

  std::string legend = "<ul class=\"legend\">";
  for (std::uint32_t i = 0; i < map.sites.size(); ++i) {
    const SegmentMapSite& site = map.sites[i];
    legend += "<li><span class=\"swatch\" style=\"background:" + std::string(site_colour(i)) + "\"></span><code>";
    append_html(legend, site.label);
    legend += "</code> " + format_bytes(site.bytes) + " in " + std::to_string(site.count) +
              (site.count == 1 ? " block" : " blocks");
    legend += "</li>";
  }
  if (map.other_site_count > 0) {
    legend += "<li><span class=\"swatch\" style=\"background:" + std::string(kOtherColour) + "\"></span>" +
              std::to_string(map.other_site_count) + " other call sites: " + format_bytes(map.other_site_bytes) + "</li>";
  }
  legend += "<li><span class=\"swatch\" style=\"background:" + std::string(kFreeColour) +
            "\"></span>free (reserved, not allocated)</li></ul>";
  return svg + legend;
}

}  // namespace cumemtrace::analyzer::detail
