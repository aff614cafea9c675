#include "cumemtrace/analyzer/diff.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

#include "cumemtrace/analyzer/check.h"
#include "cumemtrace/analyzer/units.h"
#include "analyze/report_figures.h"
#include "analyze/site_labels.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;

struct FigureSpec {
  const char* key;
  const char* label;
  bool is_size;
};

constexpr FigureSpec kTotals[] = {
    {"peak_allocated", "peak allocated", true},
    {"peak_reserved", "peak reserved", true},
    {"leaked_bytes", "leaked", true},
    {"leaked_count", "leaked allocations", false},
    {"growth_bytes_per_iteration", "growth per iteration", true},
    {"ooms", "out-of-memory failures", false},
    {"allocs", "allocations", false},
    {"frees", "frees", false},
};
constexpr FigureSpec kDeviceFigures[] = {
    {"peak_allocated", "peak allocated", true},
    {"peak_reserved", "peak reserved", true},
    {"leaked_bytes", "leaked", true},
};

std::optional<std::uint64_t> uint_at(const Json& j, const std::string& key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(it->get<std::int64_t>());
  return std::nullopt;
}

DiffFigure figure(const FigureSpec& spec, const Json& base, const Json& next) {
  return DiffFigure{spec.key, spec.label, spec.is_size, uint_at(base, spec.key), uint_at(next, spec.key)};
}

// A site's identity: the stack's function names, innermost first; a frame
// without a name is its module and offset.
std::vector<std::string> site_functions(const Json& entry) {
  std::vector<std::string> names;
  if (const auto functions = entry.find("functions"); functions != entry.end() && functions->is_array()) {
    for (const Json& fn : *functions) {
      if (fn.is_string()) names.push_back(fn.get<std::string>());
    }
    return names;
  }
  const auto frames = entry.find("frames");
  if (frames == entry.end() || !frames->is_array()) return names;
  for (const Json& frame : *frames) {
    if (!frame.is_object()) continue;
    const auto fn = frame.find("fn");
    if (fn != frame.end() && fn->is_string()) {
      names.push_back(fn->get<std::string>());
    } else {
      const std::string module = frame.value("module", std::string("?"));
      names.push_back(module + "+" + frame.value("off", frame.value("ip", std::string("?"))));
    }
  }
  return names;
}

// The list at `key` by site, bytes and counts summed per site; nullopt if
// the report has no such list.
std::optional<std::map<std::vector<std::string>, std::pair<std::uint64_t, std::uint64_t>>> sites_of(
    const Json& report, const char* key) {
  const auto list = report.find(key);
  if (list == report.end() || !list->is_array()) return std::nullopt;
  std::map<std::vector<std::string>, std::pair<std::uint64_t, std::uint64_t>> sites;
  for (const Json& entry : *list) {
    if (!entry.is_object()) continue;
    auto& [bytes, count] = sites[site_functions(entry)];
    bytes += uint_at(entry, "bytes").value_or(0);
    count += uint_at(entry, "count").value_or(0);
  }
  return sites;
}

std::optional<std::vector<SiteChange>> site_changes(const Json& base, const Json& next, const char* key,
                                                    std::size_t max_sites) {
  const auto before = sites_of(base, key);
  const auto after = sites_of(next, key);
  if (!before || !after) return std::nullopt;
  std::map<std::vector<std::string>, SiteChange> merged;
  for (const auto& [functions, figures] : *before) {
    SiteChange& c = merged[functions];
    c.functions = functions;
    std::tie(c.base_bytes, c.base_count) = figures;
  }
  for (const auto& [functions, figures] : *after) {
    SiteChange& c = merged[functions];
    c.functions = functions;
    std::tie(c.next_bytes, c.next_count) = figures;
  }
  std::vector<SiteChange> changes;
  for (auto& [functions, c] : merged) {
    if (c.base_bytes != c.next_bytes || c.base_count != c.next_count) changes.push_back(std::move(c));
  }
  // Largest change first, whichever the direction; then by name, for a stable order.
  std::stable_sort(changes.begin(), changes.end(), [](const SiteChange& a, const SiteChange& b) {
    return std::llabs(a.change()) > std::llabs(b.change());
  });
  if (changes.size() > max_sites) changes.resize(max_sites);
  return changes;
}

