// `cumemtrace top` without a terminal: one summary line per interval while
// a writer (a forked child, its pid in the header) appends to the trace,
// then exit 0 at the end line, 4 when the writer is gone without one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/units.h"

namespace cumemtrace::analyzer {
namespace {

using testing::CommandResult;
using testing::TempDir;

// Forks a writer: after `delay_ms` it creates `path`, writes a header with
// its own pid and `allocs` allocations of 1 MiB, one every `every_ms`, then
// the end line unless `end` is false, and exits. Only async-signal-safe
// calls in the child (the test binary may have threads).
pid_t start_writer(const std::string& path, int delay_ms, int allocs, int every_ms, bool end) {
  std::vector<std::string> lines;
  for (int i = 0; i < allocs; ++i) {
    lines.push_back(R"({"ev":"alloc","t":)" + std::to_string(1000 + i) +
                    R"(,"tid":1,"dev":0,"api":"cudaMalloc","kind":"device","ptr":")" + format_hex(std::uint64_t{0x100000} * static_cast<std::uint64_t>(i + 1)) +
                    R"(","size":1048576,"stack":0})" "\n");
  }
  const std::string end_line = R"({"ev":"end","t":5000,"reason":"exit","live":0,"live_bytes":0,"dropped":0})" "\n";
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::usleep(static_cast<useconds_t>(delay_ms) * 1000);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) ::_exit(1);
  char header[256];
  const int n = std::snprintf(header, sizeof header,
                              R"({"ev":"header","format":"cumemtrace","version":1,"pid":%d,"ppid":1,"host":"",)"
                              R"("exe":"/bin/writer","argv":["writer"],"start_unix_ns":1,"pool":"caching"})" "\n",
                              static_cast<int>(::getpid()));
  if (::write(fd, header, static_cast<std::size_t>(n)) != n) ::_exit(1);
  for (const std::string& line : lines) {
    ::usleep(static_cast<useconds_t>(every_ms) * 1000);
    // Half a line first: top must wait for the rest, never report it.
    const std::size_t half = line.size() / 2;
    if (::write(fd, line.data(), half) < 0) ::_exit(1);
    ::usleep(5000);
    if (::write(fd, line.data() + half, line.size() - half) < 0) ::_exit(1);
  }
  if (end && ::write(fd, end_line.data(), end_line.size()) < 0) ::_exit(1);
  ::close(fd);
  ::_exit(0);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  return lines;
}

TEST(TopCommand, WithoutATerminalPrintsALinePerIntervalAndExitsZeroAtTheEnd) {
  TempDir dir;
  const std::string trace = dir / "live.jsonl";
  const pid_t writer = start_writer(trace, 300, 12, 100, true);
  const CommandResult r = testing::run_command({"timeout", "20", testing::cli_path(), "top", "--interval", "0.2", trace});
  int status = 0;
  ::waitpid(writer, &status, 0);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<std::string> lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines.front(), "waiting for " + trace + " to be created");
  std::size_t following = 0;
  for (const std::string& line : lines) following += line.find("[following]") != std::string::npos;
  EXPECT_GE(following, 3u) << r.out;  // the writer takes some 1.5 s, a line every 0.2 s
  EXPECT_EQ(lines.back(),
            "0.0 s, 14 events: allocated 12.00 MiB (peak 12.00 MiB), reserved 0 B (peak 0 B), top site "
            "(no stack captured) 12.00 MiB, 0 growth leaks, 0 OOMs, 0 errors [ended (exit)]");
  EXPECT_EQ(r.err, "");  // no parse error for the lines caught half-written
}

TEST(TopCommand, ExitsFourWhenTheWriterIsGoneWithoutAnEndLine) {
  TempDir dir;
  const std::string trace = dir / "live.jsonl";
  const pid_t writer = start_writer(trace, 0, 3, 20, false);
  const CommandResult r = testing::run_command({"timeout", "20", testing::cli_path(), "top", "--interval", "0.2", trace});
  int status = 0;
  ::waitpid(writer, &status, 0);
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.out.find("[writer gone (pid " + std::to_string(writer) + "), no end line]"), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("cumemtrace recover " + trace), std::string::npos) << r.err;
}

TEST(TopCommand, AFileThatIsNotATraceExitsTwo) {
  TempDir dir;
  const std::string path = dir / "notes.txt";
  testing::write_file(path, "hello\n");
  const CommandResult r = testing::run_command({testing::cli_path(), "top", path});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("not a cumemtrace trace"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cumemtrace::analyzer
