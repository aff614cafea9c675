// The writer's merge where it is easiest to get wrong, made deterministic
// with its test hooks (TraceWriter::TestHooks): a record whose thread has
// taken its seq but not yet written it (a gap), and the background thread's
// sleep between rounds. Threads are held at exact points instead of being
// raced, so each test opens its window every run, however loaded the machine.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"
#include "trace/trace_writer.h"
#include "trace_text.h"

using namespace cumemtrace::preload;
using cumemtrace::contract::LineBuffer;
using cumemtrace::testing::parse_lines;
using cumemtrace::testing::read_file;
using cumemtrace::testing::TempDir;
using nlohmann::json;

namespace {

// "header", "mark", "free", … : the file's events in order.
std::vector<std::string> events_in(const std::string& path) {
  std::vector<std::string> evs;
  for (const json& line : parse_lines(read_file(path))) evs.push_back(line["ev"]);
  return evs;
}

const LineBuffer& gap_header_line() {
  static LineBuffer h;
  if (h.view().empty()) h.raw("{\"ev\":\"header\"").field_str("format", "cumemtrace").ch('}');
  return h;
}

int create_gap_file(const std::string& path) { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600); }

void emit_event(TraceWriter& w, const char* ev, std::uint64_t addr) {
  LineBuffer b;
  b.field("addr", addr);
  w.emit(ev, b);
}

// Only so that a writer that never does what is awaited fails the test
// instead of hanging it; never a measure of speed.
constexpr auto kHangGuard = std::chrono::seconds(60);

// What the hooks see and where they hold their threads. The hooks are
// process-wide, so the state is too; one Probe at a time installs them.
struct ProbeState {
  std::mutex m;
  std::condition_variable cv;
  // The background thread stops before each sleep while `gated`, until a
  // round is allowed.
  bool gated = false;
  int rounds_allowed = 0;
  std::uint64_t flusher_waits = 0;
  std::vector<std::uint64_t> timeouts_ns;
  // A recording thread that asked to be held (t_hold_next_record) waits in
  // the hook, its seq taken and its record unwritten, while `holding`.
  bool holding = true;
  std::optional<std::uint64_t> held_seq;
};
ProbeState g_state;
thread_local bool t_hold_next_record = false;

void on_seq_taken(std::uint64_t seq) {
  if (!t_hold_next_record) return;
  t_hold_next_record = false;
  std::unique_lock lock(g_state.m);
  g_state.held_seq = seq;
  g_state.cv.notify_all();
  g_state.cv.wait(lock, [] { return !g_state.holding; });
}

void on_flusher_waits(std::uint64_t timeout_ns) {
  std::unique_lock lock(g_state.m);
  g_state.timeouts_ns.push_back(timeout_ns);
  ++g_state.flusher_waits;
  g_state.cv.notify_all();
  g_state.cv.wait(lock, [] { return !g_state.gated || g_state.rounds_allowed > 0; });
  if (g_state.gated) --g_state.rounds_allowed;
}

