// `cumemtrace check`: sizes as people write them, check lists, suppressions,
// the verdicts on report objects (fixtures for the keys other parts of the
// report add), JUnit XML, and the command end to end, `run --check` included.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/check.h"
#include "cumemtrace/analyzer/units.h"

namespace cumemtrace::analyzer {
namespace {

using Json = nlohmann::ordered_json;
using testing::CommandResult;
using testing::TempDir;

TEST(Units, SizesInBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_size("2 GiB"), 2ull << 30);
  EXPECT_EQ(parse_size(" 2gib "), 2ull << 30);
  EXPECT_EQ(parse_size("2G"), 2ull << 30);
  EXPECT_EQ(parse_size("1.5GB"), 1500000000u);
  EXPECT_EQ(parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_size("0.5KiB"), 512u);
  EXPECT_EQ(parse_size(".5KiB"), 512u);
  EXPECT_EQ(parse_size("10kB"), 10000u);
  EXPECT_EQ(parse_size("3TiB"), 3ull << 40);
  EXPECT_EQ(parse_size("1PB"), 1000000000000000u);
  EXPECT_EQ(parse_size("100B"), 100u);
  EXPECT_EQ(parse_size("18446744073709551615"), 18446744073709551615ull);
  for (const char* bad : {"", " ", "GiB", "-1", "-1GiB", "+5", "1e9", "0x10", "2XB", "2 G iB", "1.1B", "0.3KiB",
                          "18446744073709551616", "16EiB", "20000PiB", "1..5GiB", "1,5GiB", "nan", "inf", "2GiB2",
                          "99999999999999999999999999999999999999"}) {
    EXPECT_EQ(parse_size(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(parse_count("12"), 12u);
  EXPECT_EQ(parse_count("1.0"), std::nullopt);
  EXPECT_EQ(parse_count("-1"), std::nullopt);
  EXPECT_EQ(parse_count("1k"), std::nullopt);
  EXPECT_EQ(parse_fraction("0.25"), 0.25);
  EXPECT_EQ(parse_fraction("25%"), 0.25);
  EXPECT_EQ(parse_fraction("1"), 1.0);
  EXPECT_EQ(parse_fraction("1.5"), std::nullopt);
  EXPECT_EQ(parse_fraction("150%"), std::nullopt);
  EXPECT_EQ(parse_fraction("-0.1"), std::nullopt);
  EXPECT_EQ(parse_fraction("x"), std::nullopt);
}

TEST(Check, ListsWithNamesAliasesAndComparisons) {
  const std::vector<Check> checks = parse_check_list("peak_allocated<=2GiB, leaked_bytes==0,peak<1MiB,leaks<=3,"
                                                     "fragmentation<=25%,growth<=4KiB,ooms==0,reserved<=1GB,");
  ASSERT_EQ(checks.size(), 8u);
  EXPECT_EQ(describe_check(checks[0]), "peak_allocated <= 2.00 GiB");
  EXPECT_EQ(describe_check(checks[1]), "leaked_bytes == 0 B");
  EXPECT_EQ(describe_check(checks[2]), "peak_allocated < 1.00 MiB");
  EXPECT_EQ(describe_check(checks[3]), "leaked_count <= 3");
  EXPECT_EQ(describe_check(checks[4]), "fragmentation <= 0.250");
  EXPECT_EQ(describe_check(checks[5]), "growth_bytes_per_iteration <= 4.00 KiB");
  EXPECT_EQ(describe_check(checks[6]), "ooms == 0");
  EXPECT_EQ(describe_check(checks[7]), "peak_reserved <= 953.67 MiB");
  EXPECT_EQ(parse_check_list("leaked==0")[0].metric, Metric::leaked_bytes);  // DESIGN.md's spelling

  auto error_of = [](const char* text) {
    try {
      parse_check_list(text);
    } catch (const CheckError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  // An empty list (an unset variable) checks nothing: an error, never a pass.
  EXPECT_EQ(error_of(""), "--check: an empty list checks nothing (an unset variable?); give limits such as "
                          "'peak<=2GiB,leaked==0'");
  EXPECT_EQ(error_of("peak<=1GiB,,leaked==0"), "--check: empty check in 'peak<=1GiB,,leaked==0'");
  EXPECT_EQ(error_of("peak"), "--check: 'peak' is not NAME<=VALUE, NAME<VALUE or NAME==VALUE");
  EXPECT_EQ(error_of("peak>=1GiB"), "--check: 'peak>=1GiB': the comparison must be <=, < or ==");
  EXPECT_EQ(error_of("peak=1GiB"), "--check: 'peak=1GiB': the comparison must be <=, < or ==");
  EXPECT_EQ(error_of("speed<=1"),
            "--check: unknown name 'speed' (known: peak_allocated, peak_reserved, leaked_bytes, leaked_count, "
            "growth_bytes_per_iteration, fragmentation, ooms, reserved_ratio)");
  EXPECT_EQ(error_of("peak<=lots"),
            "--check peak_allocated: 'lots' is not a size (bytes, or with a unit: 512MiB, 2GiB, 1.5GB)");
  EXPECT_EQ(error_of("ooms<=1.5"), "--check ooms: '1.5' is not a count (a whole number)");
  EXPECT_EQ(error_of("fragmentation<=2"),
            "--check fragmentation: '2' is not a fraction between 0 and 1 (0.25 or 25%)");
}

TEST(Check, ReservedRatioLimitsArePositiveDecimals) {
  const std::vector<Check> checks = parse_check_list("reserved_ratio<=1.25,reserved_ratio<2,reserved_ratio==1.2345");
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_EQ(checks[0].metric, Metric::reserved_ratio);
  EXPECT_EQ(checks[0].fraction_limit, 1.25);
  EXPECT_EQ(describe_check(checks[0]), "reserved_ratio <= 1.250");
  EXPECT_EQ(describe_check(checks[1]), "reserved_ratio < 2.000");
  EXPECT_EQ(describe_check(checks[2]), "reserved_ratio == 1.2345") << "the limit as written, not rounded";
  EXPECT_EQ(make_check(Metric::reserved_ratio, Comparison::at_most, " 0.5 ", "--max-reserved-ratio").fraction_limit,
            0.5);
  for (const char* bad : {"", " ", "0", "0.000", "-1", "-0.5", "x", "1.5x", "125%", "1e3", "nan", "inf", "."}) {
    try {
      make_check(Metric::reserved_ratio, Comparison::at_most, bad, "--max-reserved-ratio");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const CheckError& e) {
      EXPECT_EQ(e.what(), "--max-reserved-ratio: '" + std::string(bad) + "' is not a ratio greater than 0 (1.25)");
    }
  }
}

TEST(Check, GlobsAndSuppressionFiles) {
  EXPECT_TRUE(glob_match("cache_*", "cache_grow"));
  EXPECT_TRUE(glob_match("*::allocate*", "pool::allocate(unsigned long)"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(glob_match("a*b*c", "aXXbYY"));
  EXPECT_FALSE(glob_match("cache", "cache_grow"));  // whole names only
  EXPECT_TRUE(glob_match("f(int)", "f(int)"));      // brackets are literal
  EXPECT_FALSE(glob_match("?", "x"));               // only * is special
  // No exponential blow-up on a pathological pattern.
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*b", std::string(5000, 'a')));

  const Suppressions s = Suppressions::parse("# known leaks\n\n  warm_up_cache  \nthird_party::*  # vendor code\n");
  EXPECT_TRUE(s.matches("warm_up_cache"));
  EXPECT_TRUE(s.matches("third_party::init()"));
  EXPECT_FALSE(s.matches("main"));
  EXPECT_FALSE(s.matches("# known leaks"));
  // Without a label, the innermost frame alone: from `frames`, else `functions`
  // (null names never match); an outer caller never.
  EXPECT_TRUE(s.suppresses(Json::parse(R"J({"functions":["warm_up_cache","main"]})J")));
  EXPECT_FALSE(s.suppresses(Json::parse(R"J({"functions":["main","warm_up_cache"]})J")));
  EXPECT_TRUE(s.suppresses(Json::parse(R"J({"frames":[{"fn":"third_party::go(int)"},{"fn":"main"}]})J")));
  EXPECT_FALSE(s.suppresses(Json::parse(R"J({"frames":[{"fn":null},{"fn":"third_party::go"}]})J")));
  EXPECT_FALSE(Suppressions::parse("# nothing\n").suppresses(Json::parse(R"J({"functions":["a"]})J")));
}

TEST(Check, ModuleSuppressionsMatchAFramesObjectFileNamedOrNot) {
  const Suppressions s = Suppressions::parse("module: libc10_cuda.so  # PyTorch's cache\nmodule:/opt/vendor/*\nmain\n");
  EXPECT_TRUE(s.matches_module("/usr/lib/python3/site-packages/torch/lib/libc10_cuda.so"));
  EXPECT_TRUE(s.matches_module("libc10_cuda.so"));
  EXPECT_TRUE(s.matches_module("/opt/vendor/lib/libx.so"));  // a whole-path pattern
  EXPECT_FALSE(s.matches_module("/usr/lib/libc10_cuda.so.2"));
  EXPECT_FALSE(s.matches("libc10_cuda.so")) << "a module line is no function pattern";
  EXPECT_FALSE(s.matches("module:/opt/vendor/*"));
  // A frame without a function name (a stripped library's own code) is
  // reached by its module, where the label spans it.
  const Json torch_cache = Json::parse(R"J({"label":"cudaMalloc \u2190 train (train.py:3)","frames":[
      {"fn":"cudaMalloc","module":"/t/lib/libcudart.so.13"},
      {"fn":null,"module":"/t/lib/libc10_cuda.so","off":"0x1234"},
      {"py":true,"fn":"train","file":"/w/train.py","line":3},
      {"fn":"main","module":"/usr/bin/python3"}]})J");
  EXPECT_TRUE(s.suppresses(torch_cache));
  EXPECT_FALSE(s.suppresses(Json::parse(R"J({"frames":[{"fn":null,"module":"/t/lib/libcublas.so.13"}]})J")));
  EXPECT_TRUE(s.suppresses(Json::parse(R"J({"functions":["main"],"frames":[]})J")));  // function lines still work
  EXPECT_FALSE(Suppressions::parse("module:python3\n").suppresses(torch_cache)) << "beyond the label";
  // Only module lines: function names alone never match.
  const Suppressions modules_only = Suppressions::parse("module:libcublas*\n");
  EXPECT_FALSE(modules_only.empty());
  EXPECT_FALSE(modules_only.suppresses(Json::parse(R"J({"functions":["libcublas_init"]})J")));
  EXPECT_TRUE(modules_only.suppresses(Json::parse(R"J({"frames":[{"fn":null,"module":"/t/lib/libcublas.so.13"}]})J")));
  EXPECT_TRUE(Suppressions::parse("module:\n").empty()) << "an empty module pattern is ignored";
}

// The rule of check.h: a line matches the frames a site's label spans, by
// the names the label shows or their full names, never an outer caller.
TEST(Check, SuppressionsMatchWhatTheLabelShows) {
  // As shared_helper.jsonl's report has it: a helper, the caller that tells
  // the site apart, main.
  const Json site = Json::parse(R"J({"label":"device_alloc \u2190 keep_loss_for_logging","frames":[
      {"fn":"(anonymous namespace)::device_alloc(unsigned long)","module":"/opt/app/bin/toy","off":"0x18ae"},
      {"fn":"(anonymous namespace)::pool_grow(int)","module":"/opt/app/lib/libpool.so","off":"0x10"},
      {"fn":"(anonymous namespace)::keep_loss_for_logging(std::vector<void*>&)","module":"/opt/app/bin/toy",
       "off":"0x1728","file":"/src/toy/losses.cpp","line":12},
      {"fn":"main","module":"/opt/app/bin/toy","off":"0x132b","file":"/src/toy/main.cpp","line":3}]})J");
  for (const char* line : {"keep_loss_for_logging", "device_alloc", "keep_loss_*", "*keep_loss_for_logging*",
                           "(anonymous namespace)::keep_loss_for_logging(*", "pool_grow", "module:libpool.so",
                           "file:losses.cpp", "file:/src/toy/*"}) {
    EXPECT_TRUE(Suppressions::parse(line).suppresses(site)) << line;
  }
  for (const char* line : {"main", "keep_loss", "file:main.cpp", "module:libother.so", "file:toy"}) {
    EXPECT_FALSE(Suppressions::parse(line).suppresses(site)) << line;
  }
  // A label that grew to tell identical names apart: locations and a tag.
  const Json tagged = Json::parse(R"J({"label":"device_alloc (toy+0x18ae) \u2190 keep_loss_for_logging (losses.cpp:12) [stack 7]",
      "frames":)J" + site["frames"].dump() + "}");
  EXPECT_TRUE(Suppressions::parse("keep_loss_for_logging").suppresses(tagged));
  EXPECT_FALSE(Suppressions::parse("main").suppresses(tagged));
  // A Python site reached through ctypes: the label starts at the Python frame.
  const Json python = Json::parse(R"J({"label":"device_alloc (hooks.py:4) \u2190 Trainer.step (train.py:9)","frames":[
      {"fn":"ffi_call","module":"/usr/lib/libffi.so.8"},
      {"py":true,"fn":"device_alloc","file":"/w/hooks.py","line":4},
      {"py":true,"fn":"Trainer.step","file":"/w/train.py","line":9},
      {"py":true,"fn":"main","file":"/w/train.py","line":30}]})J");
  EXPECT_TRUE(Suppressions::parse("Trainer.*").suppresses(python));
  EXPECT_TRUE(Suppressions::parse("module:hooks.py").suppresses(python));
  EXPECT_TRUE(Suppressions::parse("file:train.py").suppresses(python));
  EXPECT_FALSE(Suppressions::parse("main").suppresses(python));
}

// A report with every key check reads, as REPORT_FORMAT.md describes them.
Json full_report() {
  return Json::parse(R"({
    "peak_allocated": 3221225472, "peak_reserved": 4294967296, "leaked_bytes": 12288, "leaked_count": 3,
    "ooms": 2,
    "leaks": [
      {"stack": 4, "bytes": 8192, "count": 2, "frames": [{"fn": "warm_up_cache"}, {"fn": "main"}]},
      {"stack": 0, "bytes": 4096, "count": 1, "frames": []}],
    "growth": [
      {"stack": 7, "functions": ["Logger::append", "train_step"], "bytes_per_iteration": 65536},
      {"stack": 8, "functions": ["history_push", "train_step"], "bytes_per_iteration": 1024}],
    "growth_bytes_per_iteration": 65536,
    "fragmentation": {"samples": 3, "at_peak_reserved": 0.3125}
  })");
}

