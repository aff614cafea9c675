// `cumemtrace export`: the CSV of events read back by an RFC 4180 parser
// written here, and the Perfetto JSON parsed and checked for structure
// (every event has ph/ts/pid, slices nest, counters reach the analysis'
// peaks at their times).
#include <gtest/gtest.h>
#include <zstd.h>

#include <filesystem>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer {
namespace {

using Rows = std::vector<std::vector<std::string>>;

// RFC 4180: fields separated by commas, records by CRLF or LF; a field in
// double quotes may hold commas, newlines and doubled quotes. Fails the test
// on anything else (a stray quote, an unterminated field).
Rows parse_csv(const std::string& text) {
  Rows rows;
  std::vector<std::string> row;
  std::string field;
  std::size_t i = 0;
  bool at_field_start = true;
  while (i < text.size()) {
    const char c = text[i];
    if (at_field_start && c == '"') {
      ++i;
      for (;;) {
        if (i >= text.size()) {
          ADD_FAILURE() << "unterminated quoted field";
          return rows;
        }
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += text[i++];
      }
      at_field_start = false;
      if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
        ADD_FAILURE() << "text after a closing quote at byte " << i;
        return rows;
      }
      continue;
    }
    if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
      at_field_start = true;
      ++i;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(std::move(field));
      field.clear();
      rows.push_back(std::move(row));
      row.clear();
      at_field_start = true;
      ++i;
    } else {
      if (c == '"') ADD_FAILURE() << "quote inside an unquoted field at byte " << i;
      field += c;
      at_field_start = false;
      ++i;
    }
  }
  EXPECT_TRUE(row.empty() && field.empty()) << "last record without a line end";
  return rows;
}

TEST(ExportCsv, TheTestParserFollowsRfc4180) {
  EXPECT_EQ(parse_csv("a,b\r\n\"x,\"\"y\"\"\nz\",\n"),
            (Rows{{"a", "b"}, {"x,\"y\"\nz", ""}}));
}

std::string write_trace(const testing::TempDir& tmp, const std::string& text) {
  testing::write_file(tmp.path("t.jsonl"), text);
  return tmp.path("t.jsonl");
}

const std::string kStackLine =
    R"json({"ev":"stack","id":3,"frames":[{"ip":"0x10","fn":null,"module":"/lib/x.so"},{"ip":"0x20","fn":"f(int, char)","module":"/bin/a"}]})json";

std::string event_trace() {
  return testing::join_lines(
      {testing::header_line(), R"({"ev":"device","t":1,"dev":0,"name":"GPU","total":1000})", kStackLine,
       R"({"ev":"segment_alloc","t":5,"dev":0,"ptr":"0x1000","size":4096,"api":"cuMemAlloc_v2"})",
       R"({"ev":"alloc","t":10,"tid":7,"api":"cudaMallocAsync","kind":"device","dev":0,"ptr":"0x1000","size":100,"block":512,"stream":"0xab","stack":3})",
       R"({"ev":"mark","t":12,"tid":8,"name":"a,\"b\"\nc","kind":"push"})",
       R"({"ev":"pool","t":13,"dev":0,"allocated":100,"reserved":4096,"cached_free":3584,"largest_free":3000,"free_blocks":2,"inactive_split":64})",
       R"({"ev":"oom","t":14,"tid":7,"api":"cudaMalloc","dev":0,"size":9999,"block":10240,"allocated":100,"reserved":4096,"cached_free":3584,"largest_free":3000,"device_free":5,"device_total":1000,"cause":"capacity","stack":3})",
       R"({"ev":"error","t":15,"tid":7,"api":"cudaFree","ptr":"0xdead","what":"double_free","stack":0})",
       testing::free_line(16, "0x1000", 100),
       R"({"ev":"segment_free","t":17,"dev":0,"ptr":"0x1000","size":4096})", testing::end_line(20)});
}

