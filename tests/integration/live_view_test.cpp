// The live view on a terminal: tmux runs `cumemtrace run --live` and
// `cumemtrace top` in a pane of 120x40 against a program that allocates on
// the simulated device for a few seconds, and the pane's text is read back
// (tmux capture-pane): the view's figures and top call site, and the
// program's own lines, whole and above the panel.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace cumemtrace::testing {
namespace {

const std::string kTmux = "/usr/bin/tmux";

class Pane {
 public:
  Pane(const TempDir& dir, const std::string& command) : socket_(dir / "tmux.sock") {
    const CommandResult r = run_command({kTmux, "-S", socket_, "-f", "/dev/null", "new-session", "-d", "-x", "120",
                                         "-y", "40", "-s", "live", command});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  ~Pane() { run_command({kTmux, "-S", socket_, "kill-server"}); }
  Pane(const Pane&) = delete;
  Pane& operator=(const Pane&) = delete;

  // The screen and the lines scrolled off it (the run's last lines scroll
  // the first ones out of a 40-row pane).
  std::string text() const {
    return run_command({kTmux, "-S", socket_, "capture-pane", "-p", "-S", "-200", "-t", "live"}).out;
  }

  // The pane's text once `done` holds for it, or after `seconds` (then the
  // test fails, with the text).
  std::string wait_for(const std::function<bool(const std::string&)>& done, int seconds, const char* what) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      last = text();
      if (done(last)) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; the pane:\n" << last;
    return last;
  }

 private:
  std::string socket_;
};

bool has_tmux() {
  if (::access(kTmux.c_str(), X_OK) == 0) return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") ADD_FAILURE() << kTmux << " is missing (scripts/setup.sh installs it)";
  return false;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Device 0's allocated figure in the view's table ("0  192.00 MiB ..."), in MiB; -1 if absent.
double allocated_mib(const std::string& pane) {
  static const std::regex row(R"(^0 +([0-9.]+) MiB +[0-9.]+ [KMG]iB)");
  for (const std::string& line : lines_of(pane)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) return std::stod(m[1]);
  }
  return -1;
}

std::string sim_env() {
  return std::string("env LD_LIBRARY_PATH=") + SIMCUDA_LIBRARY_DIR + " SIMCUDA_DEVICE_MEMORY=16GiB SIMCUDA_DEVICE_COUNT=1 ";
}

const std::string kApp = std::string(CUMEMTRACE_APPS_DIR) + "/live_allocator";

// The program prints more lines than the 28 rows above the panel: they
// scroll in the region above it and none lands in the panel.
TEST(Top, RunLiveShowsAPanelBelowTheProgramsOutput) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  TempDir dir;
  const std::string trace = dir / "t.jsonl";
  Pane pane(dir, "cd " + dir.dir() + " && " + sim_env() + CUMEMTRACE_CLI + " run --live -o " + trace + " -- " + kApp +
                     " 30 100; echo EXIT=$?; sleep 60");
  // While it runs: the figures of the program's device, its top call site.
  const std::string running = pane.wait_for(
      [](const std::string& t) { return contains(t, "[following]") && contains(t, "grow_cache") && allocated_mib(t) >= 64; },
      15, "the panel with figures");
  const double mib = allocated_mib(running);
  EXPECT_EQ(static_cast<long>(mib) % 64, 0) << running;  // 64 MiB per step
  static const std::regex site(R"(^ +[0-9.]+ MiB +[0-9]+  grow_cache$)");
  bool site_row = false;
  for (const std::string& line : lines_of(running)) site_row |= std::regex_search(line, site);
  EXPECT_TRUE(site_row) << running;

  const std::string done = pane.wait_for([](const std::string& t) { return contains(t, "EXIT="); }, 15, "the end");
  EXPECT_TRUE(contains(done, "EXIT=0")) << done;
  // The program's lines, whole and in order, all above the panel's rule;
  // the final frame below it; the run's own last line after that.
  const std::vector<std::string> lines = lines_of(done);
  std::size_t rule = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80", 0) == 0) rule = i;
  }
  ASSERT_LT(rule, lines.size()) << done;
  std::size_t next = 1, seen_done = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (!contains(line, "live_allocator: ")) continue;
    EXPECT_LT(i, rule) << "program output inside the panel:\n" << done;
    if (line == "live_allocator: done") {
      ++seen_done;
      continue;
    }
    EXPECT_EQ(line, "live_allocator: step " + std::to_string(next) + " of 30, cache " + std::to_string(next * 64) +
                        " MiB")
        << done;
    ++next;
  }
  EXPECT_EQ(next, 31u) << done;
  EXPECT_EQ(seen_done, 1u) << done;
  bool ended = false, written = false;
  for (std::size_t i = rule; i < lines.size(); ++i) {
    ended |= contains(lines[i], "[ended (exit)]");
    written |= contains(lines[i], "trace written to " + trace + ": complete");
  }
  EXPECT_TRUE(ended && written) << done;
}

TEST(Top, FollowsARunningProgramAndExitsZeroAtTheEnd) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  TempDir dir;
  const std::string trace = dir / "t.jsonl.zst";  // compressed: zstd frames flushed per batch
  Pane pane(dir, std::string(CUMEMTRACE_CLI) + " top --interval 0.3 " + trace + "; echo EXIT=$?; sleep 60");
  pane.wait_for([&](const std::string& t) { return contains(t, "waiting for " + trace); }, 10, "top to wait");
  const RunningCommand program = start_command(
      {CUMEMTRACE_CLI, "run", "-o", trace, "--", kApp, "8", "250"},
      {{"LD_LIBRARY_PATH", SIMCUDA_LIBRARY_DIR}, {"SIMCUDA_DEVICE_MEMORY", "16GiB"}, {"SIMCUDA_DEVICE_COUNT", "1"}}, dir);
  const std::string running = pane.wait_for(
      [](const std::string& t) { return contains(t, "grow_cache") && allocated_mib(t) >= 64; }, 15, "figures");
  EXPECT_TRUE(contains(running, "live_allocator (pid ")) << running;
  const CommandResult r = wait_command(program);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string done = pane.wait_for([](const std::string& t) { return contains(t, "EXIT="); }, 10, "top's exit");
  EXPECT_TRUE(contains(done, "EXIT=0")) << done;
  // Out of the alternate screen, the last frame stays on the terminal.
  EXPECT_TRUE(contains(done, "[ended (exit)]")) << done;
  EXPECT_TRUE(contains(done, "513.00 MiB")) << done;  // the peak: 8 steps of 64 MiB and the 1 MiB scratch
}

}  // namespace
}  // namespace cumemtrace::testing