std::vector<std::string> messages(const std::vector<CheckResult>& results) {
  std::vector<std::string> out;
  for (const CheckResult& r : results) {
    const char* status = r.status == CheckResult::Status::pass ? "pass: " : r.status == CheckResult::Status::fail ? "fail: " : "n/a: ";
    out.push_back(status + r.message);
  }
  return out;
}

TEST(Check, VerdictsOnTheReportKeys) {
  const std::vector<Check> checks = parse_check_list(
      "peak<=2GiB,reserved<=4GiB,leaked<=12KiB,leaks<3,growth<=32KiB,fragmentation<=0.25,ooms==0");
  EXPECT_EQ(messages(evaluate_checks(full_report(), checks, Suppressions{})),
            (std::vector<std::string>{"fail: peak allocated 3.00 GiB > 2.00 GiB",
                                      "pass: peak reserved 4.00 GiB <= 4.00 GiB",
                                      "pass: leaked 12.00 KiB <= 12.00 KiB",
                                      "fail: leaked allocations 3 >= 3 (most with no stack captured: 2 allocations)",
                                      "fail: growth per iteration 64.00 KiB > 32.00 KiB (most from Logger::append: 64.00 KiB per iteration)",
                                      "fail: fragmentation at peak reserved 0.312 > 0.250",
                                      "fail: out-of-memory failures 2 != 0"}));
}