TEST(ExportCsv, OneRowPerEventWithEveryFieldInItsColumn) {
  testing::TempDir tmp;
  TraceReader reader(write_trace(tmp, event_trace()));
  std::ostringstream out;
  const ExportSummary summary = export_events_csv(reader, out);
  const Rows rows = parse_csv(out.str());
  ASSERT_EQ(rows.size(), 9u);  // header + 8 events (not header, device, stack or end)
  EXPECT_EQ(summary.records, 8u);
  const std::vector<std::string>& header = rows[0];
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  for (const auto& row : rows) ASSERT_EQ(row.size(), header.size());
  const auto at = [&](std::size_t row, const char* name) { return rows[row][column.at(name)]; };

  EXPECT_EQ(at(1, "ev"), "segment_alloc");
  EXPECT_EQ(at(1, "ptr"), "0x1000");
  EXPECT_EQ(at(1, "api"), "cuMemAlloc_v2");
  EXPECT_EQ(at(2, "ev"), "alloc");
  EXPECT_EQ(at(2, "t"), "10");
  EXPECT_EQ(at(2, "tid"), "7");
  EXPECT_EQ(at(2, "size"), "100");
  EXPECT_EQ(at(2, "block"), "512");
  EXPECT_EQ(at(2, "kind"), "device");
  EXPECT_EQ(at(2, "stream"), "0xab");
  EXPECT_EQ(at(2, "stack"), "3");
  EXPECT_EQ(at(2, "function"), "f(int, char)");  // the innermost named frame
  EXPECT_EQ(at(3, "ev"), "mark");
  EXPECT_EQ(at(3, "name"), "a,\"b\"\nc");
  EXPECT_EQ(at(3, "dev"), "");
  EXPECT_EQ(at(4, "inactive_split"), "64");
  EXPECT_EQ(at(4, "cached_free"), "3584");
  EXPECT_EQ(at(5, "cause"), "capacity");
  EXPECT_EQ(at(5, "device_total"), "1000");
  EXPECT_EQ(at(5, "block"), "10240");
  EXPECT_EQ(at(6, "what"), "double_free");
  EXPECT_EQ(at(6, "ptr"), "0xdead");
  EXPECT_EQ(at(7, "ev"), "free");
  EXPECT_EQ(at(7, "block"), "");
  EXPECT_EQ(at(8, "ev"), "segment_free");
}

// A random trace with two devices, two threads of nested marks, OOMs. With
// `rise_and_fall`, the second half frees more than it allocates and returns
// segments, so both peaks fall mid-trace and resampling must carry them
// through many merges of buckets.
std::string random_trace(std::uint32_t seed, bool rise_and_fall = false) {
  std::mt19937 rng(seed);
  std::vector<std::string> lines{testing::header_line()};
  std::vector<std::pair<std::string, int>> live;
  std::vector<std::string> segments;
  std::map<int, int> depth;
  std::uint64_t t = 100;
  for (int i = 0; i < 3000; ++i) {
    t += 1 + rng() % 1000;
    const int dev = static_cast<int>(rng() % 2);
    const bool falling = rise_and_fall && i >= 1500;
    const unsigned roll = rng() % 100;
    char ptr[32];
    std::snprintf(ptr, sizeof ptr, "0x%x", 0x10000 + i * 0x100);
    if ((roll < 40 || (falling && roll < 80)) && !live.empty()) {
      const std::size_t k = rng() % live.size();
      lines.push_back(testing::free_line(t, live[k].first.c_str(), 0, live[k].second));
      live[k] = live.back();
      live.pop_back();
    } else if (roll < 50) {
      const int tid = 7 + static_cast<int>(rng() % 2);
      const bool push = depth[tid] == 0 || rng() % 2 == 0;
      depth[tid] += push ? 1 : -1;
      lines.push_back(R"({"ev":"mark","t":)" + std::to_string(t) + R"(,"tid":)" + std::to_string(tid) +
                      R"(,"name":"range )" + std::to_string(i) + R"(","kind":")" + (push ? "push" : "pop") + "\"}");
    } else if (roll < 52) {
      lines.push_back(R"({"ev":"oom","t":)" + std::to_string(t) + R"(,"tid":7,"api":"cudaMalloc","dev":)" +
                      std::to_string(dev) +
                      R"(,"size":1,"allocated":0,"reserved":0,"cached_free":0,"largest_free":0,"device_free":0,"device_total":0,"cause":"capacity","stack":0})");
    } else if (roll < 56 && falling && !segments.empty()) {
      lines.push_back(R"({"ev":"segment_free","t":)" + std::to_string(t) + R"(,"dev":0,"ptr":")" + segments.back() +
                      R"(","size":1})");
      segments.pop_back();
    } else if (roll < 56) {
      segments.push_back("0x9" + std::to_string(i));
      lines.push_back(R"({"ev":"segment_alloc","t":)" + std::to_string(t) + R"(,"dev":)" + std::to_string(dev) +
                      R"(,"ptr":")" + segments.back() + R"(","size":)" + std::to_string(1 + rng() % 100000) + R"(,"api":"cuMemAlloc_v2"})");
    } else {
      lines.push_back(testing::alloc_line(t, ptr, 1 + rng() % 50000, dev));
      live.emplace_back(ptr, dev);
    }
  }
  lines.push_back(R"({"ev":"mark","t":)" + std::to_string(t + 1) + R"(,"tid":9,"name":"stray","kind":"pop"})");
  lines.push_back(testing::end_line(t + 10));
  return testing::join_lines(lines);
}

