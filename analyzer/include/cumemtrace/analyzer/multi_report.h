// Several traces in one report: the processes of a job (ranks of a
// distributed run, forked or spawned children), each with its own report,
// plus a per-process table and totals (analyzer/REPORT_FORMAT.md, "Several
// traces").
//
//   std::vector<ProcessRow> rows;  // one per trace, from its JSON report
//   for (auto& report : reports) rows.push_back(process_row(report));
//   label_processes(rows);         // ranks and parents, from all the traces
//   render_json_multi(rows, std::move(reports));
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/process_rank.h"

namespace cumemtrace::analyzer {

struct ProcessRow {
  std::string trace;
  std::int64_t pid = 0;
  std::int64_t ppid = 0;
  std::string host;
  std::string exe;
  std::vector<std::string> argv;
  std::optional<std::int64_t> rank;
  std::optional<std::size_t> parent;  // index of the row whose process started this one
  bool forked = false;                // parent set and same program: a fork rather than an exec
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t leaked_bytes = 0;
  std::uint64_t leaked_count = 0;
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  std::uint64_t growth_bytes_per_iteration = 0;
  double fragmentation_at_peak_reserved = 0;
  bool truncated = false;
};

// The totals over all processes, as every multi-trace format shows them:
// the peaks are sums of the processes' peaks (an upper bound of the job's),
// growth and fragmentation the largest of any process.
struct ProcessTotals {
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t leaked_bytes = 0;
  std::uint64_t leaked_count = 0;
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  std::uint64_t growth_bytes_per_iteration = 0;
  double fragmentation_at_peak_reserved = 0;
  std::optional<std::size_t> most_growth;      // the first row with that growth
  std::optional<std::size_t> most_fragmented;  // the first row with that fragmentation
  bool truncated = false;                      // any process's trace
};
ProcessTotals process_totals(const std::vector<ProcessRow>& rows);

// The row of one trace, read from its one-trace JSON report (rank included:
// rank_of_report).
ProcessRow process_row(const nlohmann::ordered_json& report);

// Fills rank and parent for every row. A rank comes from the header
// (`rank_env`), else the file name ("rank" followed by a number), else the
// command line (process_rank.h: process_row has set these), else, for traces
// whose names are the same apart from their numbers, from the one number
// that runs exactly 0..n-1 over n >= 2 such traces (`%r` written bare; pids
// never do that). The parent is the trace of the same host whose pid is this
// trace's ppid.
void label_processes(std::vector<ProcessRow>& rows);

nlohmann::ordered_json render_json_multi(const std::vector<ProcessRow>& rows,
                                         std::vector<nlohmann::ordered_json> reports);

// The table and totals, then each trace's text report in `texts` (same order).
std::string render_text_multi(const std::vector<ProcessRow>& rows, const std::vector<std::string>& texts);

}  // namespace cumemtrace::analyzer