// peak_reserved / peak_allocated, the figures `report` prints.
Json peaks_report(std::uint64_t allocated, std::uint64_t reserved) {
  Json report = full_report();
  report["peak_allocated"] = allocated;
  report["peak_reserved"] = reserved;
  return report;
}

TEST(Check, ReservedRatioIsPeakReservedOverPeakAllocated) {
  const Json ratio_1_5 = peaks_report(4096, 6144);
  EXPECT_EQ(messages(evaluate_checks(ratio_1_5, parse_check_list("reserved_ratio<=1.4,reserved_ratio<=1.5,"
                                                                 "reserved_ratio<1.5,reserved_ratio<=1.6"),
                                     Suppressions{})),
            (std::vector<std::string>{"fail: peak reserved / peak allocated 1.500 > 1.400",
                                      // Equal holds, as it does for sizes and counts.
                                      "pass: peak reserved / peak allocated 1.500 <= 1.500",
                                      "fail: peak reserved / peak allocated 1.500 >= 1.500",
                                      "pass: peak reserved / peak allocated 1.500 <= 1.600"}));
  // Equal at the limit's own decimals, with quotients that are not exact in binary.
  EXPECT_TRUE(evaluate_checks(peaks_report(5000, 6000), parse_check_list("reserved_ratio<=1.2"), {})[0].passed());
  // Just over the limit: more decimals, never "1.400 > 1.400".
  EXPECT_EQ(evaluate_checks(peaks_report(10000, 14001), parse_check_list("reserved_ratio<=1.4"), {})[0].message,
            "peak reserved / peak allocated 1.4001 > 1.400");

  // Nothing allocated: undefined, a pass that says why (no division by zero).
  const std::vector<CheckResult> empty = evaluate_checks(peaks_report(0, 0), parse_check_list("reserved_ratio<=1"), {});
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].status, CheckResult::Status::pass);
  EXPECT_TRUE(empty[0].undefined);
  EXPECT_EQ(empty[0].message, "peak reserved / peak allocated undefined: nothing was allocated");
  EXPECT_TRUE(evaluate_checks(peaks_report(0, 2 << 20), parse_check_list("reserved_ratio<=1"), {})[0].undefined);
  EXPECT_FALSE(evaluate_checks(ratio_1_5, parse_check_list("reserved_ratio<=2"), {})[0].undefined);

  // Allocations without any reserved memory: the trace has no segment
  // events, and 0 would pass any limit; a report without the keys neither.
  EXPECT_EQ(messages(evaluate_checks(peaks_report(4096, 0), parse_check_list("reserved_ratio<=1"), {})),
            std::vector<std::string>{"n/a: peak reserved / peak allocated not available in this trace"});
  Json no_reserved = full_report();
  no_reserved.erase("peak_reserved");
  EXPECT_EQ(evaluate_checks(no_reserved, parse_check_list("reserved_ratio<=9"), {})[0].status,
            CheckResult::Status::unavailable);
}

