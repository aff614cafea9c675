// The HTML report's flame graphs (html_flame.cpp): a section per trace with
// the three views' data in a JSON block, and the page's one script that
// draws them (flame_graph.js, embedded at build time with its hash).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/analyzer/flame.h"

namespace cumemtrace::analyzer::detail {

// <section id="flame-graphs">: for peak, leaks and allocated (in that
// order), a block with a heading and a sentence, and a box the script draws
// the graph in; a view that is empty says so in words, one that `trees`
// lacks says it is not available. The data for all three goes in one
// <script type="application/json" class="flamedata">.
void render_flame_section(std::string& out, const std::vector<FlameTree>& trees);

// That JSON (flame_graph.js describes it), with every '<', '>' and '&'
// written as \u003c, \u003e, \u0026 so trace text cannot end the block.
std::string flame_data_json(const std::vector<FlameTree>& trees);

// The style sheet's rules for the section (tabs, frames by kind, tooltip).
std::string_view flame_style();

// The script, byte for byte as the page carries it, and the source of the
// page's Content-Security-Policy that allows exactly it: 'sha256-<base64>'.
std::string_view flame_script();
std::string flame_script_csp_source();

}  // namespace cumemtrace::analyzer::detail
