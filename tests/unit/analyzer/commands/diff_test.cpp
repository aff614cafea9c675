// `cumemtrace diff`: figures, per-device rows, call sites matched by function
// names (never stack ids), regressions for CI, and the command's exit codes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/diff.h"

namespace cumemtrace::analyzer {
namespace {

using Json = nlohmann::ordered_json;
using testing::CommandResult;
using testing::TempDir;

// Two runs of one program: the same sites under different stack ids, one
// site new, one gone, a second device in the new run only.
Json base_report() {
  return Json::parse(R"({
    "peak_allocated": 1073741824, "peak_reserved": 2147483648, "leaked_bytes": 12288, "leaked_count": 3,
    "growth_bytes_per_iteration": 1024, "ooms": 0, "allocs": 100, "frees": 97,
    "devices": {"0": {"peak_allocated": 1073741824, "peak_reserved": 2147483648, "leaked_bytes": 12288}},
    "leaks": [
      {"stack": 4, "bytes": 8192, "count": 2, "frames": [{"fn": "cache_grow"}, {"fn": "main"}]},
      {"stack": 9, "bytes": 4096, "count": 1, "frames": [{"fn": null, "module": "/lib/x.so", "off": "0x10"}]}],
    "top_at_peak": [
      {"stack": 4, "bytes": 805306368, "count": 3, "functions": ["Model::forward", "main"]},
      {"stack": 5, "bytes": 268435456, "count": 1, "functions": ["Optimizer::step", "main"]}]
  })");
}

Json new_report() {
  return Json::parse(R"({
    "peak_allocated": 1288490189, "peak_reserved": 2147483648, "leaked_bytes": 1060864, "leaked_count": 4,
    "growth_bytes_per_iteration": 1024, "ooms": 1, "allocs": 120, "frees": 116,
    "devices": {"0": {"peak_allocated": 1073741824, "peak_reserved": 2147483648, "leaked_bytes": 12288},
                "1": {"peak_allocated": 214748365, "peak_reserved": 0, "leaked_bytes": 1048576}},
    "leaks": [
      {"stack": 12, "bytes": 1048576, "count": 1, "frames": [{"fn": "new_buffer"}, {"fn": "main"}]},
      {"stack": 3, "bytes": 8192, "count": 2, "frames": [{"fn": "cache_grow"}, {"fn": "main"}]},
      {"stack": 7, "bytes": 4096, "count": 1, "frames": [{"fn": null, "module": "/lib/x.so", "off": "0x10"}]}],
    "top_at_peak": [
      {"stack": 1, "bytes": 1020054733, "count": 4, "functions": ["Model::forward", "main"]},
      {"stack": 2, "bytes": 268435456, "count": 1, "functions": ["Optimizer::step", "main"]}]
  })");
}

TEST(Diff, FiguresDevicesAndSitesByFunctionName) {
  const TraceDiff diff = diff_reports(base_report(), new_report(), "base.jsonl", "new.jsonl");
  EXPECT_EQ(render_diff_text(diff),
            "cumemtrace diff\n"
            "  base: base.jsonl\n"
            "  new:  new.jsonl\n"
            "\n"
            "Total                              base            new   change\n"
            "peak allocated                 1.00 GiB       1.20 GiB   +204.80 MiB (+20.0%)\n"
            "peak reserved                  2.00 GiB       2.00 GiB   0 B\n"
            "leaked                        12.00 KiB       1.01 MiB   +1.00 MiB (+8533.3%)\n"
            "leaked allocations                    3              4   +1 (+33.3%)\n"
            "growth per iteration           1.00 KiB       1.00 KiB   0 B\n"
            "out-of-memory failures                0              1   +1 (new)\n"
            "allocations                         100            120   +20 (+20.0%)\n"
            "frees                                97            116   +19 (+19.6%)\n"
            "\n"
            "Device 0\n"
            "peak allocated                 1.00 GiB       1.00 GiB   0 B\n"
            "peak reserved                  2.00 GiB       2.00 GiB   0 B\n"
            "leaked                        12.00 KiB      12.00 KiB   0 B\n"
            "\n"
            "Device 1\n"
            "peak allocated                      0 B     204.80 MiB   +204.80 MiB (new)\n"
            "peak reserved                       0 B            0 B   0 B\n"
            "leaked                              0 B       1.00 MiB   +1.00 MiB (new)\n"
            "\n"
            "Leaked at the end, by call site (largest change first):\n"
            "  +1.00 MiB  (0 B -> 1.00 MiB, 0 -> 1 allocations)  new_buffer\n"
            "\n"
            "Live at the allocated peak, by call site (largest change first):\n"
            "  +204.80 MiB  (768.00 MiB -> 972.80 MiB, 3 -> 4 allocations)  Model::forward\n");
}