// Declared after the writer and the threads it holds: it is destroyed
// first, so whatever a failed assertion left held is let go before the
// threads are joined and the writer stops its background thread.
class Probe {
 public:
  explicit Probe(bool gated) {
    std::lock_guard lock(g_state.m);
    g_state.gated = gated;
    g_state.rounds_allowed = 0;
    g_state.flusher_waits = 0;
    g_state.timeouts_ns.clear();
    g_state.holding = true;
    g_state.held_seq.reset();
    TraceWriter::set_test_hooks({.seq_taken = &on_seq_taken, .flusher_waits = &on_flusher_waits});
  }
  ~Probe() {
    open_gate();
    release();
    // A background thread that loaded a hook just before still finds the
    // state (static) with the gate open and nothing held, and returns.
    TraceWriter::set_test_hooks({});
  }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // Waits until a held thread has taken its seq; returns it.
  std::uint64_t wait_until_held() {
    std::unique_lock lock(g_state.m);
    const bool held = g_state.cv.wait_for(lock, kHangGuard, [] { return g_state.held_seq.has_value(); });
    EXPECT_TRUE(held) << "the recording thread never reached the hook";
    return g_state.held_seq.value_or(0);
  }
  void release() {
    std::lock_guard lock(g_state.m);
    g_state.holding = false;
    g_state.cv.notify_all();
  }
  // Lets the background thread run exactly one round (sleep, drain, write)
  // and returns once it is back at the gate: that round's lines are in the
  // file, and no other round runs until the next call.
  void run_one_round() {
    std::unique_lock lock(g_state.m);
    // Parked at the gate: it has reached it, and every round allowed before
    // was used up (the last call returned only once it was back).
    const bool parked = g_state.cv.wait_for(lock, kHangGuard, [] { return g_state.flusher_waits > 0; });
    EXPECT_TRUE(parked) << "the background thread never reached its first sleep";
    const std::uint64_t target = g_state.flusher_waits + 1;
    ++g_state.rounds_allowed;
    g_state.cv.notify_all();
    const bool back = g_state.cv.wait_for(lock, kHangGuard, [&] { return g_state.flusher_waits >= target; });
    EXPECT_TRUE(back) << "the background thread did not come back to its sleep";
  }
  // Waits until the background thread has started `n` more sleeps.
  void wait_for_sleeps(std::uint64_t n) {
    std::unique_lock lock(g_state.m);
    const std::uint64_t target = g_state.flusher_waits + n;
    const bool done = g_state.cv.wait_for(lock, kHangGuard, [&] { return g_state.flusher_waits >= target; });
    EXPECT_TRUE(done) << "the background thread did not sleep " << n << " more times";
  }
  void open_gate() {
    std::lock_guard lock(g_state.m);
    g_state.gated = false;
    g_state.cv.notify_all();
  }
  std::vector<std::uint64_t> timeouts_ns() {
    std::lock_guard lock(g_state.m);
    return g_state.timeouts_ns;
  }
};

TEST(FlushGap, BackgroundDrainWaitsForARecordWhoseSeqIsTakenButNotWritten) {
  // TRACE_FORMAT.md, Order: thread A records "free" (takes its seq) before
  // the real free, so the "alloc" of the address it passes on comes after
  // it. Here A is held between taking its seq and writing its record while
  // the alloc is recorded and a background round runs: the round must stop
  // at A's gap, not write the alloc ahead of the free.
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  TraceWriter w(TickClock::monotonic_ns(), 1 << 20, /*flush_interval_ms=*/1);
  std::jthread freer;
  Probe probe(/*gated=*/true);
  ASSERT_TRUE(w.attach(create_gap_file(path), path, gap_header_line()));

  emit_event(w, "mark", 0);  // seq 0: written by the first round
  freer = std::jthread([&w] {
    t_hold_next_record = true;
    emit_event(w, "free", 0x1000);  // seq 1, held in the hook
  });
  const std::uint64_t free_seq = probe.wait_until_held();
  EXPECT_EQ(free_seq, 1u);
  emit_event(w, "alloc", 0x1000);  // seq 2: the address reused

  probe.run_one_round();
  EXPECT_EQ(events_in(path), (std::vector<std::string>{"header", "mark"}))
      << "a background round wrote past a record still being written";

  probe.release();
  freer.join();
  probe.run_one_round();
  EXPECT_EQ(events_in(path), (std::vector<std::string>{"header", "mark", "free", "alloc"}));

  probe.open_gate();
  LineBuffer end;
  w.finish(end);
  const auto lines = parse_lines(read_file(path));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["dropped"], 0);
}

