// `cumemtrace report` on everything that is not a clean trace: files that are
// not traces at all (one line on stderr, exit 2), and damaged traces that
// are still read up to the damage (exit 0, the damage in the report).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analyzer_test_support.h"
#include "read/zstd_frames.h"

namespace cumemtrace::analyzer {
namespace {

using testing::CommandResult;
using testing::TempDir;

CommandResult report(const std::string& path, const std::string& format = "text") {
  return testing::run_command({testing::cli_path(), "report", "--format", format, path});
}

using testing::zstd_compressed;

std::string trace_of(std::size_t allocs, bool with_end = true) {
  std::vector<std::string> lines{testing::header_line()};
  for (std::size_t i = 0; i < allocs; ++i) {
    lines.push_back(testing::alloc_line(i + 1, ("0x" + std::to_string(1000 + i)).c_str(), 16));
  }
  if (with_end) lines.push_back(testing::end_line(allocs + 1));
  return testing::join_lines(lines);
}

struct Rejected {
  const char* name;
  std::string content;
  std::string message;  // after "cumemtrace: PATH: "
};

TEST(BadInput, FilesThatAreNotTracesGetOneLineAndExitTwo) {
  TempDir tmp;
  std::string noise;
  for (int i = 0; i < 5000; ++i) noise += static_cast<char>((i * 7919 + 13) % 251);
  const std::string not_header = "not a cumemtrace trace (first line is not a header)";
  const std::string header_in_latin1 = R"({"ev":"header","format":"cumemtrace","version":1,"host":"n)" +
                                       std::string("\xe9") + R"(ud"})" + "\n";
  std::string big_line(17u << 20, 'x');
  const std::vector<Rejected> cases = {
      {"empty.jsonl", "", "empty file, not a cumemtrace trace"},
      {"noise.bin", noise, not_header},
      {"nul.bin", std::string(4096, '\0'), not_header},
      {"trace.jsonl.gz", std::string("\x1f\x8b\x08\x00", 4) + noise,
       "not a cumemtrace trace (gzip-compressed data; cumemtrace reads .jsonl or zstd-compressed .jsonl.zst)"},
      {"heaptrack.data", "v 10300 3\nX /usr/bin/app\nI 1000 4\n+ 1 2 3\n",
       "not a cumemtrace trace (it looks like a heaptrack trace)"},
      {"heaptrack.zst", zstd_compressed("v 10300 3\nX /usr/bin/app\n"),
       "not a cumemtrace trace (it looks like a heaptrack trace)"},
      {"array.json", "[" + testing::header_line() + "]\n", "not a cumemtrace trace (a JSON array, not one JSON object per line)"},
      {"snapshot.pickle", std::string("\x80\x04\x95\x10\x00", 5), "not a cumemtrace trace (a Python pickle; read a PyTorch memory snapshot with: cumemtrace import-torch FILE -o trace.jsonl)"},
      {"model.pt", std::string("PK\x03\x04", 4) + noise, "not a cumemtrace trace (a zip archive)"},
      {"package.json", "{\"name\":\"x\",\"version\":\"1.0\"}\n", not_header},
      {"other_format.jsonl", "{\"ev\":\"header\",\"format\":\"memtrace\",\"version\":1}\n",
       "not a cumemtrace trace (header format is 'memtrace')"},
      {"v2.jsonl", testing::header_line(2) + "\n" + testing::end_line(1) + "\n",
       "trace format version 2 is newer than this analyzer supports (1)"},
      {"v1000000.jsonl", testing::header_line(1000000) + "\n",
       "trace format version 1000000 is newer than this analyzer supports (1)"},
      {"version_string.jsonl", "{\"ev\":\"header\",\"format\":\"cumemtrace\",\"version\":\"1\"}\n",
       "unreadable trace format version in the header"},
      {"latin1_header.jsonl", header_in_latin1, not_header},
      {"one_huge_line.jsonl", big_line,
       "not a cumemtrace trace (first line is not a header, and no line break in its first 16.00 MiB)"},
      {"corrupt.jsonl.zst", zstd_compressed(trace_of(1000)).substr(0, 8) + std::string(4000, '\xee'),
       "corrupt zstd data: "},
  };
  for (const Rejected& c : cases) {
    const std::string path = tmp.path(c.name);
    testing::write_file(path, c.content);
    const CommandResult r = report(path);
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("cumemtrace: " + path + ": " + c.message, 0), 0u) << c.name << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << c.name << ": not one line: " << r.err;
    EXPECT_EQ(r.out, "") << c.name;
  }
  const CommandResult directory = report(tmp.dir());
  EXPECT_EQ(directory.exit_code, 2);
  EXPECT_EQ(directory.err, "cumemtrace: " + tmp.dir() + ": cannot read: Is a directory\n");
}

