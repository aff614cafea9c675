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

#include "cumemtrace/analyzer/units.h"
#include "analyze/report_figures.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;

// A suppression line that names object files, not functions.
constexpr std::string_view kModulePrefix = "module:";

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
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.starts_with(kModulePrefix)) {
      const std::string_view glob = trim(line.substr(kModulePrefix.size()));
      if (!glob.empty()) s.module_patterns_.emplace_back(glob);
    } else if (!line.empty()) {
      s.patterns_.emplace_back(line);
    }
  }
  return s;
}

Suppressions Suppressions::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckError("--suppressions: cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  return parse(content.str());
}

bool Suppressions::matches(std::string_view function) const {
  return std::any_of(patterns_.begin(), patterns_.end(),
                     [function](const std::string& pattern) { return glob_match(pattern, function); });
}

bool Suppressions::matches_module(std::string_view module_path) const {
  const std::string_view file_name = detail::base_name(module_path);
  return std::any_of(module_patterns_.begin(), module_patterns_.end(), [&](const std::string& pattern) {
    return glob_match(pattern, file_name) || glob_match(pattern, module_path);
  });
}

bool Suppressions::suppresses(const Json& entry) const {
  if (empty() || !entry.is_object()) return false;
  // The frame's member `key` as a string, or nothing.
  auto text_of = [](const Json& frame, const char* key) -> const std::string* {
    if (!frame.is_object()) return nullptr;
    const auto member = frame.find(key);
    return member != frame.end() && member->is_string() ? &member->get_ref<const std::string&>() : nullptr;
  };
  const auto frames = entry.find("frames");
  const bool has_frames = frames != entry.end() && frames->is_array();
  // A Python frame's object file is its source file: `module:train.py`,
  // `module:*/site-packages/*` reach Python frames as `module:libc10*` native ones.
  const auto is_python = [](const Json& frame) {
    const auto py = frame.find("py");
    return py != frame.end() && py->is_boolean() && py->get<bool>();
  };
  if (!module_patterns_.empty() && has_frames &&
      std::any_of(frames->begin(), frames->end(), [&](const Json& frame) {
        if (!frame.is_object()) return false;
        const std::string* module = text_of(frame, is_python(frame) ? "file" : "module");
        return module != nullptr && matches_module(*module);
      })) {
    return true;
  }
  if (patterns_.empty()) return false;
  const auto functions = entry.find("functions");
  if (functions != entry.end() && functions->is_array()) {
    return std::any_of(functions->begin(), functions->end(),
                       [this](const Json& fn) { return fn.is_string() && matches(fn.get_ref<const std::string&>()); });
  }
  if (!has_frames) return false;
  return std::any_of(frames->begin(), frames->end(), [&](const Json& frame) {
    const std::string* fn = text_of(frame, "fn");
    return fn != nullptr && matches(*fn);
  });
}

std::vector<CheckResult> evaluate_checks(const Json& report, const std::vector<Check>& checks,
                                         const Suppressions& suppressions) {
  std::vector<CheckResult> results;
  for (const Check& check : checks) {
    const MetricInfo& m = info(check.metric);
    CheckResult r;
    r.check = check;
    r.limit = format_value(m.type, check.limit, check.fraction_limit);
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
