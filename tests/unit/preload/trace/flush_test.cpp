// The writer's crash-safety: periodic flushing, order across threads, the
// signal and exec paths, zstd streams that stay readable when cut, and a
// fork while other threads write.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "record/recorder.h"
#include "test_support.h"
#include "trace/trace_writer.h"
#include "trace_text.h"

using namespace cumemtrace::preload;
using cumemtrace::contract::Config;
using cumemtrace::contract::LineBuffer;
using cumemtrace::testing::zstd_decompress_prefix;
using cumemtrace::testing::parse_lines;
using cumemtrace::testing::read_file;
using cumemtrace::testing::TempDir;
using nlohmann::json;

namespace {

const LineBuffer& flush_header_line() {
  static LineBuffer h;
  if (h.view().empty()) h.raw("{\"ev\":\"header\"").field_str("format", "cumemtrace").ch('}');
  return h;
}

int create_new(const std::string& path) { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600); }

void emit_marks(TraceWriter& w, int first, int count) {
  for (int k = first; k < first + count; ++k) {
    LineBuffer b;
    b.field("seq", static_cast<std::uint64_t>(k));
    w.emit("mark", b);
  }
}

// The flush interval and a record caught half-written: flush_gap_test.cpp,
// which holds the threads at exact points through the writer's test hooks.

TEST(Flush, FreeRecordedBeforeTheRealFreeComesBeforeTheAllocThatReusesIt) {
  // Thread A records "free k" and only then passes address k on; thread B
  // takes it and records "alloc k" (TRACE_FORMAT.md, Order). Two noisy
  // threads keep the logs busy.
  TempDir dir;
  TraceWriter w(TickClock::monotonic_ns(), 4096, 1);
  ASSERT_TRUE(w.attach(create_new(dir / "t.jsonl"), dir / "t.jsonl", flush_header_line()));
  constexpr int kHandoffs = 20000;
  std::atomic<int> released{-1};
  std::atomic<bool> stop{false};
  std::vector<std::thread> noise;
  for (int i = 0; i < 2; ++i) {
    noise.emplace_back([&] {
      while (!stop.load()) emit_marks(w, 0, 1);
    });
  }
  std::thread freer([&] {
    for (int k = 0; k < kHandoffs; ++k) {
      LineBuffer b;
      b.field("addr", static_cast<std::uint64_t>(k));
      w.emit("free", b);
      released.store(k, std::memory_order_release);
    }
  });
  std::thread allocator([&] {
    for (int k = 0; k < kHandoffs; ++k) {
      while (released.load(std::memory_order_acquire) < k) {
      }
      LineBuffer b;
      b.field("addr", static_cast<std::uint64_t>(k));
      w.emit("alloc", b);
    }
  });
  freer.join();
  allocator.join();
  stop = true;
  for (auto& t : noise) t.join();
  LineBuffer end;
  w.finish(end);

  std::vector<int> freed_at(kHandoffs, -1), allocated_at(kHandoffs, -1);
  std::uint64_t last_t = 0;
  const auto lines = parse_lines(read_file(dir / "t.jsonl"));
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto t = lines[i]["t"].get<std::uint64_t>();
    ASSERT_GE(t, last_t) << "line " << i + 1;
    last_t = t;
    if (lines[i]["ev"] == "free") freed_at[lines[i]["addr"].get<int>()] = static_cast<int>(i);
    if (lines[i]["ev"] == "alloc") allocated_at[lines[i]["addr"].get<int>()] = static_cast<int>(i);
  }
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["dropped"], 0);
  for (int k = 0; k < kHandoffs; ++k) {
    ASSERT_GE(freed_at[k], 0) << k;
    ASSERT_GT(allocated_at[k], freed_at[k]) << "address " << k;
  }
}

