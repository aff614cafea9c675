#include "cumemtrace/analyzer/check.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "cumemtrace/analyzer/growth.h"
#include "cumemtrace/analyzer/units.h"
#include "analyze/report_figures.h"
#include "analyze/site_labels.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;

// A suppression line that names object files, not functions.
constexpr std::string_view kModulePrefix = "module:";
constexpr std::string_view kFilePrefix = "file:";  // and this one source files
constexpr std::string_view kArrow = " \xE2\x86\x90 ";  // " ← " between a label's frames

// ratio: a positive real number, not bounded by 1 (reserved / allocated).
enum class ValueType : std::uint8_t { size, count, fraction, ratio };

struct MetricInfo {
  Metric metric;
  std::string_view name;
  std::string_view alias;
  std::string_view label;
  ValueType type;
};

constexpr std::array<MetricInfo, 8> kMetrics{{
    {Metric::peak_allocated, "peak_allocated", "peak", "peak allocated", ValueType::size},
    {Metric::peak_reserved, "peak_reserved", "reserved", "peak reserved", ValueType::size},
    {Metric::leaked_bytes, "leaked_bytes", "leaked", "leaked", ValueType::size},
    {Metric::leaked_count, "leaked_count", "leaks", "leaked allocations", ValueType::count},
    {Metric::growth, "growth_bytes_per_iteration", "growth", "growth per iteration", ValueType::size},
    {Metric::fragmentation, "fragmentation", "fragmentation", "fragmentation at peak reserved", ValueType::fraction},
    {Metric::ooms, "ooms", "oom", "out-of-memory failures", ValueType::count},
    {Metric::reserved_ratio, "reserved_ratio", "reserved_ratio", "peak reserved / peak allocated", ValueType::ratio},
}};

