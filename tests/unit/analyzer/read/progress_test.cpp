// The progress line: its timing with an injected clock, its text, and the
// command line's choice of showing it only on a terminal (a pseudo-terminal
// here, against a pipe).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "analyzer_test_support.h"
#include "read/progress.h"

namespace cumemtrace::analyzer {
namespace {

using detail::ProgressMeter;
using namespace std::chrono_literals;

struct FakeTerminal {
  std::chrono::steady_clock::time_point now{};
  std::vector<std::string> writes;

  ProgressMeter meter(std::uint64_t total = 1000) {
    return ProgressMeter(
        "/data/traces/run.jsonl", total, [this] { return now; },
        [this](std::string_view text) { writes.emplace_back(text); }, ProgressMeter::Timing{2000ms, 250ms});
  }
};

TEST(Progress, NothingBeforeTheDelayThenAtMostOneRedrawPerInterval) {
  FakeTerminal term;
  ProgressMeter meter = term.meter();
  term.now += 1999ms;
  meter.update(100, 1000);
  EXPECT_TRUE(term.writes.empty());
  EXPECT_FALSE(meter.shown());

  term.now += 1ms;  // 2 s: the first draw
  meter.update(200, 2000);
  ASSERT_EQ(term.writes.size(), 1u);
  EXPECT_EQ(term.writes[0], "\r\033[Kcumemtrace: reading run.jsonl: 200 B of 1000 B (20%), 0.0 M events/s");

  term.now += 249ms;  // too soon
  meter.update(300, 3000);
  EXPECT_EQ(term.writes.size(), 1u);
  term.now += 1ms;
  meter.update(400, 4000);
  EXPECT_EQ(term.writes.size(), 2u);

  meter.finish();  // erased
  ASSERT_EQ(term.writes.size(), 3u);
  EXPECT_EQ(term.writes[2], "\r\033[K");
  meter.finish();  // only once
  term.now += 10s;
  meter.update(500, 5000);  // nothing after the end
  EXPECT_EQ(term.writes.size(), 3u);
}

TEST(Progress, AFastReadLeavesNoTrace) {
  FakeTerminal term;
  {
    ProgressMeter meter = term.meter();
    term.now += 500ms;
    meter.update(1000, 10);
  }  // destroyed without finish(): nothing was drawn, nothing to erase
  EXPECT_TRUE(term.writes.empty());
}

TEST(Progress, TheLineSaysBytesPercentAndRate) {
  EXPECT_EQ(ProgressMeter::format_line("t.jsonl", 3u << 30, 4ull << 30, 12'000'000, 2.0),
            "cumemtrace: reading t.jsonl: 3.00 GiB of 4.00 GiB (75%), 6.0 M events/s");
  // Unknown total (a pipe): bytes only.
  EXPECT_EQ(ProgressMeter::format_line("-", 1536, 0, 0, 0.0), "cumemtrace: reading -: 1.50 KiB");
  // A label longer than the line can hold keeps its end.
  FakeTerminal term;
  ProgressMeter meter(std::string(100, 'a') + "/" + std::string(60, 'b') + ".jsonl", 0, [&term] { return term.now; },
                      [&term](std::string_view text) { term.writes.emplace_back(text); }, ProgressMeter::Timing{0ms, 0ms});
  meter.update(1, 1);
  ASSERT_EQ(term.writes.size(), 1u);
  EXPECT_NE(term.writes[0].find("reading ..." + std::string(23, 'b') + ".jsonl: 1 B"), std::string::npos)
      << term.writes[0];
}

// Runs `cumemtrace report TRACE` with stderr on a pseudo-terminal (or a pipe)
// and the delay at zero, and returns everything written to stderr.
std::string stderr_of_report(const std::string& trace, bool terminal) {
  int read_fd = -1;
  int write_fd = -1;
  if (terminal) {
    EXPECT_EQ(::openpty(&read_fd, &write_fd, nullptr, nullptr, nullptr), 0);
  } else {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    read_fd = fds[0];
    write_fd = fds[1];
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(write_fd, STDERR_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::setenv("CUMEMTRACE_PROGRESS_DELAY_MS", "0", 1);
    const std::string cli = testing::cli_path();
    ::execl(cli.c_str(), cli.c_str(), "report", trace.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(write_fd);
  std::string out;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(read_fd, chunk, sizeof chunk);
    if (n <= 0) break;  // EIO on a pty once the child is gone
    out.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(read_fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  return out;
}

TEST(Progress, ShownOnATerminalAndNeverOnAPipe) {
  testing::TempDir tmp;
  std::vector<std::string> lines{testing::header_line()};
  for (int i = 0; i < 100000; ++i) lines.push_back(testing::alloc_line(static_cast<std::uint64_t>(i), "0x10", 5));
  lines.push_back(testing::end_line(100001));
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines(lines));

  const std::string on_terminal = stderr_of_report(tmp.path("t.jsonl"), true);
  EXPECT_NE(on_terminal.find("cumemtrace: reading t.jsonl: "), std::string::npos) << on_terminal;
  // Erased at the end: the last thing written is the erase sequence.
  ASSERT_GE(on_terminal.size(), 4u);
  EXPECT_EQ(on_terminal.substr(on_terminal.size() - 4), "\r\033[K");

  const std::string on_pipe = stderr_of_report(tmp.path("t.jsonl"), false);
  EXPECT_EQ(on_pipe, "");
}

}  // namespace
}  // namespace cumemtrace::analyzer
