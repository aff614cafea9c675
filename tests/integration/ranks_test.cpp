// The ranks of a distributed job, as a launcher starts them (torchrun sets
// RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE in each process): every
// trace's header records them, and `report`, `check` and `diff` name each
// trace by its rank although the file names (pids) do not tell.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "integration_support.h"

using namespace cumemtrace::testing;
using nlohmann::json;

namespace {

constexpr int kRanks = 4;

// A launcher as small as a real one's core: one process per rank, each told
// its place by environment variables, then waits for them all.
const char* const kLauncher = R"(
app=$1; dir=$2
for rank in 0 1 2 3; do
  RANK=$rank LOCAL_RANK=$((rank % 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 "$app" "$dir/manifest.$rank" &
done
wait
)";

class Ranks : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto launched = run_command(
        {"/bin/sh", "-c", kLauncher, "launcher", CUMEMTRACE_APPS_DIR "/known_sequence", dir.dir()},
        sim_environment({{"LD_PRELOAD", CUMEMTRACE_PRELOAD}, {"CUMEMTRACE_OUTPUT", dir / "job.%p.jsonl"}}));
    ASSERT_EQ(launched.exit_code, 0) << launched.err;
    for (const auto& entry : std::filesystem::directory_iterator(dir.dir())) {
      if (entry.path().extension() == ".jsonl") traces.push_back(entry.path().string());
    }
    std::sort(traces.begin(), traces.end());
    ASSERT_EQ(traces.size(), static_cast<std::size_t>(kRanks));
    for (const std::string& trace : traces) {
      const json header = read_json_lines(trace).front();
      ASSERT_TRUE(header.contains("rank_env")) << header;
      rank_of[trace] = std::stoi(header["rank_env"]["RANK"].get<std::string>());
    }
  }

  TempDir dir;
  std::vector<std::string> traces;
  std::map<std::string, int> rank_of;  // from each header
};

TEST_F(Ranks, TheHeaderRecordsTheLaunchersVariables) {
  std::vector<int> ranks;
  for (const std::string& trace : traces) {
    const json header = read_json_lines(trace).front();
    const int rank = rank_of[trace];
    ranks.push_back(rank);
    EXPECT_EQ(header["rank_env"], (json{{"RANK", std::to_string(rank)},
                                        {"LOCAL_RANK", std::to_string(rank % 2)},
                                        {"WORLD_SIZE", "4"},
                                        {"LOCAL_WORLD_SIZE", "2"}}))
        << trace;
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(Ranks, ReportCheckAndDiffNameEachTracesRank) {
  std::vector<std::string> report_json = {CUMEMTRACE_CLI, "report", "--format", "json"};
  report_json.insert(report_json.end(), traces.begin(), traces.end());
  const auto report = run_command(report_json);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const json processes = json::parse(report.out)["processes"];
  ASSERT_EQ(processes.size(), static_cast<std::size_t>(kRanks));
  for (const json& p : processes) EXPECT_EQ(p["rank"], rank_of[p["trace"].get<std::string>()]) << p;

  std::vector<std::string> report_text = {CUMEMTRACE_CLI, "report"};
  report_text.insert(report_text.end(), traces.begin(), traces.end());
  const auto text = run_command(report_text);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const std::string& trace : traces) {
    const std::string section = "======== " + trace + " (rank " + std::to_string(rank_of[trace]) + ") ========";
    EXPECT_NE(text.out.find(section), std::string::npos) << section << "\n" << text.out;
  }

  // Every rank over a limit of one byte: each verdict says whose it is.
  std::vector<std::string> check = {CUMEMTRACE_CLI, "check", "--max-peak-allocated", "1"};
  check.insert(check.end(), traces.begin(), traces.end());
  const auto checked = run_command(check);
  EXPECT_EQ(checked.exit_code, 1) << checked.err;
  for (const std::string& trace : traces) {
    const std::string named = trace + ", rank " + std::to_string(rank_of[trace]);
    EXPECT_NE(checked.out.find("check " + named + "\n"), std::string::npos) << named << "\n" << checked.out;
    EXPECT_NE(checked.err.find("(trace " + named + ")\n"), std::string::npos) << named << "\n" << checked.err;
  }

  const auto diff = run_command({CUMEMTRACE_CLI, "diff", traces[0], traces[1]});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_NE(diff.out.find("  base: " + traces[0] + ", rank " + std::to_string(rank_of[traces[0]]) + "\n"),
            std::string::npos)
      << diff.out;
  EXPECT_NE(diff.out.find("  new:  " + traces[1] + ", rank " + std::to_string(rank_of[traces[1]]) + "\n"),
            std::string::npos)
      << diff.out;
}

}  // namespace