struct PerfettoCounter {
  double ts = 0;
  double bytes = 0;
};

// Checks an export's structure (every event has ph/ts/pid, threads are named
// before use, slices nest, every OOM is there, each counter track is in time
// order, and so are the other events) and that each device's counters reach
// the analysis' peaks at their times. Returns the counter points by track.
std::map<std::string, std::vector<PerfettoCounter>> check_perfetto(const nlohmann::json& j, const Analysis& analysis) {
  std::map<std::string, std::vector<PerfettoCounter>> counters;
  std::map<std::uint64_t, std::vector<std::string>> open;  // tid -> slice names
  std::set<std::uint64_t> named_threads;
  std::size_t ooms = 0;
  double last_ts = 0;
  for (const auto& e : j["traceEvents"]) {
    if (!(e.contains("ph") && e["ph"].is_string() && e.contains("ts") && e["ts"].is_number() &&
          e.contains("pid") && e["pid"].is_number_integer())) {
      ADD_FAILURE() << "no ph, ts or pid: " << e;
      continue;
    }
    EXPECT_EQ(e["pid"], 4242);  // the header's pid
    const std::string ph = e["ph"];
    const double ts = e["ts"];
    if (ph != "M") {
      EXPECT_TRUE(named_threads.count(e["tid"].get<std::uint64_t>())) << "thread named before use: " << e;
    }
    if (ph == "M") {
      if (e["name"] == "thread_name") named_threads.insert(e["tid"].get<std::uint64_t>());
    } else if (ph == "C") {
      std::vector<PerfettoCounter>& track = counters[e["name"]];
      if (!track.empty()) {
        EXPECT_GE(ts, track.back().ts) << e;
      }
      track.push_back({ts, e["args"]["bytes"].get<double>()});
    } else {
      EXPECT_GE(ts, last_ts) << e;  // streamed in time order
      last_ts = ts;
      if (ph == "B") {
        open[e["tid"]].push_back(e["name"]);
      } else if (ph == "E") {
        auto& stack = open[e["tid"]];
        EXPECT_FALSE(stack.empty()) << e;
        if (stack.empty()) continue;
        EXPECT_EQ(stack.back(), e["name"]);
        stack.pop_back();
      } else if (ph == "i") {
        if (e["cat"] == "oom") {
          ++ooms;
          EXPECT_EQ(e["s"], "p");
        }
      } else {
        ADD_FAILURE() << "unexpected phase " << ph;
      }
    }
  }
  for (const auto& [tid, stack] : open) EXPECT_TRUE(stack.empty()) << "thread " << tid << " left open";
  EXPECT_EQ(ooms, analysis.total().ooms);
  EXPECT_EQ(analysis.devices().size(), 2u);
  for (const auto& [dev, info] : analysis.devices()) {
    for (const auto& [what, watermark] : {std::pair{"allocated", info.memory.allocated},
                                          std::pair{"reserved", info.memory.reserved}}) {
      const std::string track = std::string(what) + " dev " + std::to_string(dev);
      EXPECT_TRUE(counters.count(track)) << track;
      if (counters[track].empty()) continue;
      const auto highest = std::max_element(counters[track].begin(), counters[track].end(),
                                            [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
      EXPECT_EQ(highest->bytes, static_cast<double>(watermark.peak)) << track;
      EXPECT_EQ(std::llround(highest->ts * 1000), static_cast<long long>(watermark.peak_t)) << track;
    }
  }
  return counters;
}

// Everything but the counters, in the order written.
std::vector<nlohmann::json> non_counters(const nlohmann::json& j) {
  std::vector<nlohmann::json> events;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "C") events.push_back(e);
  }
  return events;
}

