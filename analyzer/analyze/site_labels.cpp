#include "analyze/site_labels.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <tuple>

#include "cumemtrace/analyzer/report.h"
#include "analyze/report_figures.h"
#include "analyze/stack_folding.h"

namespace cumemtrace::analyzer::detail {

namespace {

constexpr std::string_view kArrow = " \xE2\x86\x90 ";  // " ← ": called from
constexpr std::string_view kFolded = "<\xE2\x80\xA6>";  // "<…>"
constexpr std::string_view kAnonymous = "(anonymous namespace)::";

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool ends_with_token(std::string_view s, std::string_view token) {
  return s.size() >= token.size() && s.substr(s.size() - token.size()) == token &&
         (s.size() == token.size() || !is_identifier_char(s[s.size() - token.size() - 1]));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// "f(int) const &" -> "f(int)"; GCC's " [clone .isra.0]" goes too.
std::string_view without_trailing_qualifiers(std::string_view s) {
  for (bool changed = true; changed;) {
    changed = false;
    s = trim(s);
    if (s.ends_with(']')) {
      if (const std::size_t at = s.rfind(" [clone "); at != std::string_view::npos) {
        s = s.substr(0, at);
        changed = true;
        continue;
      }
    }
    for (std::string_view q : {"const", "volatile", "noexcept", "&&", "&"}) {
      if (q.front() == '&' ? s.ends_with(q) : ends_with_token(s, q)) {
        s.remove_suffix(q.size());
        changed = true;
        break;
      }
    }
  }
  return s;
}

// Where `operator` starts as a word in `s`, else npos: what follows it
// (operator<, operator(), operator new) is not a template nor a parameter list.
std::size_t operator_position(std::string_view s) {
  for (std::size_t at = s.find("operator"); at != std::string_view::npos; at = s.find("operator", at + 1)) {
    const std::size_t end = at + 8;
    if ((at == 0 || !is_identifier_char(s[at - 1])) && (end == s.size() || !is_identifier_char(s[end]))) return at;
  }
  return std::string_view::npos;
}

// The text after the last space outside <>, () and {}: the return type goes.
std::string_view without_return_type(std::string_view s) {
  int depth = 0;
  std::size_t cut = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<' || c == '(' || c == '{' || c == '[') ++depth;
    else if ((c == '>' || c == ')' || c == '}' || c == ']') && depth > 0) --depth;
    else if (c == ' ' && depth == 0) cut = i + 1;
  }
  return s.substr(cut);
}

// Each outermost template argument list that follows a name becomes <…>;
// "<module>" (Python) follows none and stays.
std::string fold_templates(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' && i > 0 && is_identifier_char(s[i - 1])) {
      int depth = 0;
      std::size_t j = i;
      for (; j < s.size(); ++j) {
        if (s[j] == '<') ++depth;
        else if (s[j] == '>' && --depth == 0) break;
      }
      if (j < s.size()) {
        out += kFolded;
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// "f(int)::{lambda(auto:1)#1}" -> "f::{lambda#1}": the parameter lists of
// enclosing functions and lambdas, which say where but take a line.
std::string drop_inner_parameters(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(' && i > 0 && (is_identifier_char(s[i - 1]) || s[i - 1] == '>')) {
      int depth = 0;
      std::size_t j = i;
      for (; j < s.size(); ++j) {
        if (s[j] == '(') ++depth;
        else if (s[j] == ')' && --depth == 0) break;
      }
      if (j < s.size()) {
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// "operator()<Kernel<float>>" -> "operator()<…>": the operator's symbol
// stays, template arguments after it fold.
std::string fold_operator(std::string_view s) {
  std::size_t end = 8;  // past "operator"
  if (s.substr(end).starts_with("()") || s.substr(end).starts_with("[]")) {
    end += 2;
  } else {
    while (end < s.size() && s[end] == ' ') ++end;
    const bool word = end < s.size() && is_identifier_char(s[end]);
    while (end < s.size() && (word ? is_identifier_char(s[end]) || s[end] == ':' || s[end] == ' '
                                   : std::string_view("+-*/%^&|~!=<>,").find(s[end]) != std::string_view::npos)) {
      ++end;
    }
  }
  std::string out(s.substr(0, end));
  if (end < s.size() && s[end] == '<' && s.back() == '>') out += kFolded;
  else out += s.substr(end);
  return out;
}

std::string erase_all(std::string s, std::string_view what) {
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at)) s.erase(at, what.size());
  return s;
}

// Frames are the same when every part that identifies them is.
auto frame_key(const OwnedFrame& f) {
  return std::tie(f.py, f.fn, f.file, f.line, f.module);
}

bool frame_less(const OwnedFrame& a, const OwnedFrame& b) {
  if (frame_key(a) != frame_key(b)) return frame_key(a) < frame_key(b);
  return a.off.value_or(a.ip) < b.off.value_or(b.ip);
}

bool same_frame(const OwnedFrame& a, const OwnedFrame& b) {
  return frame_key(a) == frame_key(b) && a.off.value_or(a.ip) == b.off.value_or(b.ip);
}

bool same_stack(const std::vector<OwnedFrame>& a, const std::vector<OwnedFrame>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), same_frame);
}

std::size_t common_prefix(const std::vector<OwnedFrame>& a, const std::vector<OwnedFrame>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && same_frame(a[n], b[n])) ++n;
  return n;
}

// "model.py:42" (a Python frame or a native one with its line), "model.py"
// (a Python frame whose line is unknown), "train+0x1b136", "0x7f3a00001234";
// "" when nothing is known.
std::string location(const OwnedFrame& f) {
  if (!f.file.empty()) {
    std::string text(base_name(f.file));
    if (f.line) text += ":" + std::to_string(*f.line);
    return text;
  }
  if (!f.module.empty()) return std::string(base_name(f.module)) + "+" + format_hex(f.off.value_or(f.ip));
  return f.ip != 0 ? format_hex(f.ip) : std::string();
}

// The first frame from `depth` outwards that is the user's, else `depth`:
// where two stacks part inside a framework (CPython's evaluation loop at
// another address, another dispatch template), the program's own caller
// past it says more ("device_alloc ← train_step (train.py:42)"). Labels
// that then read alike grow as any others do.
// The innermost frame, when it decides, names the site alone.
std::size_t first_user_frame(const std::vector<OwnedFrame>& frames, std::size_t depth) {
  if (depth == 0) return 0;
  for (std::size_t i = depth; i < frames.size(); ++i) {
    if (frame_owner(frames[i]) == FrameOwner::user) return i;
  }
  return depth;
}

// Where a label starts: the innermost frame, except in a stack whose
// innermost frames are the way from Python into native code (libffi,
// ctypes, CPython's call machinery): there the innermost Python frame,
// which is what the program asked from ("device_alloc (train.py:21) ←
// train_step (train.py:42)", not "libffi.so.8+0x6f7a ← …").
std::size_t python_call_head(const std::vector<OwnedFrame>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].py) return i;
    const FrameOwner owner = frame_owner(frames[i]);
    if (owner != FrameOwner::libffi && owner != FrameOwner::cpython) return 0;
  }
  return 0;
}

// How much a label shows; raised only for labels that would collide.
enum Level : int {
  kNames = 0,        // innermost ← deciding frame; file:line where known
  kLocations = 1,    // the same frames, each with its location
  kParting = 2,      // ... and the frames where it parts from the stacks it still read like
  kBranches = 3,     // every frame where the stack parts from another
  kFullNames = 4,    // ... with full function names
  kTagged = 5,       // ... and the caller's tag
};

std::string frame_text(const OwnedFrame& f, bool with_location, bool full_name) {
  const std::string name = !f.fn ? std::string() : full_name ? *f.fn : short_function_name(*f.fn);
  // A Python function is named by its file as much as by its name
  // (`forward`, `<module>`), so a Python frame always shows it.
  const bool line_known = !f.file.empty() && (f.line || f.py);
  const std::string where = with_location || line_known || name.empty() ? location(f) : std::string();
  if (name.empty()) return where.empty() ? std::string("??") : where;
  return where.empty() ? name : name + " (" + where + ")";
}

struct Distinct {
  const std::vector<OwnedFrame>* frames = nullptr;
  std::size_t head = 0;              // the frame the label starts with (python_call_head)
  std::size_t deciding = 0;          // first frame no other stack shares with this one (with all before it)
  std::vector<std::size_t> parting;   // depths where it parts from the stacks its label collided with
  std::vector<std::size_t> branches;  // every depth where it parts from another stack, ascending
  std::string tag;
  int level = kNames;
};

std::string render(const Distinct& d, bool has_tag) {
  const std::vector<OwnedFrame>& frames = *d.frames;
  const bool located = d.level >= kLocations;
  const bool full = d.level >= kFullNames;
  // The innermost frame's place matters only where it decides: a frame the
  // stack shares with another (the helper) has the same place in both.
  std::vector<std::size_t> shown;
  if (d.level >= kBranches) {
    shown = d.branches;
  } else {
    if (d.level >= kParting) shown = d.parting;
    shown.push_back(d.deciding);
  }
  const bool first_decides = std::find(shown.begin(), shown.end(), d.head) != shown.end();
  std::string label = frame_text(frames[d.head], located && first_decides, full);
  std::sort(shown.begin(), shown.end());
  shown.erase(std::unique(shown.begin(), shown.end()), shown.end());
  for (std::size_t depth : shown) {
    if (depth <= d.head || depth >= frames.size()) continue;
    label += kArrow;
    label += frame_text(frames[depth], located, full);
  }
  if (d.level >= kTagged && has_tag) label += " [" + d.tag + "]";
  return label;
}

}  // namespace

std::string short_function_name(std::string_view name) {
  std::string_view s = without_trailing_qualifiers(name);
  if (s.empty()) return std::string(name);
  const std::size_t op_at = operator_position(s);
  // The parameter list: the parentheses that close the name, matched backwards.
  if (s.back() == ')' && (op_at == std::string_view::npos || s.size() > op_at + 10)) {
    int depth = 0;
    std::size_t open = std::string_view::npos;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      else if (s[i] == '(' && --depth == 0) {
        open = i;
        break;
      }
    }
    if (open == std::string_view::npos || open == 0) return std::string(name);
    s = trim(s.substr(0, open));
  }
  // Without a parameter list the name is not a C++ signature (a C or
  // Python name, or text from elsewhere): nothing to take away.
  if (s.size() == without_trailing_qualifiers(name).size()) return erase_all(fold_templates(s), kAnonymous);
  std::string_view head = s, tail;
  if (const std::size_t at = operator_position(s); at != std::string_view::npos) {
    head = s.substr(0, at);
    tail = s.substr(at);
  }
  const std::string qualified = erase_all(std::string(without_return_type(head)), kAnonymous);
  std::string shortened = fold_templates(drop_inner_parameters(qualified));
  if (!tail.empty()) shortened += fold_operator(tail);
  if (shortened.empty()) return std::string(name);
  return shortened;
}

