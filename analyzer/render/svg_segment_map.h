// A segment map drawn as static SVG: one row per segment, blocks inside
// coloured by call site, a tooltip (<title>) on every bar, and an HTML legend
// of the coloured sites. Every string from the trace is escaped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyze/segment_map.h"

namespace cumemtrace::analyzer::detail {

// How many distinct site colours there are (at least SegmentMapOptions::max_sites).
std::size_t site_palette_size();

// Colours for the sites of several maps: a call site keeps its colour from
// map to map where it can, and no two sites of one map share one. Result:
// per map, per site, an index into the palette.
std::vector<std::vector<std::uint32_t>> assign_site_colours(const std::vector<SegmentSnapshot>& maps);

// The SVG followed by its legend (an HTML list); `colours` from assign_site_colours.
std::string render_segment_map(const SegmentSnapshot& map, const std::vector<std::uint32_t>& colours);

}  // namespace cumemtrace::analyzer::detail
