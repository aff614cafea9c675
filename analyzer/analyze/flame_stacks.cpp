// Call stacks weighted by bytes and the flame graph's tree (flame.h).
//
// The figures come from the call-site table, kept current on every event:
// what each site had live at the allocated peak (exact, see call_sites.h),
// what it has live now and what it ever allocated. Nothing here walks the
// live set or the trace again.
#include "cumemtrace/analyzer/flame.h"

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyze/report_figures.h"
#include "analyze/stack_folding.h"
#include "cumemtrace/address_map.h"
#include "cumemtrace/analyzer/units.h"

namespace cumemtrace::analyzer {

namespace {

constexpr std::string_view kRootName = "all";
// Allocations without a stack (stack 0), or whose stack id has no `stack`
// event (a cut trace) or no frames: one frame of their own under the root.
constexpr std::string_view kNoStackName = "[no stack]";

// ';' separates frames in the folded format and a line break ends a stack:
// neither may appear in a name (C++ names hold neither, but a trace's text
// is whatever the program wrote).
void make_foldable(std::string& name) {
  for (char& c : name) {
    if (c == ';') c = ',';
    else if (c == '\n' || c == '\r') c = ' ';
  }
}

std::uint64_t child_key(std::uint32_t parent, std::uint32_t name) {
  return (static_cast<std::uint64_t>(parent) << 32) | name;
}

struct TextHash {
  using is_transparent = void;  // find() by string_view, without a copy
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Names interned once, and what names a frame and says whose code it is
// remembered by the function's text and the module's: shortening a PyTorch
// template name, or telling its owner (which shortens it too), costs far
// more than hashing it, and a few thousand functions recur in every one of
// thousands of stacks.
class NameTable {
 public:
  std::uint32_t intern(std::string_view name) {
    if (const auto it = ids_.find(name); it != ids_.end()) return it->second;
    const auto id = static_cast<std::uint32_t>(names_.size());
    names_.emplace_back(name);
    ids_.emplace(names_.back(), id);
    return id;
  }
  // The id of flame_frame_name(frame); `frame` outlives this table.
  std::uint32_t frame(const OwnedFrame& frame) {
    if (!by_function(frame)) return intern(flame_frame_name(frame));
    const auto [it, inserted] = functions_.try_emplace(*frame.fn);
    if (inserted) {
      it->second.name = intern(flame_frame_name(frame));
      it->second.owner = detail::frame_owner(false, *frame.fn, {});  // by the name alone
    }
    return it->second.name;
  }
  // detail::frame_owner(frame) as a node's colour, for a frame frame() named.
  FlameFrameKind kind(const OwnedFrame& frame) {
    if (frame.py) return FlameFrameKind::python;
    auto [module, inserted] = modules_.try_emplace(frame.module);
    if (inserted) module->second = detail::frame_owner(false, {}, frame.module);  // by the module alone
    detail::FrameOwner owner = module->second;
    // As frame_owner decides: the module first, then the function's name.
    if (owner == detail::FrameOwner::user && by_function(frame)) owner = functions_.find(*frame.fn)->second.owner;
    return owner == detail::FrameOwner::user ? FlameFrameKind::native : FlameFrameKind::framework;
  }
  const std::string& operator[](std::uint32_t id) const { return names_[id]; }
  std::size_t size() const { return names_.size(); }

 private:
  // A native frame with a function's name is named by that name alone.
  static bool by_function(const OwnedFrame& frame) { return !frame.py && frame.fn && !frame.fn->empty(); }

