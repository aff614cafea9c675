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

// Known leaks. A line is a glob (`*` matches any run of characters; `#`
// starts a comment, blank lines are ignored) matched against what the
// report shows for a leak group or growth entry: the frames its label spans
// (`device_alloc ← keep_loss_for_logging`: from the innermost frame out to
// the caller that tells the site apart, as `check`'s failure lines print
// it, with the shared helpers the label skips between them), never the
// callers beyond (`main`, the training loop), so a line that names an outer
// frame cannot silence every site. For each such frame:
//   GLOB          its function as the label shows it (no return type, no
//                 parameters: `keep_loss_for_logging`, `Trainer.evaluate`),
//                 or its full demangled name (`*keep_loss_for_logging(*`);
//   module:GLOB   its object file, by file name or whole path
//                 (`module:libc10_cuda.so`: PyTorch's caching allocator,
//                 whose segments are still held at exit), frames without a
//                 function name included; for a Python frame, its source file;
//   file:GLOB     its source file (a Python frame's, or a native frame's
//                 file:line from the trace or --symbolize), by name or path.
// An entry without a label (an older report) is matched by its innermost frame.
class Suppressions {
 public:
  enum class Kind : std::uint8_t { function, module, file };
  struct Pattern {
    Kind kind = Kind::function;
    std::string glob;     // without its `module:` or `file:`
    std::string written;  // the line as written, comment and blanks trimmed
    std::size_t line = 0;  // 1-based, in the file
  };

  static Suppressions parse(std::string_view text);
  static Suppressions load(const std::string& path);  // throws CheckError

  bool empty() const { return patterns_.empty(); }
  const std::vector<Pattern>& patterns() const { return patterns_; }
  // The path load() read ("" after parse()), for messages.
  const std::string& source() const { return source_; }
  // Whether a function-name / module line matches this name / object file
  // (by file name or whole path).
  bool matches(std::string_view function) const;
  bool matches_module(std::string_view module_path) const;
  // `entry` is a leak group or growth entry of the report (its `label`,
  // `frames`, else `functions`).
  bool suppresses(const nlohmann::ordered_json& entry) const;
  // The index into patterns() of every line that matches `entry`.
  std::vector<std::size_t> matching(const nlohmann::ordered_json& entry) const;

 private:
  std::vector<Pattern> patterns_;
  std::string source_;
};

// What one suppression line covered in one report: every leak group and
// growth entry it matches (a leak two lines match counts under both).
struct SuppressionUse {
  std::size_t pattern = 0;  // index into Suppressions::patterns()
  std::uint64_t leaked_count = 0, leaked_bytes = 0;
  std::uint64_t growth_sites = 0, growth_bytes_per_iteration = 0;  // the sum over the sites
  bool matched() const { return leaked_count + leaked_bytes + growth_sites > 0; }
};
// One per line of `suppressions`, in file order.
std::vector<SuppressionUse> suppression_uses(const nlohmann::ordered_json& report, const Suppressions& suppressions);
// "suppressed by 'record_loss(*' (line 3): 8 leaked allocations, 15.62 KiB; 1 growing site, 1.95 KiB per iteration"
std::string describe_use(const SuppressionUse& use, const Suppressions& suppressions);

// Why a trace is not a finished run's record, as one phrase ("the trace has
// no end line (the program was cut short)"; several joined by "; "), or ""
// for a complete trace: no end line or a cut last line, events the writer
// dropped, lines the reader could not read, or an end written after the
// process was killed (reason `killed`: what was live at the kill is no
// leak). A PyTorch snapshot (reason `snapshot`) is complete as it is.
std::string incomplete_reason(const nlohmann::ordered_json& report);
// What a failing line adds: "pass --allow-incomplete to judge it anyway".
inline constexpr std::string_view kAllowIncompleteHint = "pass --allow-incomplete to judge it anyway";

bool glob_match(std::string_view pattern, std::string_view text);

// Why the report could not assess growth ("no iterations found (...)"), or
// "" when it did (or is too old to say). A limit on growth then fails
// unless --allow-unassessed: growth not assessed reads as 0 bytes per
// iteration, which would pass any limit.
std::string unassessed_growth_reason(const nlohmann::ordered_json& report);
// What a failing line adds, and what a pass by --allow-unassessed says.
inline constexpr std::string_view kUnassessedHint =
    "mark each step (cumemtrace_mark(\"step N\") or an NVTX range per step), name the mark that does with "
    "--iteration-marker NAME, or pass --allow-unassessed";
inline constexpr std::string_view kAllowedUnassessedNote = "passed by --allow-unassessed";

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
// A growth limit on a report that could not assess growth fails, or with
// `allow_unassessed` passes as undefined, saying so.
std::vector<CheckResult> evaluate_checks(const nlohmann::ordered_json& report, const std::vector<Check>& checks,
                                         const Suppressions& suppressions, bool allow_unassessed = false);

// JUnit XML: one <testsuite> per trace, one <testcase> per check, a
// <failure> with the message for each check that did not pass, an <error>
// for a trace that could not be read; a pass whose figure is undefined
// carries its message in <system-out>.
// An incomplete trace not allowed (`incomplete` set, `results` empty) is one
// failing <testcase name="complete trace">; `notes` (the suppressions' figures,
// an incomplete trace judged anyway) go into the suite's <system-out>.
struct TraceVerdict {
  std::string trace;
  std::string read_error;  // non-empty: the trace could not be read
  std::vector<CheckResult> results;
  std::string incomplete;  // non-empty: the failure line of an incomplete trace not judged
  std::vector<std::string> notes;
};
std::string junit_xml(const std::vector<TraceVerdict>& verdicts);

// Text for XML character data and attribute values: markup escaped,
// characters XML 1.0 forbids (control characters, invalid UTF-8) replaced.
std::string xml_escape(std::string_view text);

}  // namespace cumemtrace::analyzer
