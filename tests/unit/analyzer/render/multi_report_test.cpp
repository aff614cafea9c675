// Several traces in one report: ranks from file names and command lines,
// parents of forked and spawned children, totals.
#include <gtest/gtest.h>

#include "cumemtrace/analyzer/multi_report.h"

namespace cumemtrace::analyzer {
namespace {

using Json = nlohmann::ordered_json;

ProcessRow row(std::string trace, std::int64_t pid, std::int64_t ppid, std::vector<std::string> argv = {"train"}) {
  ProcessRow r;
  r.trace = std::move(trace);
  r.pid = pid;
  r.ppid = ppid;
  r.host = "node7";
  r.exe = "/usr/bin/python3";
  r.argv = std::move(argv);
  return r;
}

TEST(RankLabels, FromFileNamesWithTheWordRank) {
  EXPECT_EQ(rank_from_file_name("/tmp/job.rank3.jsonl"), 3);
  EXPECT_EQ(rank_from_file_name("job-RANK_12.node7.4242.jsonl.zst"), 12);
  EXPECT_EQ(rank_from_file_name("rank-0.jsonl"), 0);
  EXPECT_EQ(rank_from_file_name("rank7/trace.jsonl"), std::nullopt);  // only the file's own name counts
  EXPECT_EQ(rank_from_file_name("cumemtrace.node7.4242.jsonl"), std::nullopt);
  EXPECT_EQ(rank_from_file_name("frankly.jsonl"), std::nullopt);
}

TEST(RankLabels, FromCommandLines) {
  EXPECT_EQ(rank_from_argv({"train.py", "--rank", "2"}), 2);
  EXPECT_EQ(rank_from_argv({"train.py", "--local-rank=5"}), 5);
  EXPECT_EQ(rank_from_argv({"train.py", "--local_rank", "1", "--rank=9"}), 9);  // the global rank wins
  EXPECT_EQ(rank_from_argv({"train.py", "--rank"}), std::nullopt);
  EXPECT_EQ(rank_from_argv({"train.py", "--rankish=3"}), std::nullopt);
}

TEST(RankLabels, FromTheHeadersRankVariables) {
  EXPECT_EQ(rank_from_rank_env(Json({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"SLURM_PROCID", "0"}})), 3);
  // Under torchrun in a Slurm job SLURM_PROCID numbers nodes: RANK wins; then
  // the MPI launchers' own, Slurm's, and the local rank last.
  EXPECT_EQ(rank_from_rank_env(Json({{"OMPI_COMM_WORLD_RANK", "5"}, {"SLURM_PROCID", "1"}})), 5);
  EXPECT_EQ(rank_from_rank_env(Json({{"PMI_RANK", "6"}, {"SLURM_PROCID", "1"}, {"LOCAL_RANK", "0"}})), 6);
  EXPECT_EQ(rank_from_rank_env(Json({{"SLURM_PROCID", "2"}, {"LOCAL_RANK", "0"}})), 2);
  EXPECT_EQ(rank_from_rank_env(Json({{"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}})), 1);
  EXPECT_EQ(rank_from_rank_env(Json({{"RANK", "x"}, {"LOCAL_RANK", "1"}})), 1) << "a value that is no number is skipped";
  EXPECT_EQ(rank_from_rank_env(Json({{"RANK", 3}})), std::nullopt) << "only strings, as the writer records them";
  EXPECT_EQ(rank_from_rank_env(Json({{"WORLD_SIZE", "4"}})), std::nullopt);
  EXPECT_EQ(rank_from_rank_env(Json("3")), std::nullopt);
}

TEST(RankLabels, TheHeaderWinsOverTheFileNameWhichWinsOverTheCommandLine) {
  Json report = {{"trace", "job.rank2.jsonl"},
                 {"program", {{"argv", {"train.py", "--rank", "1"}}, {"rank_env", {{"RANK", "3"}}}}}};
  EXPECT_EQ(rank_of_report(report), 3);
  report["program"].erase("rank_env");
  EXPECT_EQ(rank_of_report(report), 2);
  report["trace"] = "job.4242.jsonl";
  EXPECT_EQ(rank_of_report(report), 1);
  EXPECT_EQ(process_row(report).rank, 1);
  report["program"].erase("argv");
  EXPECT_EQ(rank_of_report(report), std::nullopt);
  EXPECT_EQ(trace_with_rank("job.jsonl", 3), "job.jsonl, rank 3");
  EXPECT_EQ(trace_with_rank("job.jsonl", std::nullopt), "job.jsonl");
}

TEST(RankLabels, BareNumbersRunningFromZeroAreRanksButPidsAreNot) {
  std::vector<ProcessRow> ranks = {row("out/job.1.jsonl", 501, 1), row("out/job.0.jsonl", 500, 1),
                                   row("out/job.2.jsonl", 502, 1)};
  label_processes(ranks);
  EXPECT_EQ(ranks[0].rank, 1);
  EXPECT_EQ(ranks[1].rank, 0);
  EXPECT_EQ(ranks[2].rank, 2);

  std::vector<ProcessRow> pids = {row("cumemtrace.node7.4242.jsonl", 4242, 1),
                                  row("cumemtrace.node7.4243.jsonl", 4243, 1)};
  label_processes(pids);
  EXPECT_EQ(pids[0].rank, std::nullopt);
  EXPECT_EQ(pids[1].rank, std::nullopt);

  // `%r.%p`: the rank is the number that runs 0..n-1, not the pid.
  std::vector<ProcessRow> both = {row("job.0.4242.jsonl", 4242, 1), row("job.1.4250.jsonl", 4250, 1)};
  label_processes(both);
  EXPECT_EQ(both[0].rank, 0);
  EXPECT_EQ(both[1].rank, 1);

  std::vector<ProcessRow> gap = {row("job.0.jsonl", 1, 1), row("job.2.jsonl", 2, 1)};
  label_processes(gap);
  EXPECT_EQ(gap[0].rank, std::nullopt);
}

TEST(Parents, ForkedAndSpawnedChildrenPointAtTheirParent) {
  std::vector<ProcessRow> rows = {row("parent.jsonl", 4242, 4100), row("forked.jsonl", 4250, 4242),
                                  row("worker.jsonl", 4260, 4242, {"worker", "--id", "1"}),
                                  row("other_host.jsonl", 4270, 4242)};
  rows[3].host = "node8";
  label_processes(rows);
  EXPECT_EQ(rows[0].parent, std::nullopt);
  EXPECT_EQ(rows[1].parent, 0u);
  EXPECT_TRUE(rows[1].forked);
  EXPECT_EQ(rows[2].parent, 0u);
  EXPECT_FALSE(rows[2].forked);  // another program: started, not forked
  EXPECT_EQ(rows[3].parent, std::nullopt);  // same pid on another host is someone else
}

Json one_report(const std::string& trace, std::int64_t pid, std::uint64_t peak, std::uint64_t leaked, bool truncated,
                std::uint64_t growth, double fragmentation) {
  return Json{{"trace", trace},
              {"program", {{"pid", pid}, {"ppid", 1}, {"host", "node7"}, {"exe", "/bin/app"}, {"argv", {"app"}}}},
              {"peak_allocated", peak},
              {"peak_reserved", peak * 2},
              {"allocs", 10},
              {"frees", 9},
              {"ooms", 1},
              {"leaked_bytes", leaked},
              {"leaked_count", 1},
              {"growth_bytes_per_iteration", growth},
              {"fragmentation", {{"at_peak_reserved", fragmentation}}},
              {"truncated", truncated}};
}

TEST(MultiReport, JsonHasTracesProcessesAndTotals) {
  std::vector<Json> reports = {one_report("job.rank0.jsonl", 10, 1000, 5, false, 64, 0.25),
                               one_report("job.rank1.jsonl", 11, 3000, 7, true, 32, 0.5)};
  std::vector<ProcessRow> rows;
  for (const Json& r : reports) rows.push_back(process_row(r));
  label_processes(rows);
  const Json j = render_json_multi(rows, reports);
  EXPECT_EQ(j["report_version"], 1);
  ASSERT_EQ(j["traces"].size(), 2u);
  EXPECT_EQ(j["traces"][1]["trace"], "job.rank1.jsonl");
  ASSERT_EQ(j["processes"].size(), 2u);
  EXPECT_EQ(j["processes"][0]["rank"], 0);
  EXPECT_EQ(j["processes"][1]["rank"], 1);
  EXPECT_EQ(j["processes"][1]["pid"], 11);
  EXPECT_TRUE(j["processes"][0]["parent"].is_null());
  const Json& t = j["totals"];
  EXPECT_EQ(t["processes"], 2);
  EXPECT_EQ(t["peak_allocated"], 4000);
  EXPECT_EQ(t["peak_reserved"], 8000);
  EXPECT_EQ(t["leaked_bytes"], 12);
  EXPECT_EQ(t["leaked_count"], 2);
  EXPECT_EQ(t["allocs"], 20);
  EXPECT_EQ(t["frees"], 18);
  EXPECT_EQ(t["ooms"], 2);
  EXPECT_EQ(t["growth_bytes_per_iteration"], 64);
  EXPECT_EQ(t["fragmentation_at_peak_reserved"], 0.5);
  EXPECT_EQ(t["truncated"], true);

  const std::string text = render_text_multi(rows, {"first report\n", "second report\n"});
  EXPECT_NE(text.find("cumemtrace report: 2 traces"), std::string::npos) << text;
  EXPECT_NE(text.find("======== job.rank1.jsonl (rank 1) ========\nsecond report\n"), std::string::npos) << text;
  EXPECT_NE(text.find("TRUNCATED:       job.rank1.jsonl"), std::string::npos) << text;
  EXPECT_NE(text.find("growth leaks:    at most 64 B per iteration (job.rank0.jsonl)"), std::string::npos) << text;
}

}  // namespace
}  // namespace cumemtrace::analyzer