// The frames a label shows for a site matched by its function names: the
// names, and for a Python frame its file's base name (`forward (model.py)`:
// lines move between two versions of a program, files seldom do). From the
// report's `frames` where they name the same functions, else names alone.
std::vector<OwnedFrame> label_frames(const Json& entry, const std::vector<std::string>& functions) {
  std::vector<OwnedFrame> frames;
  if (const auto list = entry.find("frames"); list != entry.end() && list->is_array()) {
    for (const Json& frame : *list) {
      if (!frame.is_object()) continue;
      const auto fn = frame.find("fn");
      if (fn == frame.end() || !fn->is_string()) continue;
      OwnedFrame& f = frames.emplace_back();
      f.fn = fn->get<std::string>();
      const auto py = frame.find("py");
      f.py = py != frame.end() && py->is_boolean() && py->get<bool>();
      if (f.py) f.file = std::string(detail::base_name(frame.value("file", std::string())));
    }
  }
  const bool same = frames.size() == functions.size() &&
                    std::equal(frames.begin(), frames.end(), functions.begin(),
                               [](const OwnedFrame& f, const std::string& name) { return *f.fn == name; });
  if (!same) {
    frames.clear();
    for (const std::string& fn : functions) frames.emplace_back().fn = fn;
  }
  return frames;
}

// Labels that tell apart every site of both reports (a site is its function
// names here, so the labeller sees frames that are names alone, and the
// files of Python frames).
void label_sites(TraceDiff& diff, const Json& base, const Json& next) {
  std::map<std::vector<std::string>, std::vector<OwnedFrame>> identities;
  for (const Json* report : {&base, &next}) {
    for (const char* key : {"leaks", "top_at_peak"}) {
      const auto list = report->find(key);
      if (list == report->end() || !list->is_array()) continue;
      for (const Json& entry : *list) {
        if (!entry.is_object()) continue;
        std::vector<std::string> functions = site_functions(entry);
        if (!identities.contains(functions)) {
          std::vector<OwnedFrame> frames = label_frames(entry, functions);
          identities.emplace(std::move(functions), std::move(frames));
        }
      }
    }
  }
  std::vector<std::vector<std::string>> names;
  std::vector<std::vector<OwnedFrame>> stacks;
  for (auto& [functions, frames] : identities) {
    names.push_back(functions);
    stacks.push_back(std::move(frames));
  }
  std::vector<const std::vector<OwnedFrame>*> pointers;
  for (const auto& frames : stacks) pointers.push_back(&frames);
  const std::vector<std::string> labels = detail::label_call_sites(pointers);
  std::map<std::vector<std::string>, std::string> label_of;
  for (std::size_t i = 0; i < names.size(); ++i) label_of.emplace(std::move(names[i]), labels[i]);
  const auto apply = [&](std::vector<SiteChange>& changes) {
    for (SiteChange& c : changes) c.label = label_of[c.functions];
  };
  apply(diff.leaked_sites);
  if (diff.peak_sites) apply(*diff.peak_sites);
}

std::string signed_bytes(std::int64_t change) {
  if (change == 0) return "0 B";
  const std::uint64_t magnitude = change < 0 ? 0 - static_cast<std::uint64_t>(change) : static_cast<std::uint64_t>(change);
  // Appended rather than "-" + string: GCC 12 at -O3 warns (-Wrestrict) on that.
  std::string text(1, change < 0 ? '-' : '+');
  text += format_bytes(magnitude);
  return text;
}

std::string value_text(const std::optional<std::uint64_t>& v, bool is_size) {
  if (!v) return "n/a";
  return is_size ? format_bytes(*v) : std::to_string(*v);
}

// "+184.00 KiB (+4.7%)", "+3 (new)", "0", "n/a".
std::string change_text(const DiffFigure& f) {
  if (!f.base || !f.next) return "n/a";
  const std::int64_t change = static_cast<std::int64_t>(*f.next - *f.base);
  std::string text = f.is_size ? signed_bytes(change) : std::string(change > 0 ? "+" : "");
  if (!f.is_size) text += std::to_string(change);
  if (change == 0) return text;
  if (*f.base == 0) return text + " (new)";
  // A change below 0.1% keeps two decimals: "+20.79 MiB (+0.0%)" reads as no change.
  const double ratio = 100.0 * static_cast<double>(change) / static_cast<double>(*f.base);
  char percent[32];
  if (ratio > -0.005 && ratio < 0.005) std::snprintf(percent, sizeof percent, " (%s0.01%%)", change > 0 ? "<+" : ">-");
  else std::snprintf(percent, sizeof percent, ratio > -0.1 && ratio < 0.1 ? " (%+.2f%%)" : " (%+.1f%%)", ratio);
  return text + percent;
}

void append_figures(std::string& out, const std::vector<DiffFigure>& figures, const char* indent) {
  char line[256];
  for (const DiffFigure& f : figures) {
    std::snprintf(line, sizeof line, "%s%-24s %14s %14s   %s\n", indent, f.label.c_str(),
                  value_text(f.base, f.is_size).c_str(), value_text(f.next, f.is_size).c_str(), change_text(f).c_str());
    out += line;
  }
}