std::vector<std::string> label_call_sites(const std::vector<const std::vector<OwnedFrame>*>& stacks,
                                          const std::vector<std::string>& tags) {
  std::vector<std::string> labels(stacks.size(), std::string(kNoStackLabel));
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < stacks.size(); ++i) {
    if (stacks[i] != nullptr && !stacks[i]->empty()) order.push_back(i);
  }
  const auto stack_less = [&](std::size_t a, std::size_t b) {
    return std::lexicographical_compare(stacks[a]->begin(), stacks[a]->end(), stacks[b]->begin(), stacks[b]->end(),
                                        frame_less);
  };
  std::sort(order.begin(), order.end(), stack_less);

  // Sorted, the stack that shares the longest prefix with a stack is next
  // to it; identical stacks are one entry.
  std::vector<Distinct> distinct;
  std::vector<std::vector<std::size_t>> members;
  for (std::size_t i : order) {
    if (distinct.empty() || !same_stack(*distinct.back().frames, *stacks[i])) {
      Distinct d;
      d.frames = stacks[i];
      if (i < tags.size()) d.tag = tags[i];
      distinct.push_back(std::move(d));
      members.emplace_back();
    }
    members.back().push_back(i);
  }
  const std::size_t n = distinct.size();
  std::vector<std::size_t> shared(n > 0 ? n - 1 : 0);  // common prefix of entries j and j+1
  for (std::size_t j = 0; j + 1 < n; ++j) shared[j] = common_prefix(*distinct[j].frames, *distinct[j + 1].frames);
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t before = j > 0 ? shared[j - 1] : 0;
    const std::size_t after = j + 1 < n ? shared[j] : 0;
    distinct[j].head = python_call_head(*distinct[j].frames);
    distinct[j].deciding = first_user_frame(*distinct[j].frames, std::max({before, after, distinct[j].head}));
  }

  // Every depth where entry j parts from another: the running minima of the
  // shared prefixes, walking away from j on both sides. Needed only for
  // labels that collide, so computed only for them.
  const auto branches = [&](std::size_t j) {
    std::vector<std::size_t> depths;
    std::size_t m = SIZE_MAX;
    for (std::size_t k = j; k-- > 0 && m > 0;) depths.push_back(m = std::min(m, shared[k]));
    m = SIZE_MAX;
    for (std::size_t k = j; k + 1 < n && m > 0; ++k) depths.push_back(m = std::min(m, shared[k]));
    std::sort(depths.begin(), depths.end());
    depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
    return depths;
  };

  const bool has_tags = !tags.empty();
  const int top = has_tags ? kTagged : kFullNames;
  std::vector<std::string> text(n);
  for (bool raised = true; raised;) {
    raised = false;
    std::map<std::string, std::vector<std::size_t>> by_label;
    for (std::size_t j = 0; j < n; ++j) {
      text[j] = render(distinct[j], has_tags);
      by_label[text[j]].push_back(j);
    }
    for (const auto& [label, same] : by_label) {
      if (same.size() < 2) continue;
      for (std::size_t j : same) {
        Distinct& d = distinct[j];
        if (d.level >= top) continue;
        if (++d.level == kParting) {
          for (std::size_t other : same) {
            if (other != j) d.parting.push_back(common_prefix(*d.frames, *distinct[other].frames));
          }
        } else if (d.level == kBranches) {
          d.branches = branches(j);
        }
        raised = true;
      }
    }
  }
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i : members[j]) labels[i] = text[j];
  }
  return labels;
}

SiteLabels::SiteLabels(const Analysis& analysis) {
  std::vector<std::uint64_t> ids;
  for (const CallSite& site : analysis.sites().all()) ids.push_back(site.stack);
  for (const OomRecord& oom : analysis.oom_records()) ids.push_back(oom.stack);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<const std::vector<OwnedFrame>*> stacks;
  std::vector<std::string> tags;
  for (std::uint64_t id : ids) {
    stacks.push_back(id == 0 ? nullptr : analysis.stacks().find(id));
    tags.push_back("stack " + std::to_string(id));
  }
  std::vector<std::string> labels = label_call_sites(stacks, tags);
  for (std::size_t i = 0; i < ids.size(); ++i) labels_.emplace(ids[i], std::move(labels[i]));
}

std::string SiteLabels::operator()(std::uint64_t stack) const {
  if (stack == 0) return std::string(kNoStackLabel);
  // A stack id used by an allocation but never defined by a `stack` line
  // has no frames, so no label of its own.
  if (const auto it = labels_.find(stack); it != labels_.end() && it->second != kNoStackLabel) return it->second;
  return "(stack " + std::to_string(stack) + ", not in the trace)";
}

}  // namespace cumemtrace::analyzer::detail
