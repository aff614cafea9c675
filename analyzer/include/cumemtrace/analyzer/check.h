// `cumemtrace check`: limits on a trace's report, for CI. A check compares
// one key of the JSON report (REPORT_FORMAT.md) with a limit; the verdicts
// are evaluated on the report object itself, so `check` says exactly what
// `report --format json` shows. A key the report does not carry (an older
// analyzer, a trace without the events it needs) makes its check fail as
// "not available in this trace": a limit never passes unchecked.
//
//   std::vector<Check> checks = parse_check_list("peak<=2GiB,leaked==0");
//   for (const CheckResult& r : evaluate_checks(report_json, checks, suppressions)) ...
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace cumemtrace::analyzer {

// A limit, a suppressions file or a check list that cannot be used: what()
// is one line for the user (exit code 2).
class CheckError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Metric : std::uint8_t {
  peak_allocated,  // report key peak_allocated
  peak_reserved,   // peak_reserved
  leaked_bytes,    // leaked_bytes, less suppressed leak groups
  leaked_count,    // leaked_count, less suppressed leak groups
  growth,          // growth_bytes_per_iteration (the largest unsuppressed entry of `growth`)
  fragmentation,   // fragmentation.at_peak_reserved
  ooms,            // ooms
  reserved_ratio,  // peak_reserved / peak_allocated
};

enum class Comparison : std::uint8_t { at_most, below, equal };  // <=, <, ==

struct Check {
  Metric metric = Metric::peak_allocated;
  Comparison comparison = Comparison::at_most;
  std::uint64_t limit = 0;       // sizes and counts
  double fraction_limit = 0.0;   // fragmentation, reserved_ratio
};

// The metric's name in check lists ("peak_allocated"), and its words in
// messages ("peak allocated").
std::string_view metric_name(Metric m);
std::string_view metric_label(Metric m);
// "peak_allocated <= 2.00 GiB"
std::string describe_check(const Check& check);

// A check with the limit as written on a command line (a size, a count or
// a fraction or a ratio, as the metric wants). Throws CheckError naming the
// option.
Check make_check(Metric metric, Comparison comparison, std::string_view limit_text, std::string_view option);

// "peak_allocated<=2GiB, leaked_bytes==0": comma-separated NAME OP VALUE,
// OP one of <= < ==; names are report keys or the short aliases peak,
// reserved, leaked, leaks, growth, fragmentation, ooms (reserved_ratio has
// none). Throws CheckError.
std::vector<Check> parse_check_list(std::string_view text);

// Known leaks, by function name: one glob per line (`*` matches any run of
// characters), `#` starts a comment, blank lines are ignored. A leak group
// or growth leak is suppressed when any function of its stack matches
// (Python functions by their qualified names, `Trainer.*`).
// `module:GLOB` lines match the object file of any frame instead, by its
// file name or its whole path (`module:libc10_cuda.so`: PyTorch's caching
// allocator, whose segments are still held at exit); they also reach
// frames without a function name (a stripped library's own functions). For
// a Python frame they match its source file (`module:data_loader.py`).
class Suppressions {
 public:
  static Suppressions parse(std::string_view text);
  static Suppressions load(const std::string& path);  // throws CheckError

  bool empty() const { return patterns_.empty() && module_patterns_.empty(); }
  bool matches(std::string_view function) const;
  bool matches_module(std::string_view module_path) const;
  // `entry` is a leak group or growth entry of the report: its `functions`,
  // else the `fn` of its `frames`; `module:` lines, the `module` of its `frames`.
  bool suppresses(const nlohmann::ordered_json& entry) const;

 private:
  std::vector<std::string> patterns_;
  std::vector<std::string> module_patterns_;
};

bool glob_match(std::string_view pattern, std::string_view text);

struct CheckResult {
  enum class Status : std::uint8_t { pass, fail, unavailable };
  Check check;
  Status status = Status::unavailable;
  std::string actual;  // "3.10 GiB"; empty when unavailable
  std::string limit;   // "2.00 GiB"
  // "peak allocated 3.10 GiB > 2.00 GiB", "... <= ...", or
  // "growth per iteration not available in this trace".
  std::string message;
  // A pass because the figure has no value here (reserved_ratio of a trace
  // that allocated nothing: no division by zero); the message says so.
  bool undefined = false;
  bool passed() const { return status == Status::pass; }
};

// Evaluates every check on one trace's JSON report.
std::vector<CheckResult> evaluate_checks(const nlohmann::ordered_json& report, const std::vector<Check>& checks,
                                         const Suppressions& suppressions);

// JUnit XML: one <testsuite> per trace, one <testcase> per check, a
// <failure> with the message for each check that did not pass, an <error>
// for a trace that could not be read; a pass whose figure is undefined
// carries its message in <system-out>.
struct TraceVerdict {
  std::string trace;
  std::string read_error;  // non-empty: the trace could not be read
  std::vector<CheckResult> results;
};
std::string junit_xml(const std::vector<TraceVerdict>& verdicts);

// Text for XML character data and attribute values: markup escaped,
// characters XML 1.0 forbids (control characters, invalid UTF-8) replaced.
std::string xml_escape(std::string_view text);

}  // namespace cumemtrace::analyzer
