// Call stacks weighted by bytes: what the HTML report's flame graphs and
// `cumemtrace export --format folded` show, for three questions:
//   peak       what was live at the allocated peak (all devices together),
//   leaks      what was still live at the end,
//   allocated  every byte ever allocated (a site allocating 1 MiB ten times
//              weighs 10 MiB, however much of it was freed).
// Full stacks, native and Python frames alike, outermost frame first.
// Allocations without a stack (stack 0), or whose stack id has no `stack`
// event in the trace (a cut trace) or no frames, are one frame "[no stack]".
// The figures come from the call-site table (call_sites.h), so asking
// costs one entry per call site, whatever the trace's length.
//
//   Analysis analysis;  (consumed the whole trace)
//   for (const WeightedStack& s : weighted_stacks(analysis, FlameWhat::peak)) ...
//   FlameTree tree = build_flame_tree(analysis, FlameWhat::leaks);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer {

enum class FlameWhat : std::uint8_t { peak, leaks, allocated };

// "peak", "leaks", "allocated"; parse_flame_what gives nullopt for others.
std::string_view flame_what_name(FlameWhat what);
std::optional<FlameWhat> parse_flame_what(std::string_view name);

// One call stack (trace stack id; 0: allocations without a stack) and what
// it weighs for one question: bytes, and the allocations behind them.
struct WeightedStack {
  std::uint64_t stack = 0;
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
};

// Stacks with bytes > 0, most bytes first (ties: lower stack id first).
std::vector<WeightedStack> weighted_stacks(const Analysis& analysis, FlameWhat what);

// A frame as flame graphs and the folded format name it: Python frames
// "fn (file.py:12)", native ones by function name (long C++ names shortened
// as readable_function_name does), unnamed ones "module+0x1f0" or "0x7f…".
// Never contains ';' or a line break (the folded format's separators).
std::string flame_frame_name(const OwnedFrame& frame);

// Whose code a frame is, for colouring: Python, the program's native code,
// or a framework (libtorch, CPython, CUDA, C/C++ libraries, libffi).
enum class FlameFrameKind : std::uint8_t { python, native, framework, unknown };

// A flame graph's data: frames merged by name along the path from the root,
// so each node is one frame reached through one sequence of callers.
struct FlameTree {
  struct Node {
    std::uint32_t name = 0;    // index in names
    std::uint32_t parent = 0;  // index in nodes; the root (node 0) is its own parent
    std::uint64_t bytes = 0;   // inclusive: this frame and everything it called
    std::uint64_t count = 0;   // allocations, inclusive
    FlameFrameKind kind = FlameFrameKind::unknown;
  };
  FlameWhat what = FlameWhat::peak;
  std::vector<std::string> names;  // names[0] is "all"
  // Depth first from the root (node 0), so parents come before children and
  // each subtree is one run of nodes; a node's children by bytes, most
  // first (ties by name), its merged narrower frames last.
  std::vector<Node> nodes;
  std::uint64_t total_bytes = 0;   // == nodes[0].bytes
  std::uint64_t stacks = 0;        // distinct stacks that went in
  std::uint64_t pruned_nodes = 0;  // frames left out as too narrow to see, with all under them
};

// Nodes narrower than `min_fraction` of the total are merged into their
// parent's "(n narrower frames)" child ("(1 narrower frame)"; n counts the
// children merged, kind unknown, no children of its own) so a page with
// 10,000 distinct stacks stays small; 0 keeps every frame. Names are only
// those of the nodes kept. Frames are merged through hash maps: 10,000
// stacks of 60 frames take well under a second.
FlameTree build_flame_tree(const Analysis& analysis, FlameWhat what, double min_fraction = 0.0);

}  // namespace cumemtrace::analyzer