TEST(Check, SuppressionsRemoveKnownLeaksAndGrowth) {
  const std::vector<Check> checks = parse_check_list("leaked<=4KiB,leaks<=1,growth<=1KiB");
  const Suppressions known = Suppressions::parse("warm_up_cache\nLogger::*\n");
  EXPECT_EQ(messages(evaluate_checks(full_report(), checks, known)),
            (std::vector<std::string>{"pass: leaked 4.00 KiB (after suppressions) <= 4.00 KiB",
                                      "pass: leaked allocations 1 (after suppressions) <= 1",
                                      "pass: growth per iteration 1.00 KiB (after suppressions) <= 1.00 KiB"}));
}

TEST(Check, EachSuppressionLineSaysWhatItCovered) {
  Json report = full_report();
  report["leaks"][0]["label"] = "warm_up_cache";
  const Suppressions s = Suppressions::parse("# known\nwarm_up_cache\nmain\nLogger::*\n*\n");
  const std::vector<SuppressionUse> uses = suppression_uses(report, s);
  ASSERT_EQ(uses.size(), 4u);
  EXPECT_EQ(describe_use(uses[0], s), "suppressed by 'warm_up_cache' (line 2): 2 leaked allocations, 8.00 KiB");
  EXPECT_FALSE(uses[1].matched()) << "main is an outer frame of every site";
  EXPECT_EQ(describe_use(uses[1], s), "suppressed by 'main' (line 3): nothing");
  EXPECT_EQ(describe_use(uses[2], s), "suppressed by 'Logger::*' (line 4): 1 growing site, 64.00 KiB per iteration");
  // A line that matches everything says so: every leak group with a stack and every growing site.
  EXPECT_EQ(describe_use(uses[3], s),
            "suppressed by '*' (line 5): 2 leaked allocations, 8.00 KiB; 2 growing sites, 65.00 KiB per iteration");
}

TEST(Check, AnIncompleteTraceSaysWhy) {
  Json report = full_report();
  report["has_end"] = true;
  report["truncated"] = false;
  report["bad_lines"] = 0;
  report["end"] = Json::parse(R"({"t":9,"reason":"exit","live":0,"live_bytes":0,"dropped":0})");
  EXPECT_EQ(incomplete_reason(report), "");
  report["end"]["reason"] = "snapshot";  // a PyTorch snapshot is complete as it is
  EXPECT_EQ(incomplete_reason(report), "");
  report["end"]["reason"] = "killed";
  EXPECT_EQ(incomplete_reason(report),
            "the program was killed and its trace completed afterwards (what was live then is no leak)");
  report["end"]["reason"] = "exit";
  report["end"]["dropped"] = 1;
  EXPECT_EQ(incomplete_reason(report), "the writer dropped 1 event (leaks and peaks may be off)");
  report["end"]["dropped"] = 0;
  report["bad_lines"] = 3;
  EXPECT_EQ(incomplete_reason(report), "3 lines could not be read");
  report["bad_lines"] = 0;
  report["truncated"] = true;
  EXPECT_EQ(incomplete_reason(report), "the trace's last line is cut off (the program was cut short)");
  report["has_end"] = false;
  report["end"] = nullptr;
  report["bad_lines"] = 2;
  EXPECT_EQ(incomplete_reason(report), "the trace has no end line (the program was cut short); 2 lines could not be read");
}

TEST(Check, GrowthThatCouldNotBeAssessedFailsAGrowthLimitUnlessAllowed) {
  Json unassessed = full_report();
  unassessed["iterations"] = Json{{"source", "none"}, {"count", 0}};
  unassessed["growth"] = Json::array();
  unassessed["growth_bytes_per_iteration"] = 0;
  const std::vector<Check> checks = parse_check_list("growth<=1KiB,ooms<=100");
  const std::vector<CheckResult> strict = evaluate_checks(unassessed, checks, Suppressions{});
  EXPECT_EQ(strict[0].status, CheckResult::Status::fail);
  EXPECT_EQ(strict[0].message,
            "growth per iteration not assessed: no iterations found (no mark repeats 3 times, no period in any "
            "thread's allocations); mark each step (cumemtrace_mark(\"step N\") or an NVTX range per step), name "
            "the mark that does with --iteration-marker NAME, or pass --allow-unassessed");
  EXPECT_TRUE(strict[1].passed());  // the other limits are judged as ever
  const std::vector<CheckResult> allowed = evaluate_checks(unassessed, checks, Suppressions{}, true);
  EXPECT_TRUE(allowed[0].passed());
  EXPECT_TRUE(allowed[0].undefined);
  EXPECT_NE(allowed[0].message.find("not assessed: no iterations found"), std::string::npos);
  EXPECT_NE(allowed[0].message.find("passed by --allow-unassessed"), std::string::npos);
  // Iterations by --iteration-marker: the reason names the mark.
  Json by_marker = unassessed;
  by_marker["iterations"]["marker"] = "step";
  by_marker["iterations"]["marker_count"] = 2;
  EXPECT_EQ(evaluate_checks(by_marker, checks, Suppressions{})[0].message.rfind(
                "growth per iteration not assessed: the mark 'step' (--iteration-marker) was pushed 2 times, and "
                "iterations need 3; mark each step",
                0),
            0u);
  // Iterations found: judged on the figure, allowed or not.
  Json assessed = unassessed;
  assessed["iterations"]["source"] = "period";
  const CheckResult judged = evaluate_checks(assessed, checks, Suppressions{}, true)[0];
  EXPECT_TRUE(judged.passed());
  EXPECT_FALSE(judged.undefined);
}

