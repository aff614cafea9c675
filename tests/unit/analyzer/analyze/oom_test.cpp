// Out-of-memory sentences: fragmentation, capacity, a shared device, graph
// memory; the
// cause when the trace does not give one; OOM records keep their phase.
#include <gtest/gtest.h>

#include "event_feeder.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/oom.h"

namespace cumemtrace::analyzer {
namespace {

OomRecord fragmented() {
  OomRecord o;
  o.t = 12300000000;
  o.dev = 0;
  o.api = "cudaMalloc";
  o.size = 2770000000;
  o.block = 2772434944;
  o.allocated = 8790000000;
  o.reserved = 14120000000;
  o.cached_free = 5330000000;
  o.largest_free = 1181116006;
  o.device_free = 1793148846;
  o.device_total = 16940000000;
  o.cause = "fragmentation";
  o.phase = "step 41/backward";
  return o;
}

TEST(OomSentence, FragmentationNamesThePiecesAndWhatToTry) {
  EXPECT_EQ(explain_oom(fragmented(), OomAdviceContext{true, true}),
            "needed 2.58 GiB (rounded to 2.58 GiB) on device 0 at 12.300000 s in phase 'step 41/backward'; "
            "4.96 GiB was cached but the largest free block was 1.10 GiB and the device had 1.67 GiB free: "
            "fragmentation, the free memory is in pieces smaller than the request — try "
            "CUMEMTRACE_POOL_CONF=max_split_size_mb:2048 (blocks above that size are then kept whole) or "
            "CUMEMTRACE_POOL_CONF=expandable_segments:True, or free cached memory (torch.cuda.empty_cache())");
}

TEST(OomSentence, FragmentationAdviceFollowsThePoolAndTheRequest) {
  OomRecord o = fragmented();
  o.block.reset();
  o.size = 8 << 20;  // too small for max_split_size_mb (PyTorch wants more than 20)
  o.phase.clear();
  const std::string s = explain_oom(o, OomAdviceContext{false, true});  // passthrough: PyTorch's allocator
  EXPECT_EQ(s.find("rounded"), std::string::npos) << s;
  EXPECT_EQ(s.find("max_split_size_mb"), std::string::npos) << s;
  EXPECT_EQ(s.find(" in phase"), std::string::npos) << s;
  EXPECT_NE(s.find("try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), std::string::npos) << s;
}

TEST(OomSentence, CapacitySaysTheProgramNeedsMoreThanTheDeviceHas) {
  OomRecord o;
  o.t = 6000;
  o.size = 85000000000;
  o.block = 85000011776;
  o.allocated = 1879048192;
  o.reserved = 2147483648;
  o.cached_free = 268435456;
  o.largest_free = 268435456;
  o.device_free = 82000000000;
  o.device_total = 85045870592;
  o.cause = "capacity";
  EXPECT_EQ(explain_oom(o, OomAdviceContext{true, false}),
            "needed 79.16 GiB (rounded to 79.16 GiB) on device 0 at 0.000006 s; 1.75 GiB was allocated and only "
            "76.62 GiB was free in total (256.00 MiB cached, 76.37 GiB on the device): capacity, the program needs "
            "more memory than the device has (79.21 GiB) — reduce the batch or problem size, or free buffers you "
            "no longer need, or spread the work over more devices");
}

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// A 20 GiB request on an 80 GiB device of which the pool holds 10 GiB and
// 5 GiB is free: 65 GiB is held by something other than the pool.
OomRecord capacity_failure_on_a_full_device() {
  OomRecord o;
  o.t = 1000000000;
  o.dev = 1;
  o.size = 20 * kGiB;
  o.allocated = 9 * kGiB;
  o.reserved = 10 * kGiB;
  o.cached_free = 1 * kGiB;
  o.largest_free = 1 * kGiB;
  o.device_free = 5 * kGiB;
  o.device_total = 80 * kGiB;
  return o;
}

TEST(OomSentence, CapacityOnASharedDeviceSaysWhoHoldsTheMemory) {
  OomRecord o = capacity_failure_on_a_full_device();
  o.cause = "capacity";
  EXPECT_EQ(explain_oom(o, OomAdviceContext{true, true}),
            "needed 20.00 GiB on device 1 at 1.000000 s; 9.00 GiB was allocated and only 6.00 GiB was free in "
            "total (1.00 GiB cached, 5.00 GiB on the device); 65.00 GiB of the device's 80.00 GiB was held outside "
            "this process's memory pool: capacity, the device is shared — stop the other processes on it "
            "(nvidia-smi lists them) or run on another device");
}

// The same device, but what the pool does not hold is the driver's CUDA
// graph memory (graph_mem): that is named, not other processes.
TEST(OomSentence, CapacityHeldByGraphMemoryNamesTheGraphs) {
  OomRecord o = capacity_failure_on_a_full_device();
  o.graph_reserved = 60 * kGiB;
  o.cause = "capacity";
  EXPECT_EQ(explain_oom(o, OomAdviceContext{true, true}),
            "needed 20.00 GiB on device 1 at 1.000000 s; 9.00 GiB was allocated and only 6.00 GiB was free in "
            "total (1.00 GiB cached, 5.00 GiB on the device); 60.00 GiB of the device's 80.00 GiB was CUDA graph "
            "memory (the memory nodes of instantiated graphs): capacity, graph memory holds the device — destroy "
            "the graph executables you no longer launch, then cudaDeviceGraphMemTrim() returns their memory");
  o.graph_reserved = 4 * kGiB;  // a small part: the device is still shared with others
  EXPECT_NE(explain_oom(o, OomAdviceContext{true, true}).find("61.00 GiB of the device's 80.00 GiB was held outside"),
            std::string::npos);
}

TEST(OomCause, ComputedWhenTheTraceGivesNone) {
  OomRecord o;
  o.size = 100;
  o.cached_free = 60;
  o.device_free = 40;
  EXPECT_EQ(oom_cause(o), OomCause::fragmentation);  // 100 free in total would have held it
  o.block = 101;
  EXPECT_EQ(oom_cause(o), OomCause::capacity);
  o.cause = "fragmentation";
  EXPECT_EQ(oom_cause(o), OomCause::fragmentation);  // the trace's word wins
}

TEST(OomRecords, KeepTheirFiguresAndPhase) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.push(1, "step 7");
  TraceEvent e;
  e.ev = format::Event::oom;
  e.t = 2;
  e.tid = 1;
  e.dev = 0;
  e.api = "cudaMalloc";
  e.size = 1000;
  e.block = 1024;
  e.cached_free = 2048;
  e.largest_free = 512;
  e.device_free = 0;
  e.cause = "fragmentation";
  e.stack = 4;
  analysis.consume(e);
  ASSERT_EQ(analysis.oom_records().size(), 1u);
  const OomRecord& o = analysis.oom_records()[0];
  EXPECT_EQ(o.phase, "step 7");
  EXPECT_EQ(o.block, 1024u);
  EXPECT_EQ(o.stack, 4u);
  EXPECT_EQ(analysis.total().ooms, 1u);
  EXPECT_EQ(analysis.fragmentation().samples(), 1u);
  EXPECT_EQ(analysis.fragmentation().worst().cached_free_scattered.bytes, 1536u);
  EXPECT_EQ(o.graph_reserved, 0u);
  TraceEvent graph_mem;  // the driver's graph memory on device 0, then the same OOM
  graph_mem.ev = format::Event::graph_mem;
  graph_mem.t = 3;
  graph_mem.dev = 0;
  graph_mem.used = 4096;
  graph_mem.reserved = 8192;
  analysis.consume(graph_mem);
  analysis.consume(e);
  EXPECT_EQ(analysis.oom_records().back().graph_reserved, 8192u);
  for (int i = 0; i < 199; ++i) analysis.consume(e);
  EXPECT_EQ(analysis.oom_records().size(), Analysis::kMaxOomRecords);
  EXPECT_EQ(analysis.total().ooms, 201u);
}

}  // namespace
}  // namespace cumemtrace::analyzer
