// Growth verdicts of several threads running loops at once (issue 32): each
// thread's own iterations decide, so every interleaving of the same threads'
// events gives the same verdict.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "event_feeder.h"
#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer {
namespace {

constexpr std::uint64_t kLeakStack = 3;

// One thread's events, in its own order; pointers are assigned when fed.
struct ThreadEvent {
  enum Kind { alloc, free, push } kind;
  std::uint64_t size = 0;
  std::uint64_t stack = 0;
  std::size_t alloc_index = 0;  // free: which of the thread's allocations
  std::string name;             // push
};
struct Thread {
  std::uint64_t tid = 0;
  std::vector<ThreadEvent> events;
};

// A training step per iteration: activations and a workspace come and go,
// and `leak` bytes are kept (none when 0).
Thread training_thread(std::uint64_t tid, int steps, std::uint64_t leak, bool marks) {
  Thread t{tid, {}};
  std::size_t allocs = 0;
  for (int i = 0; i < steps; ++i) {
    if (marks) t.events.push_back({ThreadEvent::push, 0, 0, 0, "step " + std::to_string(i)});
    const std::size_t activations = allocs++, workspace = allocs++;
    t.events.push_back({ThreadEvent::alloc, 256 << 10, 1, 0, {}});
    t.events.push_back({ThreadEvent::alloc, 64 << 10, 2, 0, {}});
    t.events.push_back({ThreadEvent::free, 0, 0, activations, {}});
    t.events.push_back({ThreadEvent::free, 0, 0, workspace, {}});
    if (leak != 0) {
      t.events.push_back({ThreadEvent::alloc, leak, kLeakStack, 0, {}});
      ++allocs;
    }
  }
  return t;
}

// Feeds the threads' events interleaved at random (`seed`) in runs of 1 to
// `max_run` events of one thread; seed 0: one thread after the other.
GrowthResult growth_of(const std::vector<Thread>& threads, unsigned seed, std::size_t max_run) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  std::mt19937 random(seed);
  std::vector<std::size_t> next(threads.size(), 0);
  std::vector<std::vector<std::uint64_t>> pointers(threads.size());
  std::uint64_t t = 0, ptr = 0x7f0000000000;
  for (;;) {
    std::vector<std::size_t> open;
    for (std::size_t i = 0; i < threads.size(); ++i) {
      if (next[i] < threads[i].events.size()) open.push_back(i);
    }
    if (open.empty()) break;
    const std::size_t i = seed == 0 ? open.front() : open[random() % open.size()];
    const std::size_t run = seed == 0 ? threads[i].events.size() : 1 + random() % max_run;
    for (std::size_t n = 0; n < run && next[i] < threads[i].events.size(); ++n) {
      const ThreadEvent& e = threads[i].events[next[i]++];
      const std::uint64_t tid = threads[i].tid;
      if (e.kind == ThreadEvent::push) {
        feed.push(++t, e.name, tid);
      } else if (e.kind == ThreadEvent::alloc) {
        pointers[i].push_back(ptr += 0x100000);
        feed.alloc(++t, ptr, e.size, e.stack, 0, std::nullopt, tid);
      } else {
        feed.free(++t, pointers[i][e.alloc_index], 0, 0, tid);
      }
    }
  }
  return analysis.growth();
}

struct Verdict {
  std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>> leaks;  // stack, rate, threads
  std::vector<std::pair<std::uint64_t, IterationInfo::Source>> threads;          // tid, source
  bool operator==(const Verdict&) const = default;
};

// Readable failures: "leaks [stack 3: 2048 B/iteration in 2 threads] threads [101: period, ...]".
void PrintTo(const Verdict& v, std::ostream* os) {
  *os << "leaks [";
  for (const auto& [stack, rate, threads] : v.leaks) *os << "stack " << stack << ": " << rate << " B/iteration in " << threads << " threads; ";
  *os << "] threads [";
  for (const auto& [tid, source] : v.threads) *os << tid << ": " << name(source) << "; ";
  *os << "]";
}

Verdict verdict_of(const GrowthResult& r) {
  Verdict v;
  for (const GrowthLeak& g : r.leaks) v.leaks.emplace_back(g.stack, g.bytes_per_iteration, g.threads);
  for (const ThreadIterations& t : r.iterations.threads) v.threads.emplace_back(t.tid, t.source);
  return v;
}

