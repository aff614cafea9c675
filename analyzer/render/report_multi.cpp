#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

#include "cumemtrace/analyzer/multi_report.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/units.h"
#include "analyze/report_figures.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;

// A file name as its non-digit text with each number replaced by '#', and
// the numbers in order: "job.3.4242.jsonl" -> "job.#.#.jsonl", {3, 4242}.
struct NameShape {
  std::string skeleton;
  std::vector<std::optional<std::int64_t>> numbers;
};

NameShape shape_of(std::string_view name) {
  NameShape shape;
  for (std::size_t i = 0; i < name.size();) {
    if (std::isdigit(static_cast<unsigned char>(name[i]))) {
      std::size_t j = i;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      shape.skeleton += '#';
      shape.numbers.push_back(parse_rank_number(name.substr(i, j - i)));
      i = j;
    } else {
      shape.skeleton += name[i++];
    }
  }
  return shape;
}

template <typename T>
T value_or(const Json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->template get<T>();
}

}  // namespace

ProcessRow process_row(const Json& report) {
  ProcessRow row;
  row.trace = value_or<std::string>(report, "trace", "");
  if (const auto it = report.find("program"); it != report.end() && it->is_object()) {
    row.pid = value_or<std::int64_t>(*it, "pid", 0);
    row.ppid = value_or<std::int64_t>(*it, "ppid", 0);
    row.host = value_or<std::string>(*it, "host", "");
    row.exe = value_or<std::string>(*it, "exe", "");
    row.argv = value_or<std::vector<std::string>>(*it, "argv", {});
  }
  row.peak_allocated = value_or<std::uint64_t>(report, "peak_allocated", 0);
  row.peak_reserved = value_or<std::uint64_t>(report, "peak_reserved", 0);
  row.leaked_bytes = value_or<std::uint64_t>(report, "leaked_bytes", 0);
  row.leaked_count = value_or<std::uint64_t>(report, "leaked_count", 0);
  row.allocs = value_or<std::uint64_t>(report, "allocs", 0);
  row.frees = value_or<std::uint64_t>(report, "frees", 0);
  row.ooms = value_or<std::uint64_t>(report, "ooms", 0);
  row.growth_bytes_per_iteration = value_or<std::uint64_t>(report, "growth_bytes_per_iteration", 0);
  if (const auto it = report.find("fragmentation"); it != report.end() && it->is_object()) {
    row.fragmentation_at_peak_reserved = value_or<double>(*it, "at_peak_reserved", 0.0);
  }
  row.truncated = value_or<bool>(report, "truncated", false);
  row.rank = rank_of_report(report);
  return row;
}

void label_processes(std::vector<ProcessRow>& rows) {
  for (ProcessRow& row : rows) {  // rows not made by process_row
    if (!row.rank) row.rank = rank_from_file_name(row.trace);
    if (!row.rank) row.rank = rank_from_argv(row.argv);
  }
  // Bare `%r`: names alike but for their numbers, one of which runs 0..n-1.
  std::map<std::string, std::vector<std::size_t>> by_skeleton;
  std::vector<NameShape> shapes;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    shapes.push_back(shape_of(detail::base_name(rows[i].trace)));
    if (!rows[i].rank) by_skeleton[shapes[i].skeleton].push_back(i);
  }
  for (const auto& [skeleton, members] : by_skeleton) {
    if (members.size() < 2) continue;
    const std::size_t positions = shapes[members.front()].numbers.size();
    for (std::size_t k = 0; k < positions; ++k) {
      std::vector<std::int64_t> values;
      for (std::size_t i : members) {
        if (shapes[i].numbers[k]) values.push_back(*shapes[i].numbers[k]);
      }
      if (values.size() != members.size()) continue;
      std::sort(values.begin(), values.end());
      bool runs = true;
      for (std::size_t v = 0; v < values.size(); ++v) runs = runs && values[v] == static_cast<std::int64_t>(v);
      if (!runs) continue;
      for (std::size_t i : members) rows[i].rank = *shapes[i].numbers[k];
      break;
    }
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t j = 0; j < rows.size(); ++j) {
      if (i == j || rows[j].pid != rows[i].ppid || rows[j].pid == 0 || rows[j].host != rows[i].host) continue;
      rows[i].parent = j;
      rows[i].forked = rows[j].exe == rows[i].exe && rows[j].argv == rows[i].argv;
      break;
    }
  }
}

ProcessTotals process_totals(const std::vector<ProcessRow>& rows) {
  ProcessTotals t;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ProcessRow& r = rows[i];
    t.peak_allocated += r.peak_allocated;
    t.peak_reserved += r.peak_reserved;
    t.leaked_bytes += r.leaked_bytes;
    t.leaked_count += r.leaked_count;
    t.allocs += r.allocs;
    t.frees += r.frees;
    t.ooms += r.ooms;
    if (!t.most_growth || r.growth_bytes_per_iteration > t.growth_bytes_per_iteration) {
      t.most_growth = i;
      t.growth_bytes_per_iteration = r.growth_bytes_per_iteration;
    }
    if (!t.most_fragmented || r.fragmentation_at_peak_reserved > t.fragmentation_at_peak_reserved) {
      t.most_fragmented = i;
      t.fragmentation_at_peak_reserved = r.fragmentation_at_peak_reserved;
    }
    t.truncated = t.truncated || r.truncated;
  }
  return t;
}