const MetricInfo& info(Metric m) { return kMetrics[static_cast<std::size_t>(m)]; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string ratio_text(double value, int decimals) {
  char text[80];  // a limit may have 38 digits before the point (units.cpp) and 17 after
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// A ratio limit as the user wrote it: at least 3 decimals (1.250), more
// where 3 would show another number (1.2345 stays 1.2345, not 1.234).
int ratio_decimals(double limit) {
  int decimals = 3;
  while (decimals < 17 && std::strtod(ratio_text(limit, decimals).c_str(), nullptr) != limit) ++decimals;
  return decimals;
}

std::string format_value(ValueType type, std::uint64_t value, double fraction) {
  switch (type) {
    case ValueType::size: return format_bytes(value);
    case ValueType::count: return std::to_string(value);
    case ValueType::fraction: {
      char text[32];
      std::snprintf(text, sizeof text, "%.3f", fraction);
      return text;
    }
    case ValueType::ratio: return ratio_text(fraction, ratio_decimals(fraction));
  }
  return {};
}

std::string_view operator_text(Comparison c) {
  switch (c) {
    case Comparison::at_most: return "<=";
    case Comparison::below: return "<";
    case Comparison::equal: return "==";
  }
  return "?";
}

// The relation that holds when the check fails: 3 GiB > 2 GiB.
std::string_view violated_text(Comparison c) {
  switch (c) {
    case Comparison::at_most: return ">";
    case Comparison::below: return ">=";
    case Comparison::equal: return "!=";
  }
  return "?";
}

template <typename T>
bool holds(Comparison c, T actual, T limit) {
  switch (c) {
    case Comparison::at_most: return actual <= limit;
    case Comparison::below: return actual < limit;
    case Comparison::equal: return actual == limit;
  }
  return false;
}

// An unsigned integer at `key` of `j`, if there is one.
std::optional<std::uint64_t> uint_at(const Json& j, std::string_view key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    if (it != j.end() && it->is_number_integer() && it->get<std::int64_t>() >= 0) {
      return static_cast<std::uint64_t>(it->get<std::int64_t>());
    }
    return std::nullopt;
  }
  return it->get<std::uint64_t>();
}

struct Measured {
  bool available = false;
  bool undefined = false;  // available, but without a value: passes, and says so
  std::uint64_t value = 0;
  double fraction = 0.0;
  bool suppressed_some = false;
  std::string culprit;  // the call site that contributes most, for a failing check's line
};

// A call site's name in the report: its label, else its innermost function.
std::string entry_label(const Json& entry) {
  const auto label = entry.find("label");
  if (label != entry.end() && label->is_string() && !label->get_ref<const std::string&>().empty()) {
    return label->get<std::string>();
  }
  const auto functions = entry.find("functions");
  if (functions != entry.end() && functions->is_array() && !functions->empty() && functions->front().is_string()) {
    return functions->front().get<std::string>();
  }
  return "(no stack captured)";
}

// "from device_alloc ← load_weights", or "with no stack captured".
std::string from_entry(const Json& entry) {
  const std::string label = entry_label(entry);
  return label == "(no stack captured)" ? "with no stack captured" : "from " + label;
}

// "most from device_alloc ← load_weights: 1.00 GiB" for the entry of `list`
// with the largest `key`, skipping what the suppressions cover.
std::string largest_site(const Json& report, const char* list_key, const char* key, bool size,
                         const Suppressions& suppressions, const char* prefix) {
  const auto list = report.find(list_key);
  if (list == report.end() || !list->is_array()) return {};
  const Json* best = nullptr;
  std::uint64_t best_value = 0;
  for (const Json& entry : *list) {
    if (!entry.is_object() || suppressions.suppresses(entry)) continue;
    const std::uint64_t value = uint_at(entry, key).value_or(0);
    if (best == nullptr || value > best_value) best = &entry, best_value = value;
  }
  if (best == nullptr || best_value == 0) return {};
  return std::string(prefix) + from_entry(*best) + ": " +
         (size ? format_bytes(best_value) : std::to_string(best_value) + (best_value == 1 ? " allocation" : " allocations"));
}

// Leaked bytes or count, less the leak groups the suppressions cover.
Measured measure_leaks(const Json& report, const Suppressions& suppressions, bool bytes) {
  Measured m;
  const std::optional<std::uint64_t> total = uint_at(report, bytes ? "leaked_bytes" : "leaked_count");
  if (!total) return m;
  m.available = true;
  m.value = *total;
  if (suppressions.empty()) return m;
  const auto leaks = report.find("leaks");
  if (leaks == report.end() || !leaks->is_array()) return Measured{};  // cannot tell which are known
  for (const Json& group : *leaks) {
    if (!suppressions.suppresses(group)) continue;
    const std::uint64_t part = uint_at(group, bytes ? "bytes" : "count").value_or(0);
    m.value -= std::min(part, m.value);
    m.suppressed_some = true;
  }
  return m;
}

Measured measure_growth(const Json& report, const Suppressions& suppressions) {
  Measured m;
  const auto growth = report.find("growth");
  if (growth != report.end() && growth->is_array()) {
    m.available = true;
    for (const Json& entry : *growth) {
      if (suppressions.suppresses(entry)) {
        m.suppressed_some = true;
        continue;
      }
      m.value = std::max(m.value, uint_at(entry, "bytes_per_iteration").value_or(0));
    }
    return m;
  }
  // Without the list, the summary key will do, unless leaks are to be suppressed.
  if (const auto largest = uint_at(report, "growth_bytes_per_iteration"); largest && suppressions.empty()) {
    m.available = true;
    m.value = *largest;
  }
  return m;
}

Measured measure(const Json& report, Metric metric, const Suppressions& suppressions) {
  Measured m;
  switch (metric) {
    case Metric::leaked_bytes:
      m = measure_leaks(report, suppressions, true);
      m.culprit = largest_site(report, "leaks", "bytes", true, suppressions, "most ");
      return m;
    case Metric::leaked_count:
      m = measure_leaks(report, suppressions, false);
      m.culprit = largest_site(report, "leaks", "count", false, suppressions, "most ");
      return m;
    case Metric::growth:
      m = measure_growth(report, suppressions);
      m.culprit = largest_site(report, "growth", "bytes_per_iteration", true, suppressions, "most ");
      if (!m.culprit.empty()) m.culprit += " per iteration";
      return m;
    case Metric::fragmentation: {
      const auto fragmentation = report.find("fragmentation");
      if (fragmentation == report.end() || !fragmentation->is_object()) return m;
      const auto at_peak = fragmentation->find("at_peak_reserved");
      if (at_peak == fragmentation->end() || !at_peak->is_number()) return m;  // null: nothing reserved
      m.available = true;
      m.fraction = at_peak->get<double>();
      return m;
    }
    case Metric::reserved_ratio: {
      const std::optional<std::uint64_t> allocated = uint_at(report, "peak_allocated");
      const std::optional<std::uint64_t> reserved = uint_at(report, "peak_reserved");
      if (!allocated || !reserved) return m;
      m.available = true;
      // Nothing allocated: no ratio to hold to a limit, and a trace that did
      // nothing is no regression.
      if (*allocated == 0) {
        m.undefined = true;
        return m;
      }
      // Allocations but no segment events: the trace does not record
      // reserved memory (TRACE_FORMAT.md: passthrough mode writes a segment
      // for each allocation), so 0 would pass any limit unchecked.
      if (*reserved == 0) return Measured{};
      // Both this and the limit are correctly rounded quotients of integers
      // (below 2^53 in any real trace, for a limit of a few decimals), so a
      // ratio equal to the limit compares equal and passes `<=`.
      m.fraction = static_cast<double>(*reserved) / static_cast<double>(*allocated);
      return m;
    }
    case Metric::peak_allocated:
    case Metric::peak_reserved:
    case Metric::ooms:
      if (const auto value = uint_at(report, info(metric).name)) {
        m.available = true;
        m.value = *value;
      }
      if (metric == Metric::peak_allocated) {
        m.culprit = largest_site(report, "top_at_peak", "bytes", true, Suppressions{}, "most live at the peak ");
      }
      if (const auto events = report.find("oom_events");
          metric == Metric::ooms && events != report.end() && events->is_array() && !events->empty()) {
        m.culprit = "the first " + from_entry(events->front());
      }
      return m;
  }
  return m;
}

// What a suppression line is matched against: a frame the site's label
// names, with the name the label shows for it (Suppressions in check.h).
struct ShownFrame {
  std::string name;             // as the label shows it: "keep_loss_for_logging", "Trainer.evaluate"
  const Json* frame = nullptr;  // the report's frame; null when only the label's text is known
};

const std::string* text_of(const Json& frame, const char* key) {
  if (!frame.is_object()) return nullptr;
  const auto member = frame.find(key);
  return member != frame.end() && member->is_string() ? &member->get_ref<const std::string&>() : nullptr;
}

bool is_python(const Json& frame) {
  const auto py = frame.find("py");
  return py != frame.end() && py->is_boolean() && py->get<bool>();
}

bool path_matches(std::string_view glob, std::string_view path) {
  return glob_match(glob, detail::base_name(path)) || glob_match(glob, path);
}

// "train.py:61", "libc10_cuda.so+0x1234", "0x7f00…": how a label shows a
// frame without a function name (site_labels.cpp's location()).
std::string frame_location(const Json& frame) {
  if (const std::string* file = text_of(frame, "file"); file != nullptr && !file->empty()) {
    std::string text(detail::base_name(*file));
    if (const std::optional<std::uint64_t> line = uint_at(frame, "line")) text += ":" + std::to_string(*line);
    return text;
  }
  const std::string* module = text_of(frame, "module");
  const std::string* off = text_of(frame, "off");
  if (module != nullptr && !module->empty()) {
    return std::string(detail::base_name(*module)) + "+" + (off != nullptr ? *off : std::string());
  }
  const std::string* ip = text_of(frame, "ip");
  return ip != nullptr ? *ip : std::string("??");
}

// A label's part ("name", "name (where)", or "where" for a frame without a
// name) shows `frame`; its name then, as the label has it.
std::optional<std::string> shown_as(std::string_view part, const Json& frame) {
  if (const std::string* fn = text_of(frame, "fn"); fn != nullptr && !fn->empty()) {
    for (const std::string& name : {detail::short_function_name(*fn), *fn}) {
      if (part == name || (part.starts_with(name) && part.substr(name.size()).starts_with(" ("))) return name;
    }
    return std::nullopt;
  }
  if (part == frame_location(frame) || part == "??") return std::string();
  return std::nullopt;
}

// The frames a leak group's or growth entry's label spans, innermost first:
// from the innermost frame out to the last one the label names, the shared
// helpers it skips between them included; never the callers beyond it.
std::vector<ShownFrame> label_frames(const Json& entry) {
  std::vector<ShownFrame> shown;
  const auto frames_it = entry.find("frames");
  const Json* frames = frames_it != entry.end() && frames_it->is_array() ? &*frames_it : nullptr;
  const std::string* label = text_of(entry, "label");
  if (label == nullptr || label->empty() || *label == detail::kNoStackLabel) {
    // No label (an older report, a hand-written entry): the innermost frame.
    if (frames != nullptr && !frames->empty()) {
      const Json& first = frames->front();
      const std::string* fn = text_of(first, "fn");
      shown.push_back({fn != nullptr ? detail::short_function_name(*fn) : std::string(), &first});
    } else if (const auto functions = entry.find("functions");
               functions != entry.end() && functions->is_array() && !functions->empty() &&
               functions->front().is_string()) {
      shown.push_back({detail::short_function_name(functions->front().get<std::string>()), nullptr});
    }
    return shown;
  }
  std::string_view rest = *label;
  // The caller's tag that makes identical-looking labels unique: " [stack 7]".
  if (const std::size_t tag = rest.rfind(" [stack "); tag != std::string_view::npos && rest.ends_with(']')) {
    rest = rest.substr(0, tag);
  }
  std::size_t next = 0;  // the label's frames come innermost first
  while (true) {
    const std::size_t arrow = rest.find(kArrow);
    const std::string_view part = rest.substr(0, arrow);
    bool found = false;
    for (std::size_t i = next; frames != nullptr && i < frames->size(); ++i) {
      if (std::optional<std::string> name = shown_as(part, (*frames)[i])) {
        // The frames before it that the label skips (a shared helper, the
        // way from Python into native code), by their short names.
        for (std::size_t skipped = next; skipped < i; ++skipped) {
          const std::string* fn = text_of((*frames)[skipped], "fn");
          shown.push_back({fn != nullptr ? detail::short_function_name(*fn) : std::string(), &(*frames)[skipped]});
        }
        shown.push_back({std::move(*name), &(*frames)[i]});
        next = i + 1;
        found = true;
        break;
      }
    }
    if (!found) {
      // Text only: the name before " (where)".
      const std::size_t where = part.rfind(" (");
      shown.push_back({std::string(where != std::string_view::npos && part.ends_with(')') ? part.substr(0, where) : part),
                       nullptr});
    }
    if (arrow == std::string_view::npos) break;
    rest.remove_prefix(arrow + kArrow.size());
  }
  return shown;
}

bool pattern_matches(const Suppressions::Pattern& p, const ShownFrame& f) {
  switch (p.kind) {
    case Suppressions::Kind::function: {
      if (!f.name.empty() && glob_match(p.glob, f.name)) return true;
      const std::string* fn = f.frame != nullptr ? text_of(*f.frame, "fn") : nullptr;
      return fn != nullptr && glob_match(p.glob, *fn);
    }
    case Suppressions::Kind::module: {
      if (f.frame == nullptr) return false;
      // A Python frame's object file is its source file.
      const std::string* module = text_of(*f.frame, is_python(*f.frame) ? "file" : "module");
      return module != nullptr && !module->empty() && path_matches(p.glob, *module);
    }
    case Suppressions::Kind::file: {
      const std::string* file = f.frame != nullptr ? text_of(*f.frame, "file") : nullptr;
      return file != nullptr && !file->empty() && path_matches(p.glob, *file);
    }
  }
  return false;
}

}  // namespace