void append_sites(std::string& out, const std::vector<SiteChange>& sites) {
  if (sites.empty()) {
    out += "  no change\n";
    return;
  }
  for (const SiteChange& s : sites) {
    out += "  " + signed_bytes(s.change()) + "  (" + format_bytes(s.base_bytes) + " -> " + format_bytes(s.next_bytes) +
           ", " + std::to_string(s.base_count) + " -> " + std::to_string(s.next_count) + " allocations)  " +
           s.label + "\n";
  }
}

Json figure_json(const DiffFigure& f) {
  Json j;
  j["base"] = f.base ? Json(*f.base) : Json(nullptr);
  j["new"] = f.next ? Json(*f.next) : Json(nullptr);
  if (f.base && f.next) {
    j["change"] = static_cast<std::int64_t>(*f.next - *f.base);
    j["change_percent"] = *f.base == 0 ? Json(nullptr)
                                       : Json(100.0 * static_cast<double>(static_cast<std::int64_t>(*f.next - *f.base)) /
                                              static_cast<double>(*f.base));
  } else {
    j["change"] = nullptr;
    j["change_percent"] = nullptr;
  }
  return j;
}

Json sites_json(const std::vector<SiteChange>& sites) {
  Json list = Json::array();
  for (const SiteChange& s : sites) {
    list.push_back(Json{{"label", s.label},
                        {"functions", s.functions},
                        {"base_bytes", s.base_bytes},
                        {"new_bytes", s.next_bytes},
                        {"change", s.change()},
                        {"base_count", s.base_count},
                        {"new_count", s.next_count}});
  }
  return list;
}

const DiffFigure* find_figure(const TraceDiff& diff, std::string_view key) {
  for (const DiffFigure& f : diff.totals) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

std::string percent_text(double percent) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", percent);
  return text;
}

}  // namespace