Json render_json_multi(const std::vector<ProcessRow>& rows, std::vector<Json> reports) {
  Json j;
  j["report_version"] = kReportVersion;
  j["traces"] = Json::array();
  for (Json& report : reports) j["traces"].push_back(std::move(report));
  Json processes = Json::array();
  for (const ProcessRow& r : rows) {
    processes.push_back(Json{{"trace", r.trace},
                             {"pid", r.pid},
                             {"ppid", r.ppid},
                             {"rank", r.rank ? Json(*r.rank) : Json(nullptr)},
                             {"host", r.host},
                             {"parent", r.parent ? Json(*r.parent) : Json(nullptr)},
                             {"forked", r.forked},
                             {"peak_allocated", r.peak_allocated},
                             {"peak_reserved", r.peak_reserved},
                             {"leaked_bytes", r.leaked_bytes},
                             {"leaked_count", r.leaked_count},
                             {"ooms", r.ooms},
                             {"growth_bytes_per_iteration", r.growth_bytes_per_iteration},
                             {"fragmentation_at_peak_reserved", r.fragmentation_at_peak_reserved},
                             {"truncated", r.truncated}});
  }
  j["processes"] = std::move(processes);
  const ProcessTotals t = process_totals(rows);
  j["totals"] = Json{{"processes", rows.size()},
                     {"peak_allocated", t.peak_allocated},
                     {"peak_reserved", t.peak_reserved},
                     {"leaked_bytes", t.leaked_bytes},
                     {"leaked_count", t.leaked_count},
                     {"allocs", t.allocs},
                     {"frees", t.frees},
                     {"ooms", t.ooms},
                     {"growth_bytes_per_iteration", t.growth_bytes_per_iteration},
                     {"fragmentation_at_peak_reserved", t.fragmentation_at_peak_reserved},
                     {"truncated", t.truncated}};
  return j;
}

std::string render_text_multi(const std::vector<ProcessRow>& rows, const std::vector<std::string>& texts) {
  std::ostringstream out;
  out << "cumemtrace report: " << rows.size() << " traces\n\nProcesses\n";
  std::size_t trace_width = 5, host_width = 4;
  for (const ProcessRow& r : rows) {
    trace_width = std::max(trace_width, r.trace.size());
    host_width = std::max(host_width, r.host.size());
  }
  char line[512];
  auto row_line = [&](const std::string& trace, const std::string& rank, const std::string& pid,
                      const std::string& parent, const std::string& host, const std::string& allocated,
                      const std::string& reserved, const std::string& leaked, const std::string& ooms,
                      const std::string& notes) {
    std::snprintf(line, sizeof line, "  %-*s %5s %8s %8s  %-*s %14s %14s %11s %5s", static_cast<int>(trace_width),
                  trace.c_str(), rank.c_str(), pid.c_str(), parent.c_str(), static_cast<int>(host_width),
                  host.c_str(), allocated.c_str(), reserved.c_str(), leaked.c_str(), ooms.c_str());
    out << line << (notes.empty() ? "" : "  " + notes) << "\n";
  };
  row_line("trace", "rank", "pid", "parent", "host", "peak allocated", "peak reserved", "leaked", "OOMs", "");
  std::vector<std::string> truncated;
  for (const ProcessRow& r : rows) {
    std::string notes;
    if (r.parent) notes = (r.forked ? "forked from pid " : "started by pid ") + std::to_string(rows[*r.parent].pid);
    if (r.truncated) notes += notes.empty() ? "TRUNCATED" : "; TRUNCATED";
    row_line(r.trace, r.rank ? std::to_string(*r.rank) : "-", std::to_string(r.pid),
             r.parent ? std::to_string(r.ppid) : "-", r.host.empty() ? "-" : r.host, format_bytes(r.peak_allocated),
             format_bytes(r.peak_reserved), format_bytes(r.leaked_bytes), std::to_string(r.ooms), notes);
    if (r.truncated) truncated.push_back(r.trace);
  }
  const ProcessTotals t = process_totals(rows);
  row_line("total", "", "", "", "", format_bytes(t.peak_allocated), format_bytes(t.peak_reserved),
           format_bytes(t.leaked_bytes), std::to_string(t.ooms), "");

  auto plural = [](std::uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  out << "\nTotals over " << rows.size() << " processes\n";
  out << "  peak allocated:  " << format_bytes(t.peak_allocated)
      << " (the sum of the processes' peaks: an upper bound, they may not have peaked at once)\n";
  out << "  peak reserved:   " << format_bytes(t.peak_reserved) << " (the sum of the processes' peaks)\n";
  out << "  leaked at end:   " << format_bytes(t.leaked_bytes) << " in "
      << plural(t.leaked_count, "allocation", "allocations") << "\n";
  out << "  out of memory:   " << plural(t.ooms, "failure", "failures") << "\n";
  out << "  growth leaks:    ";
  if (!t.most_growth || t.growth_bytes_per_iteration == 0) out << "none\n";
  else out << "at most " << format_bytes(t.growth_bytes_per_iteration) << " per iteration (" << rows[*t.most_growth].trace << ")\n";
  if (t.most_fragmented && t.fragmentation_at_peak_reserved > 0) {
    out << "  fragmentation:   at worst " << detail::percent(t.fragmentation_at_peak_reserved)
        << " of reserved memory unused at the reserved peak (" << rows[*t.most_fragmented].trace << ")\n";
  }
  if (!truncated.empty()) {
    out << "  TRUNCATED:       ";
    for (std::size_t i = 0; i < truncated.size(); ++i) out << (i ? ", " : "") << truncated[i];
    out << "\n";
  }
  for (std::size_t i = 0; i < texts.size(); ++i) {
    out << "\n======== " << (i < rows.size() ? rows[i].trace : std::string("?"));
    if (i < rows.size() && rows[i].rank) out << " (rank " << *rows[i].rank << ")";
    out << " ========\n" << texts[i];
  }
  return out.str();
}

}  // namespace cumemtrace::analyzer