std::string_view metric_name(Metric m) { return info(m).name; }
std::string_view metric_label(Metric m) { return info(m).label; }

std::string describe_check(const Check& check) {
  const MetricInfo& m = info(check.metric);
  return std::string(m.name) + " " + std::string(operator_text(check.comparison)) + " " +
         format_value(m.type, check.limit, check.fraction_limit);
}

Check make_check(Metric metric, Comparison comparison, std::string_view limit_text, std::string_view option) {
  Check check;
  check.metric = metric;
  check.comparison = comparison;
  const auto bad = [&](const char* expected) {
    return CheckError(std::string(option) + ": '" + std::string(limit_text) + "' is not " + expected);
  };
  switch (info(metric).type) {
    case ValueType::size: {
      const std::optional<std::uint64_t> bytes = parse_size(limit_text);
      if (!bytes) throw bad("a size (bytes, or with a unit: 512MiB, 2GiB, 1.5GB)");
      check.limit = *bytes;
      break;
    }
    case ValueType::count: {
      const std::optional<std::uint64_t> count = parse_count(limit_text);
      if (!count) throw bad("a count (a whole number)");
      check.limit = *count;
      break;
    }
    case ValueType::fraction: {
      const std::optional<double> fraction = parse_fraction(limit_text);
      if (!fraction) throw bad("a fraction between 0 and 1 (0.25 or 25%)");
      check.fraction_limit = *fraction;
      break;
    }
    case ValueType::ratio: {
      // A plain decimal: "125%" would read as 1.25 to some and 125 to others.
      const std::optional<double> ratio =
          limit_text.find('%') == std::string_view::npos ? parse_percent(limit_text) : std::nullopt;
      if (!ratio || !(*ratio > 0.0)) throw bad("a ratio greater than 0 (1.25)");
      check.fraction_limit = *ratio;
      break;
    }
  }
  return check;
}