TEST(Check, AKeyTheReportLacksIsNeverAPass) {
  // A report from before growth and fragmentation existed, and one whose
  // trace reserved nothing (at_peak_reserved null).
  Json old = full_report();
  old.erase("growth");
  old.erase("growth_bytes_per_iteration");
  old.erase("fragmentation");
  old.erase("ooms");
  const std::vector<Check> checks = parse_check_list("growth<=1GiB,fragmentation<=1,ooms<=100");
  EXPECT_EQ(messages(evaluate_checks(old, checks, Suppressions{})),
            (std::vector<std::string>{"n/a: growth per iteration not available in this trace",
                                      "n/a: fragmentation at peak reserved not available in this trace",
                                      "n/a: out-of-memory failures not available in this trace"}));
  Json nothing_reserved = full_report();
  nothing_reserved["fragmentation"]["at_peak_reserved"] = nullptr;
  EXPECT_EQ(evaluate_checks(nothing_reserved, parse_check_list("fragmentation<=1"), Suppressions{})[0].status,
            CheckResult::Status::unavailable);
  // Only the summary key: usable, but not with suppressions (which entry?).
  Json summary_only = full_report();
  summary_only.erase("growth");
  EXPECT_EQ(evaluate_checks(summary_only, parse_check_list("growth<=64KiB"), Suppressions{})[0].status,
            CheckResult::Status::pass);
  EXPECT_EQ(evaluate_checks(summary_only, parse_check_list("growth<=64KiB"), Suppressions::parse("x"))[0].status,
            CheckResult::Status::unavailable);
  Json no_leak_list = full_report();
  no_leak_list.erase("leaks");
  EXPECT_EQ(evaluate_checks(no_leak_list, parse_check_list("leaked<=1GiB"), Suppressions::parse("x"))[0].status,
            CheckResult::Status::unavailable);
}

