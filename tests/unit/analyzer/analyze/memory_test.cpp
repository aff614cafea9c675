// The analyzer's memory is bounded by the live set and the call stacks, never
// by the length of the trace: `cumemtrace report -` reads a long trace from
// a pipe (so not even the page cache holds it) and its peak resident memory
// is measured by the kernel (wait4's ru_maxrss).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <thread>

#include "analyzer_test_support.h"

namespace cumemtrace::analyzer {
namespace {

// Writes `pairs` alloc/free pairs over 200 live addresses and 50 stacks.
void write_trace(int fd, int pairs, std::uint64_t& bytes_written) {
  std::string chunk;
  auto flush = [&] {
    std::string_view rest = chunk;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd, rest.data(), rest.size());
      if (n <= 0) return;  // the reader died: the test reports it
      rest.remove_prefix(static_cast<std::size_t>(n));
      bytes_written += static_cast<std::uint64_t>(n);
    }
    chunk.clear();
  };
  chunk = testing::header_line() + "\n";
  for (int s = 1; s <= 50; ++s) {
    chunk += R"({"ev":"stack","id":)" + std::to_string(s) + R"(,"frames":[{"ip":"0x1","fn":"site_)" +
             std::to_string(s) + R"(","module":"/bin/app","off":"0x1"}]})" + "\n";
  }
  for (int i = 0; i < pairs; ++i) {
    const std::string ptr = "0x" + std::to_string(7000000 + (i % 200) * 4096);
    const auto t = static_cast<std::uint64_t>(2 * i);
    chunk += testing::alloc_line(t + 1, ptr.c_str(), 4096, 0, 1 + i % 50) + "\n";
    chunk += testing::free_line(t + 2, ptr.c_str(), 4096) + "\n";
    if (chunk.size() > (1 << 16)) flush();
  }
  chunk += testing::end_line(2ull * pairs + 3) + "\n";
  flush();
}

TEST(Memory, PeakResidentMemoryDoesNotGrowWithTheTrace) {
  int to_reader[2];
  ASSERT_EQ(::pipe(to_reader), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(to_reader[0], STDIN_FILENO);
    ::close(to_reader[0]);
    ::close(to_reader[1]);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    const std::string cli = testing::cli_path();
    ::execl(cli.c_str(), cli.c_str(), "report", "-", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(to_reader[0]);
  std::signal(SIGPIPE, SIG_IGN);
  std::uint64_t bytes = 0;
  write_trace(to_reader[1], 400000, bytes);  // about 90 MiB
  ::close(to_reader[1]);
  int status = 0;
  struct rusage usage {};
  ASSERT_EQ(::wait4(pid, &status, 0, &usage), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::uint64_t peak_bytes = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
  EXPECT_GT(bytes, 80u << 20);
  // The read buffer, simdjson's batch, the live set and the binary: a few MiB.
  EXPECT_LT(peak_bytes, 32u << 20) << "peak RSS " << peak_bytes << " bytes for a trace of " << bytes << " bytes";
}

}  // namespace
}  // namespace cumemtrace::analyzer
