// The pending file (contract/pending/pending_log.h): a writer killed with
// SIGKILL at a chosen moment, in a forked child, and the trace completed
// afterwards with recover_pending: every event recorded before the kill is
// in it, once, in order, and the file is gone.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pending/pending_log.h"
#include "pending/pending_recovery.h"
#include "trace/trace_writer.h"
#include "trace_text.h"

using namespace cumemtrace::preload;
using cumemtrace::contract::LineBuffer;
using cumemtrace::contract::pending::CompactEvent;
namespace pending = cumemtrace::contract::pending;
using nlohmann::json;
using Status = pending::RecoveryResult::Status;

namespace {

class KillSafeLog : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cumemtrace-pending-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    TraceWriter::set_test_hooks({});
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

const LineBuffer& versioned_header_line() {
  static LineBuffer h;
  if (h.view().empty()) h.raw("{\"ev\":\"header\"").field_str("format", "cumemtrace").field("version", 1).ch('}');
  return h;
}

// A literal of this program, as the recorder's api names are of the preload.
constexpr const char* kApi = "cuTestAlloc";

// Event k: a text line for even k, a compact alloc of k bytes for odd k.
void record(TraceWriter& w, int k) {
  if (k % 2 == 0) {
    LineBuffer body;
    body.field_i("tid", 1).field_str("name", "m").field_plain("kind", "instant").field_i("i", k);
    w.emit("mark", body);
    return;
  }
  CompactEvent e;
  e.ev = cumemtrace::format::Event::alloc;
  e.api = kApi;
  e.tid = 1;
  e.ptr = 0x1000 + static_cast<std::uint64_t>(k) * 0x100;
  e.size = static_cast<std::uint64_t>(k);
  w.emit_compact({e});
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The file's text: as it is, or through zstd (every frame).
std::string trace_text(const std::string& path) {
  const std::string raw = read_all(path);
  return path.ends_with(".zst") ? cumemtrace::testing::zstd_decompress_prefix(raw) : raw;
}

std::vector<json> lines_of(const std::string& text) { return cumemtrace::testing::parse_lines(text); }

int g_batches_before_kill = 0;
void kill_at_batch(std::uint64_t) {
  if (--g_batches_before_kill == 0) ::raise(SIGKILL);
}

enum class KillAt { before_any_write, after_a_flush, inside_a_write };

// ThreadSanitizer cannot start a thread in the child of a process that had
// threads (the writer's background thread): the forked writers run without it.
#if defined(__SANITIZE_THREAD__)
#define SKIP_FORKED_WRITER_UNDER_TSAN() GTEST_SKIP() << "a writer in a forked child: not under ThreadSanitizer"
#else
#define SKIP_FORKED_WRITER_UNDER_TSAN() (void)0
#endif

// In a forked child: a writer records `events` events and is killed at
// `when`. Returns the trace's path.
std::string killed_child(const std::string& dir, const char* name, int events, KillAt when) {
  const std::string path = dir + "/" + name;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    // A long interval and chunks larger than all the events: nothing is
    // written until asked, and then in one write.
    auto* w = new TraceWriter(TickClock::monotonic_ns(), 1 << 20, 600'000);
    w->keep_pending_file(true);
    if (fd < 0 || !w->attach(fd, path, versioned_header_line()) || !w->has_pending_file()) ::_exit(3);
    for (int k = 0; k < events; ++k) {
      record(*w, k);
      if (when == KillAt::after_a_flush && k == events / 2) w->flush();
    }
    if (when == KillAt::inside_a_write) {
      g_batches_before_kill = 1;
      TraceWriter::set_test_hooks({.batch_written = &kill_at_batch});
      w->flush();  // the write in which the hook kills
      ::_exit(4);  // not reached
    }
    ::raise(SIGKILL);
    ::_exit(5);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  return path;
}

// The completed trace holds the header, events 0..events-1 once each in
// order, and `end` (killed).
void expect_complete(const std::string& path, int events) {
  const std::vector<json> lines = lines_of(trace_text(path));
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(events) + 2) << path;
  EXPECT_EQ(lines.front()["ev"], "header");
  std::uint64_t last_t = 0;
  for (int k = 0; k < events; ++k) {
    const json& e = lines[static_cast<std::size_t>(k) + 1];
    if (k % 2 == 0) {
      ASSERT_EQ(e["ev"], "mark") << e;
      EXPECT_EQ(e["i"], k);
    } else {
      ASSERT_EQ(e["ev"], "alloc") << e;
      EXPECT_EQ(e["size"], k);
      EXPECT_EQ(e["api"], kApi);  // named from the pending file, not the dead process's pointer
    }
    EXPECT_GE(e["t"].get<std::uint64_t>(), last_t);
    last_t = e["t"];
  }
  const json& end = lines.back();
  EXPECT_EQ(end["ev"], "end");
  EXPECT_EQ(end["reason"], "killed");
  EXPECT_EQ(end["dropped"], 0);
  EXPECT_EQ(end["live"], 7);
  EXPECT_GE(end["t"].get<std::uint64_t>(), last_t);
  EXPECT_FALSE(std::filesystem::exists(pending::pending_path_of(path)));
}

std::string live_seven(const std::string&) { return ",\"live\":7,\"live_bytes\":0"; }

}  // namespace

TEST_F(KillSafeLog, EventsNeverWrittenAreRecovered) {
  SKIP_FORKED_WRITER_UNDER_TSAN();
  const std::string path = killed_child(dir_, "never.jsonl", 3000, KillAt::before_any_write);
  // Only the header reached the trace; the rest is in the pending file.
  EXPECT_EQ(lines_of(read_all(path)).size(), 1u);
  const auto r = pending::recover_pending(path, &live_seven);
  ASSERT_EQ(r.status, Status::recovered) << r.message;
  EXPECT_EQ(r.records, 3000u);
  expect_complete(path, 3000);
}

TEST_F(KillSafeLog, EventsAfterAFlushAreRecoveredAndThoseBeforeNotRepeated) {
  SKIP_FORKED_WRITER_UNDER_TSAN();
  const std::string path = killed_child(dir_, "flushed.jsonl", 3000, KillAt::after_a_flush);
  EXPECT_EQ(lines_of(read_all(path)).size(), 1502u);
  const auto r = pending::recover_pending(path, &live_seven);
  ASSERT_EQ(r.status, Status::recovered) << r.message;
  EXPECT_EQ(r.records, 1499u);
  expect_complete(path, 3000);
}

// The kill lands after a write reached the file but before the writer
// recorded it: those lines are cut off and written again from the records,
// so none is lost and none doubled.
TEST_F(KillSafeLog, AWriteTheWriterHadNotCommittedIsWrittenAgainNotTwice) {
  SKIP_FORKED_WRITER_UNDER_TSAN();
  const std::string path = killed_child(dir_, "inside.jsonl", 3000, KillAt::inside_a_write);
  // Every line was written, none committed.
  EXPECT_EQ(lines_of(read_all(path)).size(), 3001u);
  const auto r = pending::recover_pending(path, &live_seven);
  ASSERT_EQ(r.status, Status::recovered) << r.message;
  expect_complete(path, 3000);
}

TEST_F(KillSafeLog, ACompressedTraceIsCompletedWithWholeFrames) {
  SKIP_FORKED_WRITER_UNDER_TSAN();
  const std::string path = killed_child(dir_, "inside.jsonl.zst", 3000, KillAt::inside_a_write);
  const auto r = pending::recover_pending(path, &live_seven);
  ASSERT_EQ(r.status, Status::recovered) << r.message;
  expect_complete(path, 3000);
}

TEST_F(KillSafeLog, ALiveWriterIsLeftAloneAndAnEndedTraceNeedsNothing) {
  const std::string path = dir_ + "/alive.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  TraceWriter w(TickClock::monotonic_ns(), 4096);
  w.keep_pending_file(true);
  ASSERT_TRUE(w.attach(fd, path, versioned_header_line()));
  ASSERT_TRUE(w.has_pending_file());
  for (int k = 0; k < 100; ++k) record(w, k);
  EXPECT_EQ(pending::recover_pending(path, &live_seven).status, Status::writer_alive);
  // Exec: `end` is written and the file removed, so a successful exec
  // leaves nothing behind; a failed one takes `end` back and goes on.
  LineBuffer end;
  end.field_plain("reason", "exec");
  ASSERT_TRUE(w.begin_exec(end));
  EXPECT_FALSE(std::filesystem::exists(pending::pending_path_of(path)));
  w.exec_failed();
  w.finish(end);
  EXPECT_FALSE(std::filesystem::exists(pending::pending_path_of(path)));
  EXPECT_EQ(pending::recover_pending(path, &live_seven).status, Status::no_pending_file);
  const std::vector<json> lines = lines_of(read_all(path));
  EXPECT_EQ(lines.size(), 102u);
  EXPECT_EQ(lines.back()["reason"], "exec");
}

// Many threads, small chunks: the logs' chunks go round through the file's
// slots while the commits run (and ThreadSanitizer watches).
TEST_F(KillSafeLog, ConcurrentThreadsThroughTheFileLoseAndReorderNothing) {
  const std::string path = dir_ + "/c.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  TraceWriter w(TickClock::monotonic_ns(), 4096, 5);
  w.keep_pending_file(true);
  ASSERT_TRUE(w.attach(fd, path, versioned_header_line()));
  ASSERT_TRUE(w.has_pending_file());
  constexpr int kThreads = 8, kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&w, i] {
      for (int k = 0; k < kPerThread; ++k) {
        CompactEvent e;
        e.ev = cumemtrace::format::Event::alloc;
        e.api = kApi;
        e.tid = i;
        e.size = static_cast<std::uint64_t>(k);
        w.emit_compact({e});
      }
    });
  }
  for (auto& t : threads) t.join();
  LineBuffer end;
  end.field_plain("reason", "exit");
  w.finish(end);
  EXPECT_FALSE(std::filesystem::exists(pending::pending_path_of(path)));
  const std::vector<json> lines = lines_of(read_all(path));
  ASSERT_EQ(lines.size(), std::size_t{kThreads} * kPerThread + 2);
  std::vector<int> next(kThreads, 0);
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    const int tid = lines[i]["tid"];
    ASSERT_EQ(lines[i]["size"], next[tid]++) << "line " << i + 1;
  }
}