TraceDiff diff_reports(const Json& base, const Json& next, std::string base_name, std::string next_name,
                       std::size_t max_sites) {
  TraceDiff diff;
  diff.base_name = std::move(base_name);
  diff.next_name = std::move(next_name);
  for (const FigureSpec& spec : kTotals) diff.totals.push_back(figure(spec, base, next));
  const Json no_devices = Json::object();
  const Json& base_devices = base.contains("devices") ? base["devices"] : no_devices;
  const Json& next_devices = next.contains("devices") ? next["devices"] : no_devices;
  std::vector<std::string> names;
  for (const Json* devices : {&base_devices, &next_devices}) {
    if (!devices->is_object()) continue;
    for (const auto& [name, ignored] : devices->items()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    const Json& b = base_devices.is_object() && base_devices.contains(name) ? base_devices[name] : no_devices;
    const Json& n = next_devices.is_object() && next_devices.contains(name) ? next_devices[name] : no_devices;
    std::vector<DiffFigure>& figures = diff.devices.emplace_back(name, std::vector<DiffFigure>{}).second;
    for (const FigureSpec& spec : kDeviceFigures) {
      DiffFigure f = figure(spec, b, n);
      // A device one run did not use had nothing on it.
      if (!b.contains("peak_allocated") && f.next) f.base = 0;
      if (!n.contains("peak_allocated") && f.base) f.next = 0;
      figures.push_back(f);
    }
  }
  diff.leaked_sites = site_changes(base, next, "leaks", max_sites).value_or(std::vector<SiteChange>{});
  diff.peak_sites = site_changes(base, next, "top_at_peak", max_sites);
  label_sites(diff, base, next);
  diff.base_incomplete = incomplete_reason(base);
  diff.next_incomplete = incomplete_reason(next);
  diff.base_rank = rank_of_report(base);
  diff.next_rank = rank_of_report(next);
  diff.base_unassessed = unassessed_growth_reason(base);
  diff.next_unassessed = unassessed_growth_reason(next);
  return diff;
}

std::vector<std::string> find_regressions(const TraceDiff& diff, const DiffLimits& limits) {
  std::vector<std::string> found;
  if (!limits.any()) return found;
  // A regression verdict from a partial trace would be a guess (DESIGN.md).
  if (!limits.allow_incomplete) {
    for (const auto& [name, why] : {std::pair{diff.base_label(), &diff.base_incomplete},
                                    std::pair{diff.next_label(), &diff.next_incomplete}}) {
      if (!why->empty()) {
        found.push_back("incomplete trace " + name + ": " + *why + "; " + std::string(kAllowIncompleteHint));
      }
    }
    if (!found.empty()) return found;
  }
  const auto unavailable = [&](const DiffFigure& f) {
    found.push_back(f.label + " not available in " + (!f.base ? diff.base_label() : diff.next_label()));
  };
  const auto percent_limit = [&](const char* key, const std::optional<double>& limit) {
    if (!limit) return;
    const DiffFigure& f = *find_figure(diff, key);
    if (!f.base || !f.next) return unavailable(f);
    if (*f.next <= *f.base) return;
    const double percent = *f.base == 0 ? 1e300
                                        : 100.0 * static_cast<double>(*f.next - *f.base) / static_cast<double>(*f.base);
    if (percent <= *limit) return;
    found.push_back(f.label + " " + (*f.base == 0 ? std::string("new") : percent_text(percent)) + " (" +
                    format_bytes(*f.base) + " -> " + format_bytes(*f.next) + ") > " + percent_text(*limit));
  };
  const auto size_limit = [&](const char* key, const std::optional<std::uint64_t>& limit) {
    if (!limit) return;
    const DiffFigure& f = *find_figure(diff, key);
    if (!f.base || !f.next) return unavailable(f);
    if (*f.next <= *f.base || *f.next - *f.base <= *limit) return;
    found.push_back(f.label + " +" + format_bytes(*f.next - *f.base) + " (" + format_bytes(*f.base) + " -> " +
                    format_bytes(*f.next) + ") > +" + format_bytes(*limit));
  };
  percent_limit("peak_allocated", limits.max_peak_increase_percent);
  percent_limit("peak_reserved", limits.max_reserved_increase_percent);
  size_limit("leaked_bytes", limits.max_leak_increase);
  if (limits.max_growth_increase && !limits.allow_unassessed &&
      (!diff.base_unassessed.empty() || !diff.next_unassessed.empty())) {
    for (const auto& [name, why] : {std::pair{&diff.base_name, &diff.base_unassessed},
                                    std::pair{&diff.next_name, &diff.next_unassessed}}) {
      if (!why->empty()) {
        found.push_back("growth per iteration not assessed in " + *name + ": " + *why + "; " +
                        std::string(kUnassessedHint));
      }
    }
  } else {
    size_limit("growth_bytes_per_iteration", limits.max_growth_increase);
  }
  return found;
}

std::string render_diff_text(const TraceDiff& diff) {
  // An incomplete trace says so first, beside its name.
  const auto named = [](const std::string& name, const std::string& incomplete) {
    return incomplete.empty() ? name : name + "  (INCOMPLETE: " + incomplete + ")";
  };
  std::string out = "cumemtrace diff\n  base: " + named(diff.base_label(), diff.base_incomplete) +
                    "\n  new:  " + named(diff.next_label(), diff.next_incomplete) + "\n\n";
  char header[256];
  std::snprintf(header, sizeof header, "%-24s %14s %14s   %s\n", "Total", "base", "new", "change");
  out += header;
  append_figures(out, diff.totals, "");
  for (const auto& [device, figures] : diff.devices) {
    out += "\nDevice " + device + "\n";
    append_figures(out, figures, "");
  }
  out += "\nLeaked at the end, by call site (largest change first):\n";
  append_sites(out, diff.leaked_sites);
  out += "\nLive at the allocated peak, by call site (largest change first):\n";
  if (diff.peak_sites) {
    append_sites(out, *diff.peak_sites);
  } else {
    out += "  not available in these reports\n";
  }
  return out;
}

Json render_diff_json(const TraceDiff& diff, const std::vector<std::string>& regressions) {
  Json j;
  j["base"] = diff.base_name;
  j["new"] = diff.next_name;
  const auto incomplete = [](const std::string& why) { return why.empty() ? Json(nullptr) : Json(why); };
  j["incomplete"] = Json{{"base", incomplete(diff.base_incomplete)}, {"new", incomplete(diff.next_incomplete)}};
  const auto rank = [](const std::optional<std::int64_t>& r) { return r ? Json(*r) : Json(nullptr); };
  j["rank"] = Json{{"base", rank(diff.base_rank)}, {"new", rank(diff.next_rank)}};
  Json totals = Json::object();
  for (const DiffFigure& f : diff.totals) totals[f.key] = figure_json(f);
  j["totals"] = std::move(totals);
  Json devices = Json::object();
  for (const auto& [device, figures] : diff.devices) {
    Json d = Json::object();
    for (const DiffFigure& f : figures) d[f.key] = figure_json(f);
    devices[device] = std::move(d);
  }
  j["devices"] = std::move(devices);
  j["sites"] = Json{{"leaked", sites_json(diff.leaked_sites)},
                    {"at_peak", diff.peak_sites ? sites_json(*diff.peak_sites) : Json(nullptr)}};
  j["regressions"] = regressions;
  return j;
}

}  // namespace cumemtrace::analyzer
