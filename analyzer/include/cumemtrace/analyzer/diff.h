// `cumemtrace diff BASE NEW`: what changed between two runs, from their JSON
// reports (REPORT_FORMAT.md): peaks in total and per device, leaks, growth,
// and per call site. Call sites are matched by their stacks' function names
// (module+offset for a frame without one), never by stack id: ids are
// numbered afresh in every trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cumemtrace/analyzer/process_rank.h"

namespace cumemtrace::analyzer {

struct DiffFigure {
  std::string key;    // the report key: "peak_allocated"
  std::string label;  // "peak allocated"
  bool is_size = true;  // bytes, else a count
  std::optional<std::uint64_t> base;  // nullopt: not in that report
  std::optional<std::uint64_t> next;
};

struct SiteChange {
  std::vector<std::string> functions;  // innermost first; the site's identity
  std::string label;  // a short name that tells it apart from the reports' other sites
  std::uint64_t base_bytes = 0, next_bytes = 0;
  std::uint64_t base_count = 0, next_count = 0;
  std::int64_t change() const { return static_cast<std::int64_t>(next_bytes - base_bytes); }
};

struct TraceDiff {
  std::string base_name, next_name;
  std::vector<DiffFigure> totals;
  // By device ordinal, in the reports' order (BASE's devices first).
  std::vector<std::pair<std::string, std::vector<DiffFigure>>> devices;
  std::vector<SiteChange> leaked_sites;  // changed sites only, largest change first
  // Live at the allocated peak (`top_at_peak`); nullopt when a report lacks it.
  std::optional<std::vector<SiteChange>> peak_sites;
  // Why a trace is not a finished run's record (check.h's incomplete_reason); "" when complete.
  std::string base_incomplete, next_incomplete;
  // The rank each trace came from (process_rank.h: rank_of_report); nullopt
  // when nothing tells.
  std::optional<std::int64_t> base_rank, next_rank;
  // A trace's name as the comparison and its verdicts show it: "run.jsonl, rank 3".
  std::string base_label() const { return trace_with_rank(base_name, base_rank); }
  std::string next_label() const { return trace_with_rank(next_name, next_rank); }
  // Why a report could not assess growth (check.h's unassessed_growth_reason); "" when it did.
  std::string base_unassessed, next_unassessed;
};

// `max_sites`: how many changed sites to keep per list.
TraceDiff diff_reports(const nlohmann::ordered_json& base, const nlohmann::ordered_json& next, std::string base_name,
                       std::string next_name, std::size_t max_sites = 10);

struct DiffLimits {
  std::optional<double> max_peak_increase_percent;      // peak_allocated
  std::optional<double> max_reserved_increase_percent;  // peak_reserved
  std::optional<std::uint64_t> max_leak_increase;       // leaked_bytes, bytes
  std::optional<std::uint64_t> max_growth_increase;     // growth_bytes_per_iteration, bytes
  bool allow_incomplete = false;  // judge a cut, lossy or killed trace too
  bool allow_unassessed = false;  // judge max_growth_increase where a trace's growth was not assessed
  bool any() const {
    return max_peak_increase_percent || max_reserved_increase_percent || max_leak_increase || max_growth_increase;
  }
};

// One line per limit exceeded ("peak allocated +25.0% (2.00 GiB -> 2.50
// GiB) > +10%"); a figure missing from a report is a regression too. With a
// limit, an incomplete trace is not judged unless allow_incomplete: one line
// per such trace instead, saying why and what to do. So is a growth limit
// where a trace's growth could not be assessed, unless allow_unassessed.
// Without limits, none.
std::vector<std::string> find_regressions(const TraceDiff& diff, const DiffLimits& limits);

std::string render_diff_text(const TraceDiff& diff);
nlohmann::ordered_json render_diff_json(const TraceDiff& diff, const std::vector<std::string>& regressions);

}  // namespace cumemtrace::analyzer