struct PerfettoExport {
  nlohmann::json json;
  ExportSummary summary;
};

PerfettoExport perfetto_of(const std::string& path, std::size_t points) {
  std::ostringstream out;
  TraceReader reader(path);
  PerfettoExport result;
  result.summary = export_perfetto(reader, out, points);
  result.json = nlohmann::json::parse(out.str());
  EXPECT_EQ(result.summary.records, result.json["traceEvents"].size());
  return result;
}

Analysis analysis_of(const std::string& path) {
  TraceReader reader(path);
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  return analysis;
}

TEST(ExportPerfetto, EveryEventIsWellFormedAndCountersReachTheAnalysisPeaks) {
  testing::TempDir tmp;
  const std::string path = write_trace(tmp, random_trace(3));
  const PerfettoExport all = perfetto_of(path, 0);
  EXPECT_EQ(all.summary.unmatched_pops, 1u);  // the stray pop on thread 9
  const Analysis analysis = analysis_of(path);
  check_perfetto(all.json, analysis);
  // Every change, in time order, counters among the rest.
  double last_ts = 0;
  for (const auto& e : all.json["traceEvents"]) {
    if (e["ph"] == "M") continue;
    EXPECT_GE(e["ts"].get<double>(), last_ts) << e;
    last_ts = e["ts"];
  }
}

// Resampled counters (the default): fewer points, each a real state of the
// trace (the value the every-change export has in force at that time), the
// same highest and lowest values per track, and every other event kept.
void check_resampled(const std::string& path) {
  const Analysis analysis = analysis_of(path);
  const PerfettoExport all = perfetto_of(path, 0);
  const auto exact = check_perfetto(all.json, analysis);
  for (std::size_t points : {std::size_t{1}, std::size_t{7}, std::size_t{50}, kPerfettoDefaultPoints}) {
    SCOPED_TRACE("points " + std::to_string(points));
    const PerfettoExport resampled = perfetto_of(path, points);
    const auto kept = check_perfetto(resampled.json, analysis);
    EXPECT_EQ(non_counters(resampled.json), non_counters(all.json));
    ASSERT_EQ(kept.size(), exact.size());
    std::size_t kept_points = 0, every_points = 0;
    for (const auto& [track, points_kept] : kept) {
      const std::vector<PerfettoCounter>& every = exact.at(track);
      kept_points += points_kept.size();
      every_points += every.size();
      for (const PerfettoCounter& p : points_kept) {
        // The values at p.ts in the every-change export, and the one before.
        std::set<double> states;
        double before = -1;
        for (const PerfettoCounter& q : every) {
          if (q.ts < p.ts) before = q.bytes;
          if (q.ts == p.ts) states.insert(q.bytes);
        }
        states.insert(before);
        EXPECT_TRUE(states.count(p.bytes)) << track << " at " << p.ts << ": " << p.bytes;
      }
      auto bytes_less = [](const PerfettoCounter& a, const PerfettoCounter& b) { return a.bytes < b.bytes; };
      EXPECT_EQ(std::min_element(points_kept.begin(), points_kept.end(), bytes_less)->bytes,
                std::min_element(every.begin(), every.end(), bytes_less)->bytes)
          << track;
      EXPECT_EQ(points_kept.back().bytes, every.back().bytes) << track << ": the state at the end";
    }
    if (points < 100) {
      EXPECT_LT(kept_points, every_points / 4);  // downsampling dropped points
    }
  }
}