TEST(Diff, JsonCarriesEveryFigureAndTheRegressions) {
  const TraceDiff diff = diff_reports(base_report(), new_report(), "base.jsonl", "new.jsonl");
  const Json j = render_diff_json(diff, {"peak allocated +20.0% (1.00 GiB -> 1.20 GiB) > +10.0%"});
  const Json& peak = j["totals"]["peak_allocated"];
  EXPECT_EQ(peak["base"], 1073741824);
  EXPECT_EQ(peak["new"], 1288490189);
  EXPECT_EQ(peak["change"], 214748365);
  EXPECT_NEAR(peak["change_percent"].get<double>(), 20.0, 1e-6);
  EXPECT_EQ(j["devices"]["1"]["peak_allocated"]["base"], 0);
  EXPECT_EQ(j["sites"]["leaked"], Json::parse(R"([{"label":"new_buffer","functions":["new_buffer","main"],"base_bytes":0,)"
                                              R"("new_bytes":1048576,"change":1048576,"base_count":0,"new_count":1}])"));
  EXPECT_EQ(j["sites"]["at_peak"].size(), 1u);
  EXPECT_EQ(j["regressions"].size(), 1u);
  // Without top_at_peak in one report: null, not an empty list.
  Json old = base_report();
  old.erase("top_at_peak");
  EXPECT_TRUE(render_diff_json(diff_reports(old, new_report(), "a", "b"), {})["sites"]["at_peak"].is_null());
}