TEST(Check, JUnitXmlEscapesEverythingFromTheTrace) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape(std::string("x\0y\x01\t\n", 6)), "x\xEF\xBF\xBDy\xEF\xBF\xBD&#9;&#10;");
  EXPECT_EQ(xml_escape("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // valid UTF-8 kept
  EXPECT_EQ(xml_escape("\xff\xc3"), "\xEF\xBF\xBD\xEF\xBF\xBD");                    // invalid replaced
  EXPECT_EQ(xml_escape("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");    // a surrogate

  TraceVerdict ok{"runs/<ok>.jsonl", "", evaluate_checks(full_report(), parse_check_list("ooms<=2"), {}), "", {}};
  TraceVerdict bad{"b&d.jsonl", "", evaluate_checks(full_report(), parse_check_list("peak<1GiB"), {}), "", {}};
  TraceVerdict unreadable{"gone.jsonl", "gone.jsonl: cannot open: No such file or directory", {}, "", {}};
  EXPECT_EQ(junit_xml({ok, bad, unreadable}),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<testsuites name=\"cumemtrace check\" tests=\"3\" failures=\"1\" errors=\"1\">\n"
            "  <testsuite name=\"runs/&lt;ok&gt;.jsonl\" tests=\"1\" failures=\"0\" errors=\"0\">\n"
            "    <testcase classname=\"cumemtrace.check\" name=\"ooms &lt;= 2\"/>\n"
            "  </testsuite>\n"
            "  <testsuite name=\"b&amp;d.jsonl\" tests=\"1\" failures=\"1\" errors=\"0\">\n"
            "    <testcase classname=\"cumemtrace.check\" name=\"peak_allocated &lt; 1.00 GiB\">\n"
            "      <failure message=\"peak allocated 3.00 GiB &gt;= 1.00 GiB (trace b&amp;d.jsonl)\">"
            "peak allocated 3.00 GiB &gt;= 1.00 GiB (trace b&amp;d.jsonl)</failure>\n"
            "    </testcase>\n"
            "  </testsuite>\n"
            "  <testsuite name=\"gone.jsonl\" tests=\"1\" failures=\"0\" errors=\"1\">\n"
            "    <testcase classname=\"cumemtrace.check\" name=\"read trace\">\n"
            "      <error message=\"gone.jsonl: cannot open: No such file or directory\"/>\n"
            "    </testcase>\n"
            "  </testsuite>\n"
            "</testsuites>\n");

  // An incomplete trace not judged: one failing test saying why; notes in the suite's output.
  TraceVerdict cut{"cut.jsonl", "", {}, "incomplete trace: no end; pass --allow-incomplete to judge it anyway", {}};
  TraceVerdict noted{"n.jsonl", "", evaluate_checks(full_report(), parse_check_list("ooms<=2"), {}), "",
                     {"suppressed by 'x' (line 1): 1 leaked allocation, 4.00 KiB", "a<b"}};
  EXPECT_EQ(junit_xml({cut, noted}),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<testsuites name=\"cumemtrace check\" tests=\"2\" failures=\"1\" errors=\"0\">\n"
            "  <testsuite name=\"cut.jsonl\" tests=\"1\" failures=\"1\" errors=\"0\">\n"
            "    <testcase classname=\"cumemtrace.check\" name=\"complete trace\">\n"
            "      <failure message=\"incomplete trace: no end; pass --allow-incomplete to judge it anyway (trace "
            "cut.jsonl)\">incomplete trace: no end; pass --allow-incomplete to judge it anyway (trace cut.jsonl)"
            "</failure>\n"
            "    </testcase>\n"
            "  </testsuite>\n"
            "  <testsuite name=\"n.jsonl\" tests=\"1\" failures=\"0\" errors=\"0\">\n"
            "    <testcase classname=\"cumemtrace.check\" name=\"ooms &lt;= 2\"/>\n"
            "    <system-out>suppressed by &apos;x&apos; (line 1): 1 leaked allocation, 4.00 KiB&#10;a&lt;b</system-out>\n"
            "  </testsuite>\n"
            "</testsuites>\n");

  // A pass without a value says why in the test's output; a failing ratio
  // is a failure like any other.
  Json nothing = full_report();
  nothing["peak_allocated"] = 0;
  TraceVerdict empty{"empty.jsonl", "", evaluate_checks(nothing, parse_check_list("reserved_ratio<=1.25"), {}), "", {}};
  TraceVerdict over{"over.jsonl", "", evaluate_checks(full_report(), parse_check_list("reserved_ratio<=1.25"), {}), "", {}};
  EXPECT_EQ(junit_xml({empty, over}),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<testsuites name=\"cumemtrace check\" tests=\"2\" failures=\"1\" errors=\"0\">\n"
            "  <testsuite name=\"empty.jsonl\" tests=\"1\" failures=\"0\" errors=\"0\">\n"
            "    <testcase classname=\"cumemtrace.check\" name=\"reserved_ratio &lt;= 1.250\">\n"
            "      <system-out>peak reserved / peak allocated undefined: nothing was allocated</system-out>\n"
            "    </testcase>\n"
            "  </testsuite>\n"
            "  <testsuite name=\"over.jsonl\" tests=\"1\" failures=\"1\" errors=\"0\">\n"
            "    <testcase classname=\"cumemtrace.check\" name=\"reserved_ratio &lt;= 1.250\">\n"
            "      <failure message=\"peak reserved / peak allocated 1.333 &gt; 1.250 (trace over.jsonl)\">"
            "peak reserved / peak allocated 1.333 &gt; 1.250 (trace over.jsonl)</failure>\n"
            "    </testcase>\n"
            "  </testsuite>\n"
            "</testsuites>\n");
}

using testing::cli;

// 2 KiB then 6 KiB allocated, 4 KiB of it still live at the end (one leak
// from warm_up_cache), 8 KiB reserved.
std::string leaky_trace() {
  return testing::join_lines({
      testing::header_line(),
      R"({"ev":"stack","id":1,"frames":[{"ip":"0x10","fn":"warm_up_cache","module":"/bin/app","off":"0x10"}]})",
      R"({"ev":"segment_alloc","t":1,"dev":0,"ptr":"0x1000","size":8192,"api":"cudaMalloc"})",
      testing::alloc_line(2, "0x1000", 2048, 0, 1),
      testing::alloc_line(3, "0x2000", 4096),
      testing::free_line(4, "0x2000", 4096),
      testing::alloc_line(5, "0x3000", 2048),
      testing::end_line(6),
  });
}

TEST(Check, CommandExitCodesMessagesAndJUnit) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), leaky_trace());
  const CommandResult pass = cli({"check", tmp.path("t.jsonl"), "--max-peak-allocated", "6KiB", "--max-ooms", "0"});
  EXPECT_EQ(pass.exit_code, 0) << pass.err;
  EXPECT_EQ(pass.err, "");
  EXPECT_EQ(pass.out, "check " + tmp.path("t.jsonl") + "\n  ok    peak allocated 6.00 KiB <= 6.00 KiB\n"
                                                         "  ok    out-of-memory failures 0 <= 0\n");

  const CommandResult fail = cli({"check", tmp.path("t.jsonl"), "--max-peak-allocated", "5KiB", "--max-leaked-bytes",
                                  "0", "--max-peak-reserved", "1GiB", "--junit", tmp.path("junit.xml")});
  EXPECT_EQ(fail.exit_code, 1);
  // Each failing line names the call site that weighs most.
  EXPECT_EQ(fail.err, "cumemtrace: check failed: peak allocated 6.00 KiB > 5.00 KiB (most live at the peak with no "
                      "stack captured: 4.00 KiB) (trace " + tmp.path("t.jsonl") +
                          ")\ncumemtrace: check failed: leaked 4.00 KiB > 0 B (most with no stack captured: 2.00 KiB) "
                          "(trace " + tmp.path("t.jsonl") + ")\n");
  const std::string junit = testing::read_file(tmp.path("junit.xml"));
  EXPECT_NE(junit.find("tests=\"3\" failures=\"2\""), std::string::npos) << junit;

  testing::write_file(tmp.path("known.supp"), "warm_up_*\n");
  const CommandResult suppressed = cli({"check", tmp.path("t.jsonl"), "--max-leaked-bytes", "2KiB",
                                        "--max-leaked-count", "1", "--suppressions", tmp.path("known.supp")});
  EXPECT_EQ(suppressed.exit_code, 0) << suppressed.err;
  // The same leak by its module: the report's frames carry it through.
  testing::write_file(tmp.path("module.supp"), "module:app\n");
  const CommandResult by_module = cli({"check", tmp.path("t.jsonl"), "--max-leaked-bytes", "2KiB",
                                       "--max-leaked-count", "1", "--suppressions", tmp.path("module.supp")});
  EXPECT_EQ(by_module.exit_code, 0) << by_module.err;
  testing::write_file(tmp.path("other.supp"), "module:libother.so\n");
  EXPECT_EQ(cli({"check", tmp.path("t.jsonl"), "--max-leaked-count", "1", "--suppressions", tmp.path("other.supp")})
                .exit_code,
            1);

  // Dropped events: no verdict, one line saying why and what to do; with
  // --allow-incomplete judged, and said beside the verdicts.
  testing::write_file(tmp.path("dropped.jsonl"),
                      testing::join_lines({testing::header_line(), testing::alloc_line(2, "0x1000", 2048),
                                           R"({"ev":"end","t":6,"reason":"exit","live":1,"live_bytes":2048,"dropped":7})"}));
  const CommandResult dropped = cli({"check", tmp.path("dropped.jsonl"), "--max-leaked-bytes", "2KiB"});
  EXPECT_EQ(dropped.exit_code, 1) << dropped.err;
  EXPECT_EQ(dropped.err, "cumemtrace: check failed: incomplete trace: the writer dropped 7 events (leaks and peaks may "
                         "be off); pass --allow-incomplete to judge it anyway (trace " + tmp.path("dropped.jsonl") + ")\n");
  const CommandResult allowed =
      cli({"check", tmp.path("dropped.jsonl"), "--max-leaked-bytes", "2KiB", "--allow-incomplete"});
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_EQ(allowed.out, "check " + tmp.path("dropped.jsonl") +
                             "\n  note: incomplete trace, judged anyway (--allow-incomplete): the writer dropped 7 "
                             "events (leaks and peaks may be off)\n"
                             "  ok    leaked 2.00 KiB <= 2.00 KiB\n");
  // The issue's case: a header alone (the run cut before its first event).
  testing::write_file(tmp.path("header.jsonl"), testing::header_line() + "\n");
  const CommandResult header_only = cli({"check", tmp.path("header.jsonl"), "--max-leaked-bytes", "0"});
  EXPECT_EQ(header_only.exit_code, 1) << header_only.err;
  EXPECT_NE(header_only.err.find("the trace has no end line"), std::string::npos) << header_only.err;

  // Several traces: every one is checked, the verdict covers all.
  testing::write_file(tmp.path("small.jsonl"), testing::join_lines({testing::header_line(), testing::end_line(1)}));
  const CommandResult two = cli({"check", tmp.path("small.jsonl"), tmp.path("t.jsonl"), "--max-peak-allocated", "1KiB"});
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_EQ(two.err, "cumemtrace: check failed: peak allocated 6.00 KiB > 1.00 KiB (most live at the peak with no "
                     "stack captured: 4.00 KiB) (trace " + tmp.path("t.jsonl") + ")\n");

  // Bad usage and unreadable input: exit 2, one line.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"check", tmp.path("t.jsonl")},
           {"check", tmp.path("t.jsonl"), "--max-peak-allocated", "2 gigs"},
           {"check", tmp.path("t.jsonl"), "--max-leaked-count", "-1"},
           {"check", tmp.path("t.jsonl"), "--max-fragmentation", "1.2"},
           {"check", tmp.path("t.jsonl"), "--max-ooms", "1", "--max-peak-allocated", ""},  // not "no limit"
           {"check", tmp.path("t.jsonl"), "--max-leaked-bytes", ""},
           {"check", tmp.path("t.jsonl"), "--max-ooms", "1", "--suppressions", tmp.path("none.supp")},
           {"check", tmp.path("missing.jsonl"), "--max-ooms", "1"},
       }) {
    const CommandResult r = cli(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_EQ(r.err.rfind("cumemtrace: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  }
}

// 4 KiB allocated at the peak out of 6 KiB reserved: a ratio of 1.5.
std::string ratio_1_5_trace() {
  return testing::join_lines({
      testing::header_line(),
      R"({"ev":"segment_alloc","t":1,"dev":0,"ptr":"0x1000","size":6144,"api":"cudaMalloc"})",
      testing::alloc_line(2, "0x1000", 1024),
      testing::alloc_line(3, "0x1400", 3072),
      testing::free_line(4, "0x1400", 3072),
      testing::end_line(5),
  });
}

TEST(Check, CommandMaxReservedRatio) {
  TempDir tmp;
  const std::string trace = tmp.path("r.jsonl");
  testing::write_file(trace, ratio_1_5_trace());
  const CommandResult over = cli({"check", trace, "--max-reserved-ratio", "1.4"});
  EXPECT_EQ(over.exit_code, 1) << over.err;
  EXPECT_EQ(over.out, "check " + trace + "\n  FAIL  peak reserved / peak allocated 1.500 > 1.400\n");
  EXPECT_EQ(over.err, "cumemtrace: check failed: peak reserved / peak allocated 1.500 > 1.400 (trace " + trace + ")\n");

  const CommandResult at = cli({"check", trace, "--max-reserved-ratio", "1.5", "--junit", tmp.path("junit.xml")});
  EXPECT_EQ(at.exit_code, 0) << at.err;
  EXPECT_EQ(at.err, "");
  EXPECT_EQ(at.out, "check " + trace + "\n  ok    peak reserved / peak allocated 1.500 <= 1.500\n");
  EXPECT_NE(testing::read_file(tmp.path("junit.xml")).find("name=\"reserved_ratio &lt;= 1.500\"/>"), std::string::npos);

  // Nothing allocated: passes, and says the ratio is undefined.
  testing::write_file(tmp.path("empty.jsonl"), testing::join_lines({testing::header_line(), testing::end_line(1)}));
  const CommandResult empty = cli({"check", tmp.path("empty.jsonl"), "--max-reserved-ratio", "1.25"});
  EXPECT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(empty.err, "");
  EXPECT_EQ(empty.out, "check " + tmp.path("empty.jsonl") +
                           "\n  ok    peak reserved / peak allocated undefined: nothing was allocated\n");

  // A bad value: exit 2 and one line, before any trace is read.
  for (const char* bad : {"", "x", "0", "-1.5", "150%"}) {
    const CommandResult r = cli({"check", trace, "--max-reserved-ratio", bad});
    EXPECT_EQ(r.exit_code, 2) << "'" << bad << "': " << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err,
              "cumemtrace: --max-reserved-ratio: '" + std::string(bad) + "' is not a ratio greater than 0 (1.25)\n");
  }
  EXPECT_NE(cli({"check", "--help"}).out.find("--max-reserved-ratio"), std::string::npos);
}

// `run --check` with a stand-in program that writes a trace where the
// template says (as the preload would) and a forked child's trace.
TEST(Check, RunChecksTheTracesTheProgramWrote) {
  TempDir tmp;
  testing::write_file(tmp.path("leaky.jsonl"), leaky_trace());
  testing::write_file(tmp.path("run.999999.jsonl"), leaky_trace());  // an older run's: not checked
  const testing::EnvChanges env{{"CUMEMTRACE_LIBRARY", testing::empty_preload(1)}};
  const std::string write_traces = "cp " + tmp.path("leaky.jsonl") + " " + tmp.path("run.$$.jsonl") + "; (cp " +
                                   tmp.path("leaky.jsonl") + " " + tmp.path("run.child$$.jsonl") + ")";
  const std::string output = tmp.path("run.%p.jsonl");

  const CommandResult fail = cli({"run", "-o", output, "--check", "peak<=4KiB,leaked==0", "--", "sh", "-c", write_traces}, env);
  EXPECT_EQ(fail.exit_code, 1) << fail.err;
  EXPECT_EQ(std::count(fail.err.begin(), fail.err.end(), '\n'), 5) << fail.err;  // "trace written" + 2 x 2 violations
  EXPECT_NE(fail.err.find("check failed: peak allocated 6.00 KiB > 4.00 KiB (most live at the peak with no stack "
                          "captured: 4.00 KiB) (trace " + tmp.path("run.child")),
            std::string::npos) << fail.err;
  EXPECT_EQ(fail.err.find("999999"), std::string::npos) << fail.err;

  const CommandResult pass = cli({"run", "-o", output, "--check", "peak_allocated<=1MiB", "--", "sh", "-c", write_traces}, env);
  EXPECT_EQ(pass.exit_code, 0) << pass.err;

  // 8 KiB reserved for a 6 KiB peak: 1.333 in both traces.
  const CommandResult ratio =
      cli({"run", "-o", output, "--check", "reserved_ratio<=1.25", "--", "sh", "-c", write_traces}, env);
  EXPECT_EQ(ratio.exit_code, 1) << ratio.err;
  EXPECT_NE(
      ratio.err.find("check failed: peak reserved / peak allocated 1.333 > 1.250 (trace " + tmp.path("run.child")),
      std::string::npos)
      << ratio.err;
  EXPECT_EQ(
      cli({"run", "-o", output, "--check", "reserved_ratio<=1.34", "--", "sh", "-c", write_traces}, env).exit_code, 0);

  // The program's own failure wins; the checks are still reported.
  const CommandResult program_failed =
      cli({"run", "-o", output, "--check", "peak<=1KiB", "--", "sh", "-c", write_traces + "; exit 3"}, env);
  EXPECT_EQ(program_failed.exit_code, 3);
  EXPECT_NE(program_failed.err.find("check failed"), std::string::npos);

  // Nothing written: not a pass.
  const CommandResult nothing = cli({"run", "-o", output, "--check", "peak<=1KiB", "--", "true"}, env);
  EXPECT_EQ(nothing.exit_code, 1);
  EXPECT_NE(nothing.err.find("check failed: no trace was written"), std::string::npos) << nothing.err;

  // A wrong or empty list, an empty output: exit 2 before the program runs.
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-o", output, "--check", "peak>1KiB"}, {"-o", output, "--check", ""}, {"-o", output, "--check", " "},
           {"-o", "", "--check", "peak<=1KiB"}, {"--output", ""}}) {
    std::vector<std::string> args{"run"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "sh", "-c", "touch " + tmp.path("ran")});
    const CommandResult bad = cli(args, env);
    EXPECT_EQ(bad.exit_code, 2) << flags.back() << ": " << bad.err;
    EXPECT_FALSE(testing::file_exists(tmp.path("ran"))) << flags.back();
  }
  EXPECT_EQ(cli({"run", "--check", "", "--", "true"}, env).err,
            "cumemtrace: --check: an empty list checks nothing (an unset variable?); give limits such as "
            "'peak<=2GiB,leaked==0'\n");

  // A trace the program cut short (no end line): no verdict, unless allowed.
  const std::string cut_traces = "head -n 3 " + tmp.path("leaky.jsonl") + " > " + tmp.path("run.$$.jsonl");
  const CommandResult cut = cli({"run", "-o", output, "--check", "peak<=1MiB", "--", "sh", "-c", cut_traces}, env);
  EXPECT_EQ(cut.exit_code, 1) << cut.err;
  EXPECT_NE(cut.err.find("check failed: incomplete trace: the trace has no end line (the program was cut short); "
                         "pass --allow-incomplete to judge it anyway"),
            std::string::npos) << cut.err;
  EXPECT_EQ(cli({"run", "-o", output, "--check", "peak<=1MiB", "--allow-incomplete", "--", "sh", "-c", cut_traces}, env)
                .exit_code,
            0);
}