TEST(ExportPerfetto, ResampledCountersKeepTheExtremesAndEveryOtherEvent) {
  for (const bool rise_and_fall : {false, true}) {
    SCOPED_TRACE(rise_and_fall ? "peaks mid-trace" : "rising");
    testing::TempDir tmp;
    check_resampled(write_trace(tmp, random_trace(5, rise_and_fall)));
  }
}

TEST(ExportPerfetto, NamesAreJsonEscapedAndTimestampsAreExactMicroseconds) {
  testing::TempDir tmp;
  const std::string trace = testing::join_lines(
      {testing::header_line(), R"({"ev":"mark","t":1234567,"tid":7,"name":"q\"uote\\ </script> \u00e9","kind":"instant"})",
       testing::end_line(2000000)});
  TraceReader reader(write_trace(tmp, trace));
  std::ostringstream out;
  export_perfetto(reader, out);
  EXPECT_NE(out.str().find("\"ts\":1234.567,"), std::string::npos) << out.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  bool found = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "i") {
      EXPECT_EQ(e["name"], "q\"uote\\ </script> \xC3\xA9");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

// The commands as users run them: exit codes, messages, output files.
using testing::cli;

void expect_exit_2_one_error_line(const testing::CommandResult& r) {
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("cumemtrace: ", 0), 0u) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(ExportCli, UsageErrorsExitTwo) {
  testing::TempDir tmp;
  const std::string trace = write_trace(tmp, event_trace());
  EXPECT_EQ(cli({"export", trace}).exit_code, 2);  // --format is required
  EXPECT_EQ(cli({"export", trace, "--format", "xml"}).exit_code, 2);
  EXPECT_EQ(cli({"timeline", trace, "--format", "xml"}).exit_code, 2);
  EXPECT_EQ(cli({"timeline", trace, "--points", "0"}).exit_code, 2);
  EXPECT_EQ(cli({"timeline", trace, "--points", "many"}).exit_code, 2);
  for (const char* bad : {"0", "many", "-3", "10000001", ""}) {
    EXPECT_EQ(cli({"export", trace, "--format", "perfetto", "--points", bad}).exit_code, 2) << bad;
  }
  // --points says how finely Perfetto's counters are kept: meaningless for CSV.
  const testing::CommandResult points_with_csv = cli({"export", trace, "--format", "csv", "--points", "5"});
  expect_exit_2_one_error_line(points_with_csv);
  EXPECT_NE(points_with_csv.err.find("--points applies to --format perfetto only"), std::string::npos)
      << points_with_csv.err;
  expect_exit_2_one_error_line(cli({"export", tmp.path("missing.jsonl"), "--format", "csv"}));
  expect_exit_2_one_error_line(cli({"timeline", tmp.path("missing.jsonl")}));
  const testing::CommandResult unwritable =
      cli({"export", trace, "--format", "perfetto", "-o", tmp.path("no/such/dir/out.json")});
  expect_exit_2_one_error_line(unwritable);
  EXPECT_NE(unwritable.err.find("cannot write"), std::string::npos) << unwritable.err;
}

TEST(ExportCli, OutputFileHoldsExactlyWhatStdoutGets) {
  testing::TempDir tmp;
  const std::string trace = write_trace(tmp, event_trace());
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"export", trace, "--format", "perfetto"},
        std::vector<std::string>{"export", trace, "--format", "csv"},
        std::vector<std::string>{"export", trace, "--format", "perfetto", "--points", "all"},
        std::vector<std::string>{"export", trace, "--format", "perfetto", "--points", "2"},
        std::vector<std::string>{"timeline", trace, "--format", "json", "--points", "5"}}) {
    const testing::CommandResult to_stdout = cli(command);
    ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
    std::vector<std::string> with_file = command;
    with_file.insert(with_file.end(), {"-o", tmp.path("out")});
    const testing::CommandResult to_file = cli(with_file);
    ASSERT_EQ(to_file.exit_code, 0) << to_file.err;
    EXPECT_EQ(to_file.out, "");
    EXPECT_EQ(testing::read_file(tmp.path("out")), to_stdout.out);
    EXPECT_GT(to_stdout.out.size(), 100u);
  }
  EXPECT_EQ(files_in(tmp.dir()), (std::vector<std::string>{"out", "t.jsonl"}));  // no temporary left
}