std::vector<Check> parse_check_list(std::string_view text) {
  std::vector<Check> checks;
  // `--check "$LIMITS"` with LIMITS unset: no check at all would pass silently.
  if (trim(text).empty()) {
    throw CheckError("--check: an empty list checks nothing (an unset variable?); give limits such as "
                     "'peak<=2GiB,leaked==0'");
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) {
      if (comma == text.size() && !checks.empty()) break;  // a trailing comma
      throw CheckError("--check: empty check in '" + std::string(text) + "'");
    }
    const std::size_t op = item.find_first_of("<=>!");
    if (op == std::string_view::npos || op == 0) {
      throw CheckError("--check: '" + std::string(item) + "' is not NAME<=VALUE, NAME<VALUE or NAME==VALUE");
    }
    Comparison comparison = Comparison::below;
    std::size_t op_length = 1;
    if (item.substr(op, 2) == "<=") {
      comparison = Comparison::at_most;
      op_length = 2;
    } else if (item.substr(op, 2) == "==") {
      comparison = Comparison::equal;
      op_length = 2;
    } else if (item[op] != '<') {
      throw CheckError("--check: '" + std::string(item) + "': the comparison must be <=, < or ==");
    }
    const std::string_view name = trim(item.substr(0, op));
    const auto metric = std::find_if(kMetrics.begin(), kMetrics.end(), [name](const MetricInfo& m) {
      return m.name == name || m.alias == name ||
             (m.metric == Metric::fragmentation && name == "fragmentation.at_peak_reserved");
    });
    if (metric == kMetrics.end()) {
      std::string known;
      for (const MetricInfo& m : kMetrics) known += (known.empty() ? "" : ", ") + std::string(m.name);
      throw CheckError("--check: unknown name '" + std::string(name) + "' (known: " + known + ")");
    }
    checks.push_back(make_check(metric->metric, comparison, item.substr(op + op_length),
                                "--check " + std::string(metric->name)));
  }
  return checks;
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matcher with one backtrack point: linear in practice, never
  // exponential, whatever the pattern.
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Suppressions Suppressions::parse(std::string_view text) {
  Suppressions s;
  std::size_t start = 0;
  for (std::size_t number = 1; start < text.size(); ++number) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    Pattern pattern;
    pattern.line = number;
    pattern.written = std::string(line);
    std::string_view glob = line;
    if (line.starts_with(kModulePrefix)) {
      pattern.kind = Kind::module;
      glob = trim(line.substr(kModulePrefix.size()));
    } else if (line.starts_with(kFilePrefix)) {
      pattern.kind = Kind::file;
      glob = trim(line.substr(kFilePrefix.size()));
    }
    if (glob.empty()) continue;  // blank, or a prefix with nothing after it
    pattern.glob = std::string(glob);
    s.patterns_.push_back(std::move(pattern));
  }
  return s;
}