TEST(Diff, RegressionsAgainstLimits) {
  const TraceDiff diff = diff_reports(base_report(), new_report(), "base.jsonl", "new.jsonl");
  DiffLimits lenient;
  lenient.max_peak_increase_percent = 20.5;
  lenient.max_reserved_increase_percent = 0;
  lenient.max_leak_increase = 1u << 20;
  lenient.max_growth_increase = 0;
  EXPECT_EQ(find_regressions(diff, lenient), std::vector<std::string>{});
  DiffLimits strict;
  strict.max_peak_increase_percent = 10;
  strict.max_leak_increase = 1000;
  EXPECT_EQ(find_regressions(diff, strict),
            (std::vector<std::string>{"peak allocated +20.0% (1.00 GiB -> 1.20 GiB) > +10.0%",
                                      "leaked +1.00 MiB (12.00 KiB -> 1.01 MiB) > +1000 B"}));
  // From nothing to something is an increase beyond any percentage.
  Json empty = base_report();
  empty["peak_allocated"] = 0;
  EXPECT_EQ(find_regressions(diff_reports(empty, new_report(), "a", "b"), strict)[0],
            "peak allocated new (0 B -> 1.20 GiB) > +10.0%");
  // A figure a report lacks is a regression, never a silent pass.
  Json old = base_report();
  old.erase("growth_bytes_per_iteration");
  DiffLimits growth;
  growth.max_growth_increase = 1u << 30;
  EXPECT_EQ(find_regressions(diff_reports(old, new_report(), "old.jsonl", "new.jsonl"), growth),
            std::vector<std::string>{"growth per iteration not available in old.jsonl"});

  // Growth not assessed in one trace: a growth limit fails, unless allowed.
  Json loopless = new_report();
  loopless["iterations"] = Json{{"source", "none"}, {"count", 0}};
  const TraceDiff unassessed = diff_reports(base_report(), loopless, "base.jsonl", "once.jsonl");
  EXPECT_EQ(find_regressions(unassessed, growth),
            std::vector<std::string>{"growth per iteration not assessed in once.jsonl: no iterations found (no mark "
                                     "repeats 3 times, no period in any thread's allocations); mark each step "
                                     "(cumemtrace_mark(\"step N\") or an NVTX range per step), name the mark "
                                     "that does with --iteration-marker NAME, or pass --allow-unassessed"});
  growth.allow_unassessed = true;
  EXPECT_EQ(find_regressions(unassessed, growth), std::vector<std::string>{});

  // An incomplete trace: with a limit, not judged (one line, what to do);
  // allowed, judged; without limits, no verdict at all.
  Json cut = new_report();
  cut["has_end"] = false;
  const TraceDiff partial = diff_reports(base_report(), cut, "base.jsonl", "cut.jsonl");
  EXPECT_EQ(partial.next_incomplete, "the trace has no end line (the program was cut short)");
  EXPECT_EQ(find_regressions(partial, lenient),
            std::vector<std::string>{"incomplete trace cut.jsonl: the trace has no end line (the program was cut "
                                     "short); pass --allow-incomplete to judge it anyway"});
  lenient.allow_incomplete = true;
  EXPECT_EQ(find_regressions(partial, lenient), std::vector<std::string>{});
  EXPECT_EQ(find_regressions(partial, DiffLimits{}), std::vector<std::string>{});
  EXPECT_NE(render_diff_text(partial).find("  new:  cut.jsonl  (INCOMPLETE: the trace has no end line"),
            std::string::npos);
  EXPECT_EQ(render_diff_json(partial, {})["incomplete"]["new"], partial.next_incomplete);
}

using testing::cli;

TEST(Diff, CommandExitCodes) {
  TempDir tmp;
  testing::write_file(tmp.path("a.jsonl"), testing::join_lines({testing::header_line(), testing::alloc_line(1, "0x10", 1000),
                                                                 testing::end_line(2)}));
  testing::write_file(tmp.path("b.jsonl"), testing::join_lines({testing::header_line(), testing::alloc_line(1, "0x10", 1300),
                                                                 testing::end_line(2)}));
  const CommandResult same = cli({"diff", tmp.path("a.jsonl"), tmp.path("a.jsonl"), "--max-peak-increase", "0"});
  EXPECT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("peak allocated                   1000 B         1000 B   0 B"), std::string::npos) << same.out;

  const CommandResult worse = cli({"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-peak-increase", "25%",
                                   "--max-leak-increase", "100"});
  EXPECT_EQ(worse.exit_code, 1);
  EXPECT_EQ(worse.err, "cumemtrace: regression: peak allocated +30.0% (1000 B -> 1.27 KiB) > +25.0%\n"
                       "cumemtrace: regression: leaked +300 B (1000 B -> 1.27 KiB) > +100 B\n");
  const CommandResult within = cli({"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-peak-increase", "30"});
  EXPECT_EQ(within.exit_code, 0) << within.err;

  const CommandResult json = cli({"diff", "--format", "json", tmp.path("a.jsonl"), tmp.path("b.jsonl")});
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(json.out)["totals"]["peak_allocated"]["change"], 300);

  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"diff", tmp.path("a.jsonl")},
           {"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-peak-increase", "ten"},
           {"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-leak-increase", "-5"},
           // An unset variable is no "no limit".
           {"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-peak-increase", ""},
           {"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-reserved-increase", ""},
           {"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-leak-increase", ""},
           {"diff", tmp.path("a.jsonl"), tmp.path("b.jsonl"), "--max-growth-increase", ""},
           {"diff", tmp.path("a.jsonl"), tmp.path("missing.jsonl")},
       }) {
    const CommandResult r = cli(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
  }
}

}  // namespace
}  // namespace cumemtrace::analyzer
