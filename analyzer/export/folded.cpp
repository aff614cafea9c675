// `cumemtrace export --format folded`: call stacks weighted by bytes in the
// collapsed-stack format of flamegraph.pl (Brendan Gregg's stackcollapse
// output), which inferno and speedscope read too.
//
// The lines are the flame graph's own tree (build_flame_tree, nothing
// pruned) read back as paths: a node's bytes minus its children's are the
// bytes of stacks that end there. So stacks that name the same frames
// (native frames at other offsets of one function, several ids without
// frames) are one line, as the graph draws them, and the file and the HTML
// graph cannot disagree.
#include <algorithm>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/flame.h"
#include "export/text_builders.h"

namespace cumemtrace::analyzer {

ExportSummary export_folded(TraceReader& reader, std::ostream& out, FlameWhat what) {
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  const FlameTree tree = build_flame_tree(analysis, what);

  std::vector<std::uint64_t> self(tree.nodes.size());
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) self[i] = tree.nodes[i].bytes;
  for (std::size_t i = 1; i < tree.nodes.size(); ++i) self[tree.nodes[i].parent] -= tree.nodes[i].bytes;

  std::vector<std::pair<std::uint64_t, std::string>> lines;
  std::vector<std::uint32_t> path;
  for (std::size_t i = 1; i < tree.nodes.size(); ++i) {
    if (self[i] == 0) continue;
    path.clear();
    for (auto node = static_cast<std::uint32_t>(i); node != 0; node = tree.nodes[node].parent) path.push_back(node);
    std::string line;
    for (auto node = path.rbegin(); node != path.rend(); ++node) {
      if (node != path.rbegin()) line += ';';
      line += tree.names[tree.nodes[*node].name];
    }
    lines.emplace_back(self[i], std::move(line));
  }
  std::sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });

  detail::ChunkedOutput output(out);
  for (const auto& [bytes, line] : lines) {
    output.text += line;
    output.text += ' ';
    detail::append_uint(output.text, bytes);
    output.text += '\n';
    output.maybe_flush();
  }
  output.flush();
  return ExportSummary{lines.size(), 0, 0};
}

}  // namespace cumemtrace::analyzer