Suppressions Suppressions::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckError("--suppressions: cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  Suppressions s = parse(content.str());
  s.source_ = path;
  return s;
}

bool Suppressions::matches(std::string_view function) const {
  return std::any_of(patterns_.begin(), patterns_.end(), [function](const Pattern& p) {
    return p.kind == Kind::function && glob_match(p.glob, function);
  });
}

bool Suppressions::matches_module(std::string_view module_path) const {
  return std::any_of(patterns_.begin(), patterns_.end(),
                     [&](const Pattern& p) { return p.kind == Kind::module && path_matches(p.glob, module_path); });
}

std::vector<std::size_t> Suppressions::matching(const Json& entry) const {
  std::vector<std::size_t> found;
  if (patterns_.empty() || !entry.is_object()) return found;
  const std::vector<ShownFrame> shown = label_frames(entry);
  for (std::size_t i = 0; i < patterns_.size(); ++i) {
    const Pattern& p = patterns_[i];
    if (std::any_of(shown.begin(), shown.end(), [&p](const ShownFrame& f) { return pattern_matches(p, f); })) {
      found.push_back(i);
    }
  }
  return found;
}

bool Suppressions::suppresses(const Json& entry) const { return !matching(entry).empty(); }

std::vector<SuppressionUse> suppression_uses(const Json& report, const Suppressions& suppressions) {
  std::vector<SuppressionUse> uses(suppressions.patterns().size());
  for (std::size_t i = 0; i < uses.size(); ++i) uses[i].pattern = i;
  if (uses.empty()) return uses;
  if (const auto leaks = report.find("leaks"); leaks != report.end() && leaks->is_array()) {
    for (const Json& group : *leaks) {
      for (std::size_t i : suppressions.matching(group)) {
        uses[i].leaked_count += uint_at(group, "count").value_or(0);
        uses[i].leaked_bytes += uint_at(group, "bytes").value_or(0);
      }
    }
  }
  if (const auto growth = report.find("growth"); growth != report.end() && growth->is_array()) {
    for (const Json& entry : *growth) {
      for (std::size_t i : suppressions.matching(entry)) {
        ++uses[i].growth_sites;
        uses[i].growth_bytes_per_iteration += uint_at(entry, "bytes_per_iteration").value_or(0);
      }
    }
  }
  return uses;
}