TEST(Flush, ShortLivedThreadsLoseNothing) {
  // Each thread's log is handed back when the thread exits, written out,
  // then reused by a later thread.
  TempDir dir;
  TraceWriter w(TickClock::monotonic_ns(), 4096, 1);
  ASSERT_TRUE(w.attach(create_new(dir / "t.jsonl"), dir / "t.jsonl", flush_header_line()));
  for (int round = 0; round < 50; ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) threads.emplace_back([&w, round, i] { emit_marks(w, (round * 8 + i) * 10, 10); });
    for (auto& t : threads) t.join();
  }
  LineBuffer end;
  w.finish(end);
  const auto lines = parse_lines(read_file(dir / "t.jsonl"));
  ASSERT_EQ(lines.size(), 1u + 50 * 8 * 10 + 1u);
  std::vector<bool> seen(50 * 8 * 10, false);
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) seen[lines[i]["seq"].get<int>()] = true;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 50 * 8 * 10);
}

TEST(Flush, ZstdTraceIsReadableWholeAndWhenCutAfterAFlush) {
  TempDir dir;
  const std::string path = dir / "t.jsonl.zst";
  TraceWriter w(TickClock::monotonic_ns(), 4096, 100'000);
  ASSERT_TRUE(w.attach(create_new(path), path, flush_header_line()));
  emit_marks(w, 0, 1000);
  w.flush();
  // What a reader finds if the process is killed now.
  const std::string cut = read_file(path);
  emit_marks(w, 1000, 1000);
  LineBuffer end;
  end.field_str("reason", "exit");
  w.finish(end);

  const auto whole = parse_lines(zstd_decompress_prefix(read_file(path)));
  ASSERT_EQ(whole.size(), 1u + 2000 + 1);
  EXPECT_EQ(whole.back()["ev"], "end");
  EXPECT_EQ(whole.back()["reason"], "exit");
  const std::string cut_text = zstd_decompress_prefix(cut);
  ASSERT_FALSE(cut_text.empty());
  EXPECT_EQ(cut_text.back(), '\n') << "a flushed zstd stream ends at a whole line";
  const auto cut_lines = parse_lines(cut_text);
  ASSERT_EQ(cut_lines.size(), 1001u);
  EXPECT_EQ(cut_lines.back()["seq"], 999);
  EXPECT_LT(read_file(path).size(), 2001u * 20) << "compressed";
}

TraceWriter* g_signal_writer = nullptr;
void flush_in_handler(int) { g_signal_writer->flush_from_signal(); }
void finish_in_handler(int) {
  LineBuffer end;
  end.field_str("reason", "signal");
  g_signal_writer->finish_from_signal(end);
}

TEST(Flush, SignalPathsWriteWhatWasRecorded) {
  for (const bool compressed : {false, true}) {
    TempDir dir;
    const std::string path = dir / (compressed ? "t.jsonl.zst" : "t.jsonl");
    TraceWriter w(TickClock::monotonic_ns(), 1 << 20, 100'000);  // no periodic flush
    ASSERT_TRUE(w.attach(create_new(path), path, flush_header_line()));
    g_signal_writer = &w;
    auto text = [&] { return compressed ? zstd_decompress_prefix(read_file(path)) : read_file(path); };
    emit_marks(w, 0, 100);
    signal(SIGUSR1, flush_in_handler);
    raise(SIGUSR1);
    EXPECT_EQ(parse_lines(text()).size(), 101u);
    emit_marks(w, 100, 5);
    signal(SIGUSR1, finish_in_handler);
    raise(SIGUSR1);
    signal(SIGUSR1, SIG_DFL);
    const auto lines = parse_lines(text());
    ASSERT_EQ(lines.size(), 107u);
    EXPECT_EQ(lines.back()["ev"], "end");
    EXPECT_EQ(lines.back()["reason"], "signal");
    EXPECT_FALSE(w.is_open());
  }
}

TEST(Flush, FailedExecTakesItsEndBack) {
  for (const bool compressed : {false, true}) {
    TempDir dir;
    const std::string path = dir / (compressed ? "t.jsonl.zst" : "t.jsonl");
    TraceWriter w(TickClock::monotonic_ns(), 4096, 100'000);
    ASSERT_TRUE(w.attach(create_new(path), path, flush_header_line()));
    auto text = [&] { return compressed ? zstd_decompress_prefix(read_file(path)) : read_file(path); };
    emit_marks(w, 0, 50);
    LineBuffer exec_end;
    exec_end.field_str("reason", "exec");
    ASSERT_TRUE(w.begin_exec(exec_end));
    auto lines = parse_lines(text());
    ASSERT_EQ(lines.size(), 52u);
    EXPECT_EQ(lines.back()["reason"], "exec") << "what a successful exec leaves";
    w.exec_failed();
    emit_marks(w, 50, 50);
    LineBuffer end;
    end.field_str("reason", "exit");
    w.finish(end);
    lines = parse_lines(text());
    ASSERT_EQ(lines.size(), 102u) << (compressed ? "zstd" : "plain");
    for (int k = 0; k < 100; ++k) EXPECT_EQ(lines[1 + k]["seq"], k);
    EXPECT_EQ(lines.back()["reason"], "exit");
  }
}

bool flush_device(int, DeviceDescription& out) {
  out.name = "Fake";
  out.total_bytes = 1ull << 30;
  return true;
}

AllocationFacts facts(std::uintptr_t ptr) {
  return {.api = "cudaMalloc", .kind = cumemtrace::format::MemoryKind::device, .dev = 0, .ptr = ptr,
          .size = 4096, .stream = std::nullopt};
}

TEST(Fork, ChildStartsFromScratchWhileTheParentsThreadsWrite) {
  // What the preload does in its fork handler: the parent's recorder is
  // abandoned untouched, the child gets a new one. A parent thread records
  // without pause and the background thread flushes every millisecond, so
  // forks land while they are in the middle of it.
  TempDir dir;
  Config c;
  c.output_template = dir / "t.%p.jsonl";
  c.buffer_kb = 4;
  c.flush_ms = 1;
  Recorder parent(c, &flush_device);
  parent.on_alloc(facts(0x1000));
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> pairs{0};
  std::thread churn([&] {
    for (std::uintptr_t p = 0x100000; !stop.load(); p += 0x1000) {
      parent.on_alloc(facts(p));
      parent.on_free({.api = "cudaFree", .ptr = p});
      pairs.fetch_add(1);
    }
  });
  std::vector<pid_t> children;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(10);  // a deadlock on the parent's locks fails the test
      parent.on_fork_child();
      Recorder::forget_thread_ids_after_fork();
      Recorder child(c, &flush_device);
      child.on_alloc(facts(0x2000));
      child.on_alloc(facts(0x3000));
      child.on_free({.api = "cudaFree", .ptr = 0x2000});
      child.on_exit();
      _exit(0);
    }
    ASSERT_GT(pid, 0);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " status " << status;
  }
  stop = true;
  churn.join();
  parent.on_exit();

  for (pid_t pid : children) {
    const auto lines = parse_lines(read_file(dir / ("t." + std::to_string(pid) + ".jsonl")));
    std::vector<std::string> evs;
    for (const auto& l : lines) evs.push_back(l["ev"]);
    const std::vector<std::string> expected = {"header", "device", "segment_alloc", "alloc",
                                               "segment_alloc", "alloc", "free", "segment_free", "end"};
    EXPECT_EQ(evs, expected) << "child " << pid << ": its own events only, none of the parent's";
    EXPECT_EQ(lines[0]["pid"], pid);
    EXPECT_EQ(lines[0]["ppid"], getpid());
    EXPECT_EQ(lines.back()["live"], 1) << "the parent's live allocations are not the child's";
    EXPECT_EQ(lines[3]["tid"], pid) << "the forking thread's id in the child is the child's";
  }
  // Counted, not parsed: the churning thread wrote many lines.
  const std::string text = read_file(dir / ("t." + std::to_string(getpid()) + ".jsonl"));
  std::uint64_t allocs = 0;
  for (std::size_t at = 0; (at = text.find("{\"ev\":\"alloc\"", at)) != std::string::npos; ++at) ++allocs;
  EXPECT_EQ(allocs, 1 + pairs.load()) << "each of the parent's events once, none from a child";
  const std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
  EXPECT_EQ(json::parse(last)["ev"], "end");
  EXPECT_EQ(json::parse(last)["dropped"], 0);
}

}  // namespace
