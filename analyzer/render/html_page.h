// The HTML report's internals, shared by its two source files and the tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/flame.h"
#include "cumemtrace/analyzer/timeline.h"
#include "analyze/segment_map.h"

namespace cumemtrace::analyzer::detail {

using Json = nlohmann::ordered_json;

// The page from everything already gathered; `maps_note` explains missing maps.
// `flames`: the flame graphs' trees (html_flame.h); none gives a note instead.
std::string render_html_page(const Json& report, const TimelineCollector& timeline,
                             const std::vector<SegmentSnapshot>& maps, std::string_view maps_note,
                             bool full_stacks = false, const std::vector<FlameTree>& flames = {});

// The pieces of a page, for the page of several traces too: the frame (with
// its style sheet, Content-Security-Policy and the flame graphs' script),
// and one trace's sections.
// `heading` (plain text), when not empty, titles the trace in place of the
// page's "cumemtrace report".
void open_page(std::string& out, std::string_view title);
void close_page(std::string& out);
void render_report_body(std::string& out, const Json& report, const TimelineCollector& timeline,
                        const std::vector<SegmentSnapshot>& maps, std::string_view maps_note,
                        std::string_view heading, bool full_stacks = false,
                        const std::vector<FlameTree>& flames = {});
// The segment maps at the peak and at the first OOMs, from a second read of
// `trace_path`; `note` says why some or all are missing.
std::vector<SegmentSnapshot> segment_maps_for(const Json& report, const std::string& trace_path, std::string& note);

// Tolerant accessors: a report written by another version may lack a key or
// hold another type; such a value reads as absent, never as an exception.
const Json* member(const Json& object, std::string_view key);  // null if absent or JSON null
std::optional<std::uint64_t> uint_member(const Json& object, std::string_view key);
std::optional<double> number_member(const Json& object, std::string_view key);
std::string text_member(const Json& object, std::string_view key);  // "" if absent
bool flag_member(const Json& object, std::string_view key);         // true only for JSON true
const Json* list_member(const Json& object, std::string_view key);  // an array, or null

// Sections with tables (html_tables.cpp), appended to `out`; stacks as
// render_stack() draws them.
void render_top_at_peak(std::string& out, const Json& report, bool full_stacks = false);
void render_leaks(std::string& out, const Json& report, bool full_stacks = false);
void render_ooms(std::string& out, const Json& report, const TimelineCollector& timeline, bool full_stacks = false);
void render_growth(std::string& out, const Json& report, bool full_stacks = false);
void render_phases(std::string& out, const Json& report);
// The CUDA graphs section (issue 31), only for a report with a "graphs"
// key (a trace with graph events); has_graphs() says whether it has one.
bool has_graphs(const Json& report);
void render_graphs(std::string& out, const Json& report);
void render_devices(std::string& out, const Json& report);
void render_advice(std::string& out, const Json& report);
void render_trace_health(std::string& out, const Json& report);

// The segment maps' sites take the report's labels (over the whole trace),
// so a site reads the same in the maps as in the tables.
void relabel_sites(std::vector<SegmentSnapshot>& maps, const Json& report);

// Shared pieces.
// A list of frames: the user's, each run of framework frames folded into
// a <details> that opens on it (analyze/stack_folding.h), at most 16 of the
// user's, long names shortened; with `full_stacks`, every frame as recorded.
void render_stack(std::string& out, const Json& frames, bool full_stacks = false);
// The call site's name: its `label`, else the first function of `functions`,
// else of `frames` (a report from an older analyzer).
std::string site_label(const Json& entry);
void absent_note(std::string& out, std::string_view what);
std::string seconds(std::uint64_t t);  // "1.234567 s", "3.200 ms", "450 ns"

}  // namespace cumemtrace::analyzer::detail