// The verdict of every interleaving tried, which must all be the same.
Verdict same_verdict_for_every_interleaving(const std::vector<Thread>& threads) {
  const Verdict first = verdict_of(growth_of(threads, 0, 0));
  for (unsigned seed = 1; seed <= 24; ++seed) {
    const std::size_t max_run = 1 + seed % 6;  // from strict alternation to runs of six
    EXPECT_EQ(verdict_of(growth_of(threads, seed, max_run)), first) << "seed " << seed;
  }
  return first;
}

TEST(GrowthThreads, TwoThreadsLeakingTheSameWayGiveOneVerdictInEveryInterleaving) {
  const std::vector<Thread> threads = {training_thread(101, 40, 2048, false), training_thread(102, 40, 2048, false)};
  const Verdict v = same_verdict_for_every_interleaving(threads);
  ASSERT_EQ(v.leaks.size(), 1u);
  EXPECT_EQ(v.leaks[0], std::make_tuple(kLeakStack, std::uint64_t{2048}, std::uint64_t{2}));
  ASSERT_EQ(v.threads.size(), 2u);
  EXPECT_EQ(v.threads[0].second, IterationInfo::Source::period);
  EXPECT_EQ(v.threads[1].second, IterationInfo::Source::period);
}

TEST(GrowthThreads, EightThreadsLeakingAtDifferentRatesGiveOneVerdictInEveryInterleaving) {
  std::vector<Thread> threads;
  for (std::uint64_t i = 0; i < 8; ++i) {
    // Thread 5 keeps nothing: it grows in 7 threads; thread 7 is the fastest.
    threads.push_back(training_thread(200 + i, 24, i == 5 ? 0 : (i + 1) * 512, /*marks=*/i % 2 == 0));
  }
  const Verdict v = same_verdict_for_every_interleaving(threads);
  ASSERT_EQ(v.leaks.size(), 1u);
  EXPECT_EQ(v.leaks[0], std::make_tuple(kLeakStack, std::uint64_t{8 * 512}, std::uint64_t{7}));
  ASSERT_EQ(v.threads.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(v.threads[i].second, i % 2 == 0 ? IterationInfo::Source::marks : IterationInfo::Source::period);
  }
  const GrowthResult r = growth_of(threads, 7, 3);
  EXPECT_EQ(r.leaks[0].tid, 207u);
  EXPECT_EQ(r.iterations.tid, 207u);  // the main thread is the largest leak's
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::period);
}

TEST(GrowthThreads, SteadyThreadsAreNotFlaggedInAnyInterleaving) {
  const std::vector<Thread> threads = {training_thread(1, 30, 0, false), training_thread(2, 30, 0, false)};
  EXPECT_TRUE(same_verdict_for_every_interleaving(threads).leaks.empty());
}

TEST(GrowthThreads, AThreadWithoutALoopOfItsOwnFollowsTheOtherThreadsMarks) {
  // Thread 1 marks its steps; thread 2 (a helper working while thread 1
  // waits) allocates one buffer per step and keeps it: no period of its own.
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  std::uint64_t t = 0, ptr = 0x1000000;
  for (int i = 0; i < 10; ++i) {
    feed.push(++t, "step " + std::to_string(i), 1);
    feed.alloc(++t, ptr += 0x100000, 1 << 20, 1, 0, std::nullopt, 1);
    feed.free(++t, ptr, 0, 0, 1);
    feed.alloc(++t, ptr += 0x100000, 4096, 2, 0, std::nullopt, 2);
  }
  const GrowthResult r = analysis.growth();
  ASSERT_EQ(r.leaks.size(), 1u);
  EXPECT_EQ(r.leaks[0].stack, 2u);
  EXPECT_EQ(r.leaks[0].bytes_per_iteration, 4096u);
  ASSERT_EQ(r.iterations.threads.size(), 2u);
  EXPECT_FALSE(r.iterations.threads[0].other_threads_marks);
  EXPECT_TRUE(r.iterations.threads[1].other_threads_marks);
  EXPECT_EQ(r.iterations.threads[1].mark, "step #");
}

TEST(GrowthThreads, ThreadsWithoutALoopLeaveGrowthUnassessed) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  std::uint64_t t = 0, ptr = 0x1000000;
  for (std::uint64_t tid : {1, 2}) {
    for (std::uint64_t i = 0; i < 3; ++i) feed.alloc(++t, ptr += 0x1000000, (i + 1) << 20, i + 1, 0, std::nullopt, tid);
  }
  const GrowthResult r = analysis.growth();
  EXPECT_EQ(r.iterations.source, IterationInfo::Source::none);
  EXPECT_TRUE(r.iterations.threads.empty());
  EXPECT_EQ(r.iterations.threads_without, 2u);
}

}  // namespace
}  // namespace cumemtrace::analyzer