TEST_F(KillSafeLog, WithoutAPendingFileTheWriterStillTraces) {
  const std::string path = dir_ + "/t.jsonl";
  std::filesystem::create_directory(pending::pending_path_of(path));  // cannot be replaced by a file
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  TraceWriter w(TickClock::monotonic_ns(), 4096);
  w.keep_pending_file(true);
  ASSERT_TRUE(w.attach(fd, path, versioned_header_line()));
  EXPECT_FALSE(w.has_pending_file());
  for (int k = 0; k < 100; ++k) record(w, k);
  LineBuffer end;
  end.field_plain("reason", "exit");
  w.finish(end);
  EXPECT_EQ(lines_of(read_all(path)).size(), 102u);
}

TEST_F(KillSafeLog, ADamagedPendingFileIsRefusedNotFollowed) {
  const std::string path = dir_ + "/t.jsonl";
  { std::ofstream(path) << "{\"ev\":\"header\"}\n"; }
  std::string junk(pending::kHeaderBytes + 4096, '\x7f');
  { std::ofstream(pending::pending_path_of(path), std::ios::binary) << junk; }
  const auto r = pending::recover_pending(path, &live_seven);
  EXPECT_EQ(r.status, Status::failed);
  EXPECT_NE(r.message.find("not a pending file"), std::string::npos) << r.message;
  EXPECT_EQ(read_all(path), "{\"ev\":\"header\"}\n");
}