std::string describe_use(const SuppressionUse& use, const Suppressions& suppressions) {
  const Suppressions::Pattern& p = suppressions.patterns().at(use.pattern);
  std::string text = "suppressed by '" + p.written + "' (line " + std::to_string(p.line) + "): ";
  if (!use.matched()) return text + "nothing";
  if (use.leaked_count + use.leaked_bytes > 0) {
    text += std::to_string(use.leaked_count) + (use.leaked_count == 1 ? " leaked allocation, " : " leaked allocations, ") +
            format_bytes(use.leaked_bytes);
  }
  if (use.growth_sites > 0) {
    if (use.leaked_count + use.leaked_bytes > 0) text += "; ";
    text += std::to_string(use.growth_sites) + (use.growth_sites == 1 ? " growing site, " : " growing sites, ") +
            format_bytes(use.growth_bytes_per_iteration) + " per iteration";
  }
  return text;
}

std::string incomplete_reason(const Json& report) {
  std::vector<std::string> reasons;
  const auto flag = [&report](const char* key) {
    const auto it = report.find(key);
    return it != report.end() && it->is_boolean() && it->get<bool>();
  };
  const auto end = report.find("end");
  const bool has_end = end != report.end() && end->is_object();
  // From the reader's own keys (REPORT_FORMAT.md); a hand-made report without them is taken as it is.
  if (const auto said = report.find("has_end"); said != report.end() && said->is_boolean() && !said->get<bool>()) {
    reasons.emplace_back("the trace has no end line (the program was cut short)");
  } else if (flag("truncated")) {
    reasons.emplace_back("the trace's last line is cut off (the program was cut short)");
  }
  if (has_end) {
    if (const std::uint64_t dropped = uint_at(*end, "dropped").value_or(0); dropped > 0) {
      reasons.push_back("the writer dropped " + std::to_string(dropped) + (dropped == 1 ? " event" : " events") +
                        " (leaks and peaks may be off)");
    }
  }
  if (const std::uint64_t bad = uint_at(report, "bad_lines").value_or(0); bad > 0) {
    reasons.push_back(std::to_string(bad) + (bad == 1 ? " line" : " lines") + " could not be read");
  }
  // TRACE_FORMAT.md: `killed` is an end written afterwards for a process
  // that died by SIGKILL or the OOM killer; what it held then is no leak.
  if (has_end && end->value("reason", std::string()) == "killed") {
    reasons.emplace_back("the program was killed and its trace completed afterwards (what was live then is no leak)");
  }
  std::string text;
  for (const std::string& r : reasons) text += (text.empty() ? "" : "; ") + r;
  return text;
}