  struct Function {
    std::uint32_t name = 0;
    detail::FrameOwner owner = detail::FrameOwner::user;
  };
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::uint32_t, TextHash, std::equal_to<>> ids_;
  // Views of the analysis' frames, which outlive the table.
  std::unordered_map<std::string_view, Function> functions_;
  std::unordered_map<std::string_view, detail::FrameOwner> modules_;
};

// The tree with every frame, before ordering and pruning: nodes in the
// order they were created, so each parent comes before its children.
struct RawTree {
  std::vector<FlameTree::Node> nodes;
  NameTable names;
  std::uint64_t stacks = 0;
};

RawTree merge_stacks(const Analysis& analysis, FlameWhat what) {
  RawTree raw;
  raw.names.intern(kRootName);
  raw.nodes.push_back(FlameTree::Node{});  // the root: its own parent, name 0
  AddressMap<std::uint32_t> children;      // child_key(parent, name) -> node
  const std::vector<WeightedStack> stacks = weighted_stacks(analysis, what);
  raw.stacks = stacks.size();
  const auto descend = [&](std::uint32_t parent, std::uint32_t name, const OwnedFrame* frame, const WeightedStack& s) {
    bool inserted = false;
    std::uint32_t& child = children.find_or_insert(child_key(parent, name), inserted);
    if (inserted) {
      child = static_cast<std::uint32_t>(raw.nodes.size());
      const FlameFrameKind kind = frame != nullptr ? raw.names.kind(*frame) : FlameFrameKind::unknown;
      raw.nodes.push_back(FlameTree::Node{name, parent, 0, 0, kind});
    }
    FlameTree::Node& node = raw.nodes[child];
    node.bytes += s.bytes;
    node.count += s.count;
    return child;
  };
  for (const WeightedStack& s : stacks) {
    raw.nodes[0].bytes += s.bytes;
    raw.nodes[0].count += s.count;
    const std::vector<OwnedFrame>* frames = s.stack == 0 ? nullptr : analysis.stacks().find(s.stack);
    if (frames == nullptr || frames->empty()) {
      descend(0, raw.names.intern(kNoStackName), nullptr, s);
      continue;
    }
    std::uint32_t node = 0;
    // Stacks are recorded innermost first; a flame graph grows from the outermost.
    for (auto f = frames->rbegin(); f != frames->rend(); ++f) node = descend(node, raw.names.frame(*f), &*f, s);
  }
  return raw;
}

std::string narrower_name(std::uint64_t frames) {
  return "(" + std::to_string(frames) + (frames == 1 ? " narrower frame)" : " narrower frames)");
}

}  // namespace

std::string_view flame_what_name(FlameWhat what) {
  switch (what) {
    case FlameWhat::peak: return "peak";
    case FlameWhat::leaks: return "leaks";
    case FlameWhat::allocated: return "allocated";
  }
  return "peak";
}

std::optional<FlameWhat> parse_flame_what(std::string_view name) {
  for (FlameWhat what : {FlameWhat::peak, FlameWhat::leaks, FlameWhat::allocated}) {
    if (name == flame_what_name(what)) return what;
  }
  return std::nullopt;
}

std::vector<WeightedStack> weighted_stacks(const Analysis& analysis, FlameWhat what) {
  std::vector<WeightedStack> stacks;
  for (const CallSite& site : analysis.sites().all()) {
    WeightedStack s{site.stack, 0, 0};
    switch (what) {
      case FlameWhat::peak:
        s.bytes = site.at_peak_bytes;
        s.count = site.at_peak_count;
        break;
      case FlameWhat::leaks:  // the live set by stack, as Analysis::leaks() groups it
        s.bytes = site.live_bytes;
        s.count = site.live_count;
        break;
      case FlameWhat::allocated:
        s.bytes = site.allocated_bytes;
        s.count = site.allocs;
        break;
    }
    if (s.bytes > 0) stacks.push_back(s);
  }
  std::sort(stacks.begin(), stacks.end(), [](const WeightedStack& a, const WeightedStack& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack;
  });
  return stacks;
}

std::string flame_frame_name(const OwnedFrame& frame) {
  std::string name;
  if (frame.py) {
    // As the report's labels name Python frames: the function, then where
    // ("Trainer.train_step (train.py:42)"): `forward` or `<module>` alone
    // says little.
    name = frame.fn && !frame.fn->empty() ? *frame.fn : std::string("??");
    if (!frame.file.empty()) {
      name += " (";
      name += detail::base_name(frame.file);
      if (frame.line) name += ":" + std::to_string(*frame.line);
      name += ")";
    }
  } else if (frame.fn && !frame.fn->empty()) {
    name = detail::readable_function_name(*frame.fn);
  } else if (!frame.module.empty()) {
    name = std::string(detail::base_name(frame.module)) + "+" + format_hex(frame.off.value_or(frame.ip));
  } else {
    name = frame.ip != 0 ? format_hex(frame.ip) : std::string("??");
  }
  make_foldable(name);
  return name;
}

FlameTree build_flame_tree(const Analysis& analysis, FlameWhat what, double min_fraction) {
  RawTree raw = merge_stacks(analysis, what);
  const std::vector<FlameTree::Node>& all = raw.nodes;
  const std::size_t n = all.size();

  // Children of each node, contiguous (counting sort by parent).
  std::vector<std::uint32_t> first(n + 1, 0), children(n > 0 ? n - 1 : 0);
  for (std::size_t i = 1; i < n; ++i) ++first[all[i].parent + 1];
  for (std::size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  {
    std::vector<std::uint32_t> next(first.begin(), first.end() - 1);
    for (std::size_t i = 1; i < n; ++i) children[next[all[i].parent]++] = static_cast<std::uint32_t>(i);
  }
  // Nodes under each node, itself included: what pruning it leaves out.
  std::vector<std::uint64_t> subtree(n, 1);
  for (std::size_t i = n; i-- > 1;) subtree[all[i].parent] += subtree[i];

  FlameTree tree;
  tree.what = what;
  tree.stacks = raw.stacks;
  tree.total_bytes = all[0].bytes;
  const double threshold = min_fraction > 0 ? min_fraction * static_cast<double>(tree.total_bytes) : 0.0;
  const auto too_narrow = [&](const FlameTree::Node& node) {
    return threshold > 0 && static_cast<double>(node.bytes) < threshold;
  };

  // Only the names of the nodes kept go out.
  std::vector<std::uint32_t> renamed(raw.names.size(), ~std::uint32_t{0});
  NameTable out_names;
  const auto out_name = [&](std::uint32_t raw_name) {
    if (renamed[raw_name] == ~std::uint32_t{0}) renamed[raw_name] = out_names.intern(raw.names[raw_name]);
    return renamed[raw_name];
  };

  // Depth first, each node's children by bytes (most first, ties by name),
  // so every subtree is a contiguous run of nodes; a parent's narrower
  // frames, merged, come last among its children.
  struct Work {
    std::uint32_t node = 0;        // in `all`; unused for a merged node
    std::uint32_t new_parent = 0;  // in tree.nodes
    std::uint64_t merged = 0;      // > 0: the node of this many narrower frames, merged
    std::uint64_t bytes = 0;       // a merged node's figures
    std::uint64_t count = 0;
  };
  std::vector<Work> pending{Work{}};
  std::vector<std::uint32_t> kids;
  while (!pending.empty()) {
    const Work work = pending.back();
    pending.pop_back();
    const auto index = static_cast<std::uint32_t>(tree.nodes.size());
    if (work.merged > 0) {
      tree.nodes.push_back(FlameTree::Node{out_names.intern(narrower_name(work.merged)), work.new_parent, work.bytes,
                                           work.count, FlameFrameKind::unknown});
      continue;
    }
    FlameTree::Node node = all[work.node];
    node.name = out_name(node.name);
    node.parent = work.new_parent;
    tree.nodes.push_back(node);

    kids.assign(children.begin() + first[work.node], children.begin() + first[work.node + 1]);
    std::sort(kids.begin(), kids.end(), [&](std::uint32_t a, std::uint32_t b) {
      if (all[a].bytes != all[b].bytes) return all[a].bytes > all[b].bytes;
      return raw.names[all[a].name] < raw.names[all[b].name];
    });
    // Sorted by bytes: the narrow ones are the tail.
    const auto wide_end = std::find_if(kids.begin(), kids.end(), [&](std::uint32_t k) { return too_narrow(all[k]); });
    if (wide_end != kids.end()) {
      Work merged{0, index, static_cast<std::uint64_t>(kids.end() - wide_end), 0, 0};
      for (auto k = wide_end; k != kids.end(); ++k) {
        merged.bytes += all[*k].bytes;
        merged.count += all[*k].count;
        tree.pruned_nodes += subtree[*k];
      }
      pending.push_back(merged);  // popped after the wide ones: last among them
    }
    for (auto k = wide_end; k != kids.begin();) pending.push_back(Work{*--k, index, 0, 0, 0});
  }
  for (std::uint32_t i = 0; i < out_names.size(); ++i) tree.names.push_back(out_names[i]);
  return tree;
}

}  // namespace cumemtrace::analyzer