TEST(FlushGap, FinalDrainSkipsAGapAfterItsWaitAndWritesTheRecordLate) {
  // flush() and finish() wait a bounded time for a record being written,
  // then write what follows it (TraceWriter's contract: a thread stopped in
  // the middle of an emit must not hold back the whole trace). A record that
  // arrives later is written late, at the next drain.
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  TraceWriter w(TickClock::monotonic_ns(), 1 << 20, /*flush_interval_ms=*/100'000);  // no periodic round
  std::jthread freer;
  Probe probe(/*gated=*/false);
  ASSERT_TRUE(w.attach(create_gap_file(path), path, gap_header_line()));

  emit_event(w, "mark", 0);
  freer = std::jthread([&w] {
    t_hold_next_record = true;
    emit_event(w, "free", 0x1000);
  });
  probe.wait_until_held();
  emit_event(w, "alloc", 0x2000);
  emit_event(w, "mark", 1);

  w.flush();  // waits for the held record, gives up, writes the rest
  EXPECT_EQ(events_in(path), (std::vector<std::string>{"header", "mark", "alloc", "mark"}))
      << "the exit-time drain let a record that never came hold back the lines after it";

  probe.release();
  freer.join();
  w.flush();
  EXPECT_EQ(events_in(path), (std::vector<std::string>{"header", "mark", "alloc", "mark", "free"}))
      << "the late record is written at the next drain";

  LineBuffer end;
  w.finish(end);
  const auto lines = parse_lines(read_file(path));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["dropped"], 0);
}

TEST(FlushGap, FinishWritesEverythingAfterARecordThatNeverArrives) {
  // A thread stopped for good between taking its seq and writing (held here
  // until after finish): the exit path still writes every line after it
  // and the end line.
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  TraceWriter w(TickClock::monotonic_ns(), 1 << 20, /*flush_interval_ms=*/100'000);
  std::jthread stuck;
  Probe probe(/*gated=*/false);
  ASSERT_TRUE(w.attach(create_gap_file(path), path, gap_header_line()));

  emit_event(w, "mark", 0);
  stuck = std::jthread([&w] {
    t_hold_next_record = true;
    emit_event(w, "free", 0x1000);
  });
  probe.wait_until_held();
  emit_event(w, "alloc", 0x2000);
  emit_event(w, "mark", 1);
  LineBuffer end;
  end.field_str("reason", "exit");
  w.finish(end);
  EXPECT_EQ(events_in(path), (std::vector<std::string>{"header", "mark", "alloc", "mark", "end"}));
  // The record that never came is not lost silently: `end` counts it.
  EXPECT_EQ(parse_lines(read_file(path)).back()["dropped"], 1);
  probe.release();
  stuck.join();  // its emit completes after the end, into a finished trace
  EXPECT_EQ(events_in(path).size(), 5u) << "nothing follows the end line";
}

TEST(Flush, BackgroundThreadWritesWithinTheFlushInterval) {
  // The background thread sleeps the flush interval between rounds: the
  // hook sees the timeout of every sleep, so an interval 100 times too long
  // fails here exactly, with no clock in the test for a slow machine to fool.
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  TraceWriter w(TickClock::monotonic_ns(), 1 << 20, /*flush_interval_ms=*/20);
  Probe probe(/*gated=*/false);
  ASSERT_TRUE(w.attach(create_gap_file(path), path, gap_header_line()));
  for (std::uint64_t k = 0; k < 10; ++k) emit_event(w, "mark", k);
  // Nothing fills the 1 MiB buffer: only the periodic round can write these.
  // Two sleeps begun after the emits: a whole round ran after them.
  probe.wait_for_sleeps(2);
  EXPECT_EQ(parse_lines(read_file(path)).size(), 11u);
  LineBuffer end;
  w.finish(end);
  const std::vector<std::uint64_t> timeouts = probe.timeouts_ns();
  ASSERT_FALSE(timeouts.empty());
  for (std::uint64_t t : timeouts) ASSERT_EQ(t, 20'000'000u) << "the background thread sleeps the flush interval";
}

}  // namespace