std::string unassessed_growth_reason(const Json& report) {
  const auto iterations = report.find("iterations");
  if (iterations == report.end() || !iterations->is_object()) return "";  // an older report: cannot tell
  if (iterations->value("source", std::string()) != "none") return "";
  if (const auto marker = iterations->find("marker"); marker != iterations->end() && marker->is_string()) {
    return unassessed_marker_reason(marker->get<std::string>(), iterations->value("marker_count", std::uint64_t{0}));
  }
  return "no iterations found (no mark repeats 3 times, no period in any thread's allocations)";
}

std::vector<CheckResult> evaluate_checks(const Json& report, const std::vector<Check>& checks,
                                         const Suppressions& suppressions, bool allow_unassessed) {
  std::vector<CheckResult> results;
  const std::string unassessed = unassessed_growth_reason(report);
  for (const Check& check : checks) {
    const MetricInfo& m = info(check.metric);
    CheckResult r;
    r.check = check;
    r.limit = format_value(m.type, check.limit, check.fraction_limit);
    // Growth that could not be assessed would read as 0 and pass any limit.
    if (check.metric == Metric::growth && !unassessed.empty()) {
      r.status = allow_unassessed ? CheckResult::Status::pass : CheckResult::Status::fail;
      r.undefined = allow_unassessed;
      r.message = std::string(m.label) + " not assessed: " + unassessed + "; " +
                  std::string(allow_unassessed ? kAllowedUnassessedNote : kUnassessedHint);
      results.push_back(std::move(r));
      continue;
    }
    const Measured measured = measure(report, check.metric, suppressions);
    if (!measured.available) {
      r.status = CheckResult::Status::unavailable;
      r.message = std::string(m.label) + " not available in this trace";
      results.push_back(std::move(r));
      continue;
    }
    if (measured.undefined) {
      r.status = CheckResult::Status::pass;
      r.undefined = true;
      r.message = std::string(m.label) + " undefined: nothing was allocated";
      results.push_back(std::move(r));
      continue;
    }
    r.actual = format_value(m.type, measured.value, measured.fraction);
    const bool ok = m.type == ValueType::fraction || m.type == ValueType::ratio
                        ? holds(check.comparison, measured.fraction, check.fraction_limit)
                        : holds(check.comparison, measured.value, check.limit);
    if (m.type == ValueType::ratio) {
      // As many decimals as the limit shows, and on a failure as many more
      // as it takes not to print "1.400 > 1.400".
      int decimals = ratio_decimals(check.fraction_limit);
      r.actual = ratio_text(measured.fraction, decimals);
      while (!ok && measured.fraction != check.fraction_limit &&
             r.actual == ratio_text(check.fraction_limit, decimals) && decimals < 17) {
        r.actual = ratio_text(measured.fraction, ++decimals);
      }
    }
    r.status = ok ? CheckResult::Status::pass : CheckResult::Status::fail;
    r.message = std::string(m.label) + " " + r.actual +
                (measured.suppressed_some ? " (after suppressions)" : "") + " " +
                std::string(ok ? operator_text(check.comparison) : violated_text(check.comparison)) + " " + r.limit;
    // A failing line says where to look.
    if (!ok && !measured.culprit.empty()) r.message += " (" + measured.culprit + ")";
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace cumemtrace::analyzer
