// The advice (commands/advise.h) on hand-written traces whose outcome
// follows from PyTorch's documented rules (replay_test.cpp names them): a
// fragmentation failure that expandable segments avoid, a capacity failure
// no setting avoids, a caching allocator's segments that cannot be replayed,
// and the run's own setting as the baseline.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "analyzer_test_support.h"
#include "commands/advise.h"
#include "commands/trace_text.h"

namespace cumemtrace::analyzer {
namespace {

using namespace cumemtrace::analyzer::testing;
using testing::MiB;

// header_line() with the `env` the preload records and a pool mode.
std::string header_with(const std::string& env_json, const char* pool = "caching") {
  std::string h = header_line();
  if (!env_json.empty()) h.insert(h.find(R"("config")"), R"("env":)" + env_json + ",");
  if (std::string(pool) != "caching") h.replace(h.find(R"("pool":"caching")"), 16, R"("pool":")" + std::string(pool) + "\"");
  return h;
}

// A `--torch-tensors` run (PyTorch without its cache: one cudaMalloc per
// tensor). 50 tensors of 9 MiB take two to a 20 MiB segment under PyTorch's
// rules; every other one is freed, so each segment keeps one live tensor and
// none can go back. Then 200 MiB is asked for: live memory is 225 MiB and
// the allocator had 600 MiB (500 reserved + 100 free when it failed), but no
// 200 MiB piece is free and no segment can be released. Expandable segments
// give back the pages under the freed tensors and map them at the end.
TraceText fragmentation_failure() {
  TraceText t(header_with(R"({"PYTORCH_NO_CUDA_MEMORY_CACHING":"1"})"));
  t.device(0, 1024 * MiB);
  for (std::uint64_t i = 0; i < 50; ++i) t.alloc(0x10000000 + i * 0x1000000, 9 * MiB);
  for (std::uint64_t i = 0; i < 50; i += 2) t.free(0x10000000 + i * 0x1000000, 9 * MiB);
  t.oom(200 * MiB, 500 * MiB, 100 * MiB);
  return t;
}

const CandidateOutcome* find(const Advice& a, const std::string& setting) {
  for (const CandidateOutcome& o : a.outcomes) {
    if (o.candidate.kind == AdviceCandidate::Kind::torch && o.candidate.setting == setting) return &o;
  }
  return nullptr;
}

TEST(Advise, ExpandableSegmentsAvoidAFragmentationFailure) {
  TempDir dir;
  const ReplayTrace trace = fragmentation_failure().load(dir);
  ASSERT_EQ(trace.ooms.size(), 1u);
  EXPECT_EQ(trace.devices.front().usable_at_oom, 600 * MiB);
  const Advice a = advise(trace, AdviseOptions{});
  ASSERT_EQ(a.replayable, Replayable::yes) << a.not_replayable;
  EXPECT_EQ(a.flavor, AdviceFlavor::torch);
  ASSERT_EQ(a.capacities.size(), 1u);
  EXPECT_EQ(a.capacities.front(), 600 * MiB);
  // The replay of the run's setting fails where the run failed.
  const CandidateOutcome& base = a.outcomes.front();
  EXPECT_TRUE(base.candidate.as_run);
  EXPECT_EQ(base.candidate.setting, "");
  EXPECT_EQ(base.failures_on_device, 1u);
  // Capacity is not the problem: at most 450 MiB at once (the 50 tensors;
  // 225 MiB + 200 MiB when it failed).
  EXPECT_EQ(base.min.peak_demand, 450 * MiB);
  const CandidateOutcome* expandable = find(a, "expandable_segments:True");
  ASSERT_NE(expandable, nullptr);
  EXPECT_EQ(expandable->failures_on_device, 0u);
  // max_split_size_mb does not help: the segments cannot be released.
  EXPECT_EQ(find(a, "max_split_size_mb:128")->failures_on_device, 1u);

  ASSERT_EQ(a.verdict, Advice::Verdict::avoid_oom);
  ASSERT_TRUE(a.recommended);
  EXPECT_EQ(a.outcomes[*a.recommended].candidate.setting, "expandable_segments:True");
  const std::string text = render_advice_text(a);
  EXPECT_NE(text.find("Recommendation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 train.py"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("It avoids the out-of-memory failure: on the same 600.00 MiB it serves every request, the "
                      "200.00 MiB request that failed"),
            std::string::npos)
      << text;
  const nlohmann::ordered_json j = advice_json(a);
  EXPECT_EQ(j["verdict"], "avoid_oom");
  EXPECT_EQ(j["recommendation"], "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 train.py");
}

// The run failed, but with 100 MiB live, 50 MiB asked for and 600 MiB
// usable, its replay does not: the advice says the trace does not show why
// and advises as for a run that did not fail.
TEST(Advise, AFailureTheReplayDoesNotReproduceIsSaidSo) {
  TempDir dir;
  TraceText t(header_with(R"({"PYTORCH_NO_CUDA_MEMORY_CACHING":"1"})"));
  t.alloc(0x10000000, 100 * MiB);
  t.oom(50 * MiB, 100 * MiB, 500 * MiB);
  const Advice a = advise(t.load(dir), AdviseOptions{});
  EXPECT_EQ(a.outcomes.front().failures_on_device, 0u);
  EXPECT_NE(a.caveat.find("The run failed for lack of memory, but its replay with PyTorch defaults, as run on the "
                          "same capacity does not"),
            std::string::npos)
      << a.caveat;
  EXPECT_TRUE(a.verdict == Advice::Verdict::keep || a.verdict == Advice::Verdict::save);
}

// 400 MiB live and 300 MiB more asked for, on 600 MiB: no allocator can.
TEST(Advise, ACapacityFailureSaysHowMuchLargerTheDeviceMustBe) {
  TempDir dir;
  TraceText t(header_with(R"({"PYTORCH_NO_CUDA_MEMORY_CACHING":"1"})"));
  t.device(0, 1024 * MiB);
  for (std::uint64_t i = 0; i < 4; ++i) t.alloc(0x10000000 + i * 0x10000000, 100 * MiB);
  t.oom(300 * MiB, 400 * MiB, 200 * MiB);
  const Advice a = advise(t.load(dir), AdviseOptions{});
  ASSERT_EQ(a.verdict, Advice::Verdict::needs_capacity);
  for (const CandidateOutcome& o : a.outcomes) {
    EXPECT_GE(o.failures_on_device.value_or(0), 1u) << candidate_label(o.candidate);
  }
  // 700 MiB at once: the smallest device any setting runs on holds that.
  EXPECT_GE(a.needed_capacity, 700 * MiB);
  EXPECT_LE(a.needed_capacity, 702 * MiB);
  const std::string text = render_advice_text(a);
  EXPECT_NE(text.find("No setting avoids it: this is capacity, not fragmentation. The program needs 700.00 MiB at "
                      "once (the failed request included), more than the 600.00 MiB its allocator had."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("100.00 MiB more"), std::string::npos) << text;
}

// PyTorch's default allocator under cumemtrace: the trace holds its 20 MiB
// segments, allocated from libc10_cuda.so.
TEST(Advise, ACachingAllocatorsSegmentsAreNotReplayed) {
  TempDir dir;
  TraceText t;
  t.stack(1, "/usr/lib/python3/dist-packages/torch/lib/libc10_cuda.so");
  for (std::uint64_t i = 0; i < 4; ++i) t.alloc(0x10000000 + i * 0x10000000, 20 * MiB, 0, {}, "device", 1);
  const Advice a = advise(t.load(dir), AdviseOptions{});
  EXPECT_EQ(a.replayable, Replayable::segments);
  EXPECT_EQ(a.verdict, Advice::Verdict::cannot_replay);
  EXPECT_TRUE(a.outcomes.empty());
  const std::string text = render_advice_text(a);
  EXPECT_NE(text.find("4 of the trace's 4 allocations come from PyTorch's caching allocator"), std::string::npos)
      << text;
  EXPECT_NE(text.find("cumemtrace run --torch-tensors -- python3 train.py"), std::string::npos) << text;
  EXPECT_NE(text.find("_record_memory_history"), std::string::npos) << text;
}

// The same library with PyTorch's cache off: those are tensors.
TEST(Advise, PyTorchWithoutItsCacheIsReplayed) {
  TempDir dir;
  TraceText t(header_with(R"({"PYTORCH_NO_CUDA_MEMORY_CACHING":"1"})"));
  t.stack(1, "/usr/lib/python3/dist-packages/torch/lib/libc10_cuda.so");
  for (std::uint64_t i = 0; i < 4; ++i) t.alloc(0x10000000 + i * 0x10000000, 3 * MiB + 512, 0, {}, "device", 1);
  const Advice a = advise(t.load(dir), AdviseOptions{});
  EXPECT_EQ(a.replayable, Replayable::yes) << a.not_replayable;
  EXPECT_EQ(a.flavor, AdviceFlavor::torch);
}

TEST(Advise, ATraceWithoutAllocationsHasNothingToReplay) {
  TempDir dir;
  const Advice a = advise(TraceText().load(dir), AdviseOptions{});
  EXPECT_EQ(a.replayable, Replayable::empty);
  EXPECT_EQ(a.verdict, Advice::Verdict::cannot_replay);
}

// The run's PYTORCH_CUDA_ALLOC_CONF is the baseline, the defaults a
// candidate; a setting the replay cannot model is said so.
TEST(Advise, TheRunsOwnSettingIsTheBaseline) {
  TempDir dir;
  TraceText t(header_with(R"({"PYTORCH_NO_CUDA_MEMORY_CACHING":"1","PYTORCH_CUDA_ALLOC_CONF":"expandable_segments:True"})"));
  t.alloc(0x10000000, 3 * MiB);
  const Advice a = advise(t.load(dir), AdviseOptions{});
  ASSERT_GE(a.outcomes.size(), 3u);
  EXPECT_TRUE(a.outcomes[0].candidate.as_run);
  EXPECT_EQ(a.outcomes[0].candidate.setting, "expandable_segments:True");
  EXPECT_EQ(candidate_label(a.outcomes[0].candidate), "expandable_segments:True, as run");
  EXPECT_EQ(candidate_label(a.outcomes[1].candidate), "PyTorch defaults");
  int expandable_rows = 0;
  for (const CandidateOutcome& o : a.outcomes) expandable_rows += o.candidate.setting == "expandable_segments:True";
  EXPECT_EQ(expandable_rows, 1);
  // One small tensor: nothing to save.
  EXPECT_EQ(a.verdict, Advice::Verdict::keep);
  EXPECT_TRUE(a.run_setting_note.empty());

  TraceText async(header_with(R"({"PYTORCH_NO_CUDA_MEMORY_CACHING":"1","PYTORCH_CUDA_ALLOC_CONF":"backend:cudaMallocAsync"})"));
  async.alloc(0x10000000, 3 * MiB);
  const Advice b = advise(async.load(dir, "async.jsonl"), AdviseOptions{});
  EXPECT_NE(b.run_setting_note.find("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync cannot be replayed"),
            std::string::npos)
      << b.run_setting_note;
  EXPECT_EQ(candidate_label(b.outcomes[0].candidate), "PyTorch defaults, as run");
}

// A program that is not PyTorch, traced without the pool: the candidates
// are cumemtrace's pool, the run (one cudaMalloc each) the baseline.
TEST(Advise, AProgramOfItsOwnIsAdvisedCumemtracesPool) {
  TempDir dir;
  TraceText t(header_with("", "passthrough"));
  t.device(0, 1024 * MiB);
  for (std::uint64_t i = 0; i < 8; ++i) t.alloc(0x10000000 + i * 0x10000000, 30 * MiB);
  const Advice a = advise(t.load(dir), AdviseOptions{});
  EXPECT_EQ(a.flavor, AdviceFlavor::program);
  ASSERT_FALSE(a.outcomes.empty());
  EXPECT_EQ(a.outcomes[0].candidate.kind, AdviceCandidate::Kind::per_allocation);
  EXPECT_TRUE(a.outcomes[0].candidate.as_run);
  EXPECT_EQ(a.outcomes[0].peak_reserved, 240 * MiB);
  EXPECT_EQ(a.outcomes[0].failures_on_device, 0u);
  for (const CandidateOutcome& o : a.outcomes) {
    EXPECT_NE(o.candidate.kind, AdviceCandidate::Kind::torch) << candidate_label(o.candidate);
  }
  // Nothing freed, nothing to reuse: keep running as it does.
  EXPECT_EQ(a.verdict, Advice::Verdict::keep);
}

// Every device's capacity from --capacity; the device's total otherwise;
// unknown without either (a snapshot): no failure counts then.
TEST(Advise, CapacityComesFromTheOptionTheFailureOrTheDevice) {
  TempDir dir;
  TraceText t(header_with(R"({"PYTORCH_NO_CUDA_MEMORY_CACHING":"1"})"));
  t.alloc(0x10000000, 3 * MiB);
  const ReplayTrace trace = t.load(dir);
  const Advice unknown = advise(trace, AdviseOptions{});
  EXPECT_EQ(unknown.capacities.front(), 0u);
  EXPECT_FALSE(unknown.outcomes.front().failures_on_device);
  AdviseOptions options;
  options.capacity = 2 * MiB;
  const Advice tiny = advise(trace, options);
  EXPECT_EQ(tiny.capacities.front(), 2 * MiB);
  EXPECT_EQ(tiny.outcomes.front().failures_on_device, 1u);
  EXPECT_EQ(tiny.verdict, Advice::Verdict::needs_capacity);
}

// The replay's jobs do not change the answer.
TEST(Advise, OneThreadOrManyGiveTheSameAdvice) {
  TempDir dir;
  const ReplayTrace trace = fragmentation_failure().load(dir);
  AdviseOptions one;
  one.jobs = 1;
  AdviseOptions many;
  many.jobs = 8;
  EXPECT_EQ(advice_json(advise(trace, one)).dump(), advice_json(advise(trace, many)).dump());
}

TEST(Advise, PasteLinesQuoteWhatTheShellWouldSplit) {
  AdviceCandidate c;
  c.setting = "garbage_collection_threshold:0.6,max_split_size_mb:128";
  EXPECT_EQ(paste_line(c, "python3 train.py"),
            "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6,max_split_size_mb:128 python3 train.py");
  c.setting = "roundup_power2_divisions:[256:1,>:4]";
  EXPECT_EQ(paste_line(c, ""), "export PYTORCH_CUDA_ALLOC_CONF='roundup_power2_divisions:[256:1,>:4]'");
  c.kind = AdviceCandidate::Kind::torch_tensors;
  EXPECT_EQ(paste_line(c, ""), "cumemtrace run --torch-tensors -- <your command>");
}

// The command: exit 0 with advice, 3 when there is nothing it can replay
// (saying what to record), 2 for usage errors; JSON has the same verdict.
TEST(AdviseCli, ExitCodesAndFormats) {
  TempDir dir;
  fragmentation_failure().load(dir, "frag.jsonl");
  CommandResult text = run_command({cli_path(), "advise", dir / "frag.jsonl"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Recommendation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), std::string::npos)
      << text.out;
  CommandResult json = run_command({cli_path(), "advise", dir / "frag.jsonl", "--format", "json", "--jobs", "1"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["verdict"], "avoid_oom");
  EXPECT_EQ(j["candidates"][j["recommended"].get<std::size_t>()]["value"], "expandable_segments:True");
  // A larger device than the run's: nothing fails there.
  CommandResult larger = run_command({cli_path(), "advise", dir / "frag.jsonl", "--capacity", "2GiB"});
  EXPECT_EQ(larger.exit_code, 0) << larger.err;
  EXPECT_NE(larger.out.find("capacity: --capacity"), std::string::npos) << larger.out;

  TraceText segments;
  segments.stack(1, "/opt/conda/lib/python3.11/site-packages/torch/lib/libc10_cuda.so");
  segments.alloc(0x10000000, 20 * MiB, 0, {}, "device", 1);
  segments.load(dir, "segments.jsonl");
  CommandResult refused = run_command({cli_path(), "advise", dir / "segments.jsonl"});
  EXPECT_EQ(refused.exit_code, 3) << refused.err;
  EXPECT_NE(refused.out.find("--torch-tensors"), std::string::npos) << refused.out;

  for (const char* bad : {"", "lots", "0", "unlimited"}) {
    CommandResult r = run_command({cli_path(), "advise", dir / "frag.jsonl", "--capacity", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--capacity: '"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_command({cli_path(), "advise", dir / "absent.jsonl"}).exit_code, 2);
}

}  // namespace
}  // namespace cumemtrace::analyzer