// 10 MiB reserved at the peak with 1 MiB allocated (0.900 unused); 8 MiB
// allocated before, at a lower peak, and 9 MiB after, once the unused
// segment went back: neither may make the peak look full.
// (fragmentation_test.cpp has the same trace as events.)
std::string fragmented_peak_trace() {
  return testing::join_lines({
      testing::header_line(),
      R"({"ev":"segment_alloc","t":1,"dev":0,"ptr":"0x10000000","size":9437184,"api":"cudaMalloc"})",
      testing::alloc_line(2, "0x10000000", 8388608),
      testing::free_line(3, "0x10000000", 8388608),
      testing::alloc_line(4, "0x10000000", 1048576),
      R"({"ev":"segment_alloc","t":5,"dev":0,"ptr":"0x20000000","size":1048576,"api":"cudaMalloc"})",
      R"({"ev":"segment_free","t":6,"dev":0,"ptr":"0x20000000","size":1048576})",
      testing::alloc_line(7, "0x10100000", 8388608),
      testing::end_line(8),
  });
}

TEST(Check, CommandMaxFragmentationAtTheReservedPeak) {
  TempDir tmp;
  const std::string trace = tmp.path("f.jsonl");
  testing::write_file(trace, fragmented_peak_trace());
  const CommandResult over = cli({"check", trace, "--max-fragmentation", "0.5"});
  EXPECT_EQ(over.exit_code, 1) << over.err;
  EXPECT_EQ(over.out, "check " + trace + "\n  FAIL  fragmentation at peak reserved 0.900 > 0.500\n");
  const CommandResult at = cli({"check", trace, "--max-fragmentation", "0.9"});
  EXPECT_EQ(at.exit_code, 0) << at.err;
  EXPECT_EQ(at.out, "check " + trace + "\n  ok    fragmentation at peak reserved 0.900 <= 0.900\n");
}

}  // namespace
}  // namespace cumemtrace::analyzer