// Every command that reads traces says the same one line, exit 2, for a
// file that is not one, a missing file and a trace of a newer version; and
// import-torch names a file that is not a pickle.
TEST(BadInput, EveryCommandRejectsWhatIsNotATraceWithOneLine) {
  TempDir tmp;
  const std::string good = tmp.path("good.jsonl");
  testing::write_file(good, trace_of(10));
  struct Input {
    std::string path;
    std::string message;
  };
  const std::vector<Input> inputs = {
      {tmp.path("noise.jsonl"), "not a cumemtrace trace (first line is not a header)"},
      {tmp.path("absent.jsonl"), "cannot open: No such file or directory"},
      {tmp.path("v9.jsonl"), "trace format version 9 is newer than this analyzer supports (1)"},
  };
  testing::write_file(inputs[0].path, "INFO: epoch 1\n\xff\xfe\n");
  testing::write_file(inputs[2].path, testing::header_line(9) + "\n");
  const std::vector<std::vector<std::string>> commands = {
      {"report"},
      {"report", "--format", "html", "-o", tmp.path("r.html")},
      {"check", "--max-leaked-bytes", "0"},
      {"timeline"},
      {"export", "--format", "perfetto", "-o", tmp.path("p.json")},
      {"export", "--format", "csv"},
      {"replay"},
  };
  for (const Input& input : inputs) {
    for (const auto& command : commands) {
      std::vector<std::string> argv{testing::cli_path()};
      argv.insert(argv.end(), command.begin(), command.end());
      argv.push_back(input.path);
      const CommandResult r = testing::run_command(argv);
      const std::string what = command.front() + " " + input.path;
      EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
      EXPECT_EQ(r.err, "cumemtrace: " + input.path + ": " + input.message + "\n") << what;
      // check's verdict per trace goes on, on stdout, for the CI log.
      EXPECT_EQ(r.out, command.front() == "check" ? "check " + input.path + "\n  ERROR cannot read the trace\n" : "")
          << what;
    }
    for (const auto& pair : {std::vector<std::string>{good, input.path}, {input.path, good}}) {
      const CommandResult r = testing::run_command({testing::cli_path(), "diff", pair[0], pair[1]});
      EXPECT_EQ(r.exit_code, 2) << "diff " << pair[0] << " " << pair[1] << ": " << r.err;
      EXPECT_EQ(r.err, "cumemtrace: " + input.path + ": " + input.message + "\n");
    }
  }
  const CommandResult not_pickle =
      testing::run_command({testing::cli_path(), "import-torch", good, "-o", tmp.path("out.jsonl")});
  EXPECT_EQ(not_pickle.exit_code, 2) << not_pickle.err;
  EXPECT_EQ(not_pickle.err.rfind("cumemtrace: " + good + ": not a PyTorch memory snapshot: ", 0), 0u)
      << not_pickle.err;
  EXPECT_EQ(std::count(not_pickle.err.begin(), not_pickle.err.end(), '\n'), 1) << not_pickle.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path("out.jsonl"))) << "no half-written output";
}

nlohmann::json json_report(const std::string& path) {
  const CommandResult r = report(path, "json");
  EXPECT_EQ(r.exit_code, 0) << path << ": " << r.err;
  EXPECT_EQ(r.err, "") << path;
  return nlohmann::json::parse(r.out);
}