TEST(ExportCli, PointsSelectsHowFinelyPerfettoCountersAreKept) {
  testing::TempDir tmp;
  const std::string trace = write_trace(tmp, random_trace(7));
  auto library = [&](std::size_t points) {
    std::ostringstream out;
    TraceReader reader(trace);
    export_perfetto(reader, out, points);
    return out.str();
  };
  auto command = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"export", trace, "--format", "perfetto"};
    args.insert(args.end(), extra.begin(), extra.end());
    const testing::CommandResult r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(command({}), library(kPerfettoDefaultPoints));
  EXPECT_EQ(command({"--points", "all"}), library(0));
  EXPECT_EQ(command({"--points", "3"}), library(3));
  EXPECT_LT(library(3).size(), library(0).size() / 2);
  // Each track's highest point is `report`'s peak for its device, though
  // three buckets dropped most points.
  const testing::CommandResult report = cli({"report", trace, "--format", "json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const nlohmann::json devices = nlohmann::json::parse(report.out)["devices"];
  std::map<std::string, std::uint64_t> highest;
  const nlohmann::json resampled = nlohmann::json::parse(library(3));
  for (const auto& e : resampled["traceEvents"]) {
    if (e["ph"] != "C") continue;
    std::uint64_t& h = highest[e["name"].get<std::string>()];
    h = std::max(h, e["args"]["bytes"].get<std::uint64_t>());
  }
  ASSERT_EQ(devices.size(), 2u);
  for (const auto& [dev, figures] : devices.items()) {
    EXPECT_EQ(highest["allocated dev " + dev], figures["peak_allocated"].get<std::uint64_t>()) << dev;
    EXPECT_EQ(highest["reserved dev " + dev], figures["peak_reserved"].get<std::uint64_t>()) << dev;
  }
}

TEST(ExportCli, UnreadableDataMidwayLeavesNoOutputFile) {
  testing::TempDir tmp;
  // A valid zstd frame with the first lines, then a frame that is garbage.
  std::vector<std::string> lines{testing::header_line()};
  for (int i = 0; i < 1000; ++i) lines.push_back(testing::alloc_line(static_cast<std::uint64_t>(i), "0x10", 1));
  const std::string text = testing::join_lines(lines);
  std::string frame(ZSTD_compressBound(text.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), text.data(), text.size(), 3));
  testing::write_file(tmp.path("t.jsonl.zst"), frame + frame.substr(0, 4) + std::string(4096, '\xff'));
  for (const char* format : {"csv", "perfetto"}) {
    const testing::CommandResult r = cli({"export", tmp.path("t.jsonl.zst"), "--format", format, "-o", tmp.path("out")});
    expect_exit_2_one_error_line(r);
    EXPECT_NE(r.err.find("corrupt zstd data"), std::string::npos) << r.err;
  }
  expect_exit_2_one_error_line(cli({"timeline", tmp.path("t.jsonl.zst"), "-o", tmp.path("out")}));
  EXPECT_EQ(files_in(tmp.dir()), (std::vector<std::string>{"t.jsonl.zst"}));
}

TEST(ExportCli, CutTraceIsExportedUpToTheCutWithAWarning) {
  testing::TempDir tmp;
  const std::string trace = write_trace(tmp, testing::header_line() + "\n" + testing::alloc_line(10, "0x1", 5) + "\n" +
                                                 R"({"ev":"alloc","t":20,)");
  const testing::CommandResult r = cli({"export", trace, "--format", "csv"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("cut short after line 2"), std::string::npos) << r.err;
  EXPECT_EQ(parse_csv(r.out).size(), 2u);
}

}  // namespace
}  // namespace cumemtrace::analyzer