TEST(BadInput, DamagedTracesAreReadUpToTheDamage) {
  TempDir tmp;
  const std::string whole = trace_of(100);

  // Killed writer: no end line, the last line cut in the middle.
  const std::size_t end_line_bytes = testing::end_line(101).size() + 1;
  testing::write_file(tmp.path("cut.jsonl"), whole.substr(0, whole.size() - end_line_bytes - 30));
  nlohmann::json cut = json_report(tmp.path("cut.jsonl"));
  EXPECT_TRUE(cut["truncated"]);
  EXPECT_EQ(cut["allocs"], 99);  // the 100th alloc line is the one cut
  EXPECT_EQ(cut["truncated_after_line"], 100);
  EXPECT_EQ(cut["bad_lines"], 0);

  // A cut zstd stream: read up to the cut.
  const std::string compressed = zstd_compressed(trace_of(20000));
  testing::write_file(tmp.path("cut.jsonl.zst"), compressed.substr(0, compressed.size() / 2));
  nlohmann::json cut_zstd = json_report(tmp.path("cut.jsonl.zst"));
  EXPECT_TRUE(cut_zstd["truncated"]);
  EXPECT_GT(cut_zstd["allocs"].get<int>(), 100);
  EXPECT_LT(cut_zstd["allocs"].get<int>(), 20000);

  // Lines that are not UTF-8, NUL bytes, a line of 17 MiB, a line of another
  // program, in the middle of a good trace: bad lines with their numbers.
  std::vector<std::string> lines{testing::header_line(), testing::alloc_line(1, "0x10", 8)};
  lines.push_back(R"({"ev":"mark","t":2,"tid":1,"name":"caf)" + std::string("\xe9", 1) + R"(","kind":"instant"})");
  lines.push_back(std::string(300, '\0'));
  lines.push_back(std::string(17u << 20, '{'));
  lines.push_back("INFO: loading model");
  lines.push_back(testing::free_line(3, "0x10", 8));
  lines.push_back(testing::end_line(4));
  testing::write_file(tmp.path("damaged.jsonl"), testing::join_lines(lines));
  nlohmann::json damaged = json_report(tmp.path("damaged.jsonl"));
  EXPECT_FALSE(damaged["truncated"]);
  EXPECT_EQ(damaged["allocs"], 1);
  EXPECT_EQ(damaged["frees"], 1);
  EXPECT_EQ(damaged["bad_lines"], 4);
  EXPECT_EQ(damaged["first_bad_lines"],
            nlohmann::json::parse(R"([{"line":3,"reason":"invalid JSON"},{"line":4,"reason":"invalid JSON"},)"
                                  R"({"line":5,"reason":"line longer than 16777216 bytes"},)"
                                  R"({"line":6,"reason":"invalid JSON"}])"));

  // Reordered and duplicated events: counted, never fatal.
  testing::write_file(tmp.path("shuffled.jsonl"),
                      testing::join_lines({testing::header_line(), testing::free_line(5, "0x10", 8),
                                           testing::alloc_line(4, "0x10", 8), testing::alloc_line(4, "0x10", 8),
                                           testing::end_line(1), testing::end_line(9)}));
  nlohmann::json shuffled = json_report(tmp.path("shuffled.jsonl"));
  EXPECT_EQ(shuffled["unknown_frees"], 1);
  EXPECT_EQ(shuffled["duplicate_allocs"], 1);
  EXPECT_EQ(shuffled["leaked_count"], 1);

  // A header alone, cut before its newline: an empty, truncated trace.
  testing::write_file(tmp.path("header_only.jsonl"), testing::header_line());
  nlohmann::json header_only = json_report(tmp.path("header_only.jsonl"));
  EXPECT_TRUE(header_only["truncated"]);
  EXPECT_EQ(header_only["allocs"], 0);
}

}  // namespace
}  // namespace cumemtrace::analyzer
