#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "record/recorder.h"
#include "trace/trace_writer.h"

using namespace cumemtrace::preload;
using cumemtrace::contract::Config;
using cumemtrace::contract::LineBuffer;
using cumemtrace::contract::pending::CompactEvent;
using nlohmann::json;

namespace {

std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cumemtrace-writer-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

const LineBuffer& header_line() {
  static LineBuffer h;
  if (h.view().empty()) {
    h.raw("{\"ev\":\"header\"").field_str("format", "cumemtrace").field("version", 1).ch('}');
  }
  return h;
}

using WriterTest = TempDir;

TEST_F(WriterTest, ConcurrentLinesAreCompleteOrderedAndNoneLost) {
  const std::string path = dir_ + "/w.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  // A small buffer forces many swaps and writes while other threads append.
  TraceWriter w(TickClock::monotonic_ns(), 4096);
  w.attach(fd, path, header_line());
  constexpr int kThreads = 8, kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&w, i] {
      for (int k = 0; k < kPerThread; ++k) {
        LineBuffer b;
        b.field("thread", static_cast<std::uint64_t>(i)).field("seq", static_cast<std::uint64_t>(k));
        w.emit("mark", b);
      }
    });
  }
  for (auto& t : threads) t.join();
  LineBuffer end;
  end.field("dropped", w.dropped());
  w.finish(end);

  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u + kThreads * kPerThread + 1u);
  EXPECT_EQ(lines.front()["ev"], "header");
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["dropped"], 0);
  std::vector<int> next(kThreads, 0);
  std::uint64_t last_t = 0;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    const auto t = lines[i]["t"].get<std::uint64_t>();
    ASSERT_GE(t, last_t) << "line " << i + 1;
    last_t = t;
    const int thread = lines[i]["thread"];
    ASSERT_EQ(lines[i]["seq"].get<int>(), next[thread]++) << "per-thread order is kept";
  }
  for (int n : next) EXPECT_EQ(n, kPerThread);
}

// Back-pressure: an output that does not drain (a pipe nobody reads, as a
// stuck disk) lets the logs grow to their cap; then events are dropped, not
// waited on. emit_compact() says which; once the output drains, every event
// it kept is in the trace, whole and in order, and `end` counts the rest.
TEST_F(WriterTest, AStuckOutputDropsEventsOnceItsCapIsFullAndKeepsEveryOther) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  constexpr std::uint64_t kCap = 1u << 20;
  TraceWriter w(TickClock::monotonic_ns(), 4096, TraceWriter::kDefaultFlushIntervalMs, kCap);
  ASSERT_TRUE(w.attach(fds[1], "pipe", header_line()));
  auto event = [](std::uint64_t k) {
    CompactEvent e;
    e.api = "cudaMalloc";
    e.ptr = 0x7f0000000000 + 512 * k;
    e.size = k;  // tells the lines apart
    return e;
  };
  std::vector<std::uint64_t> kept;
  std::uint64_t dropped = 0;
  std::uint64_t k = 0;
  // Far more than the cap holds (a record is tens of bytes).
  for (; dropped == 0 && k < 50 * kCap; ++k) {
    if (w.emit_compact({event(k)})) kept.push_back(k); else ++dropped;
  }
  ASSERT_EQ(dropped, 1u) << "the writer never dropped an event with its output stuck";
  // Nothing was given back: the rest are dropped too, without a 100 ms wait
  // each (that wait is for the first: 200 of them would take 20 s).
  const auto start = std::chrono::steady_clock::now();
  for (const std::uint64_t last = k + 200; k < last; ++k) {
    if (w.emit_compact({event(k)})) kept.push_back(k); else ++dropped;
  }
  EXPECT_EQ(dropped, 201u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // The disk moves again: what was kept is written, and events are kept again.
  std::string text;
  std::thread drain([&] {
    char buffer[1 << 16];
    for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  });
  w.flush();
  EXPECT_TRUE(w.emit_compact({event(k)}));
  kept.push_back(k++);
  w.finish(LineBuffer{});
  drain.join();
  ::close(fds[0]);

  std::vector<json> lines;
  std::size_t from = 0;
  for (std::size_t end; (end = text.find('\n', from)) != std::string::npos; from = end + 1) {
    lines.push_back(json::parse(text.substr(from, end - from)));
  }
  EXPECT_EQ(from, text.size()) << "the trace ends with a whole line";
  ASSERT_EQ(lines.size(), 1 + kept.size() + 1);
  EXPECT_EQ(lines.front()["ev"], "header");
  for (std::size_t i = 0; i < kept.size(); ++i) {
    ASSERT_EQ(lines[1 + i]["ev"], "alloc");
    ASSERT_EQ(lines[1 + i]["size"], kept[i]) << "line " << 2 + i;
  }
  EXPECT_EQ(lines.back()["ev"], "end");
  EXPECT_EQ(lines.back()["dropped"], dropped);
  EXPECT_EQ(w.dropped(), dropped);
}

TEST_F(WriterTest, WriteErrorsCountDroppedLinesAndNeverThrow) {
  const int fd = ::open("/dev/full", O_WRONLY);
  ASSERT_GE(fd, 0);
  TraceWriter w(TickClock::monotonic_ns(), 4096);
  w.attach(fd, "/dev/full", header_line());
  for (int k = 0; k < 1000; ++k) {
    LineBuffer b;
    b.field("seq", static_cast<std::uint64_t>(k));
    w.emit("mark", b);
  }
  LineBuffer end;
  w.finish(end);
  // Every line was lost: the header, 1000 marks and the end.
  EXPECT_EQ(w.dropped(), 1002u);
}

TEST_F(WriterTest, EventsAfterFinishAreDroppedNotWritten) {
  const std::string path = dir_ + "/f.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  TraceWriter w(TickClock::monotonic_ns(), 4096);
  w.attach(fd, path, header_line());
  LineBuffer end;
  w.finish(end);
  LineBuffer late;
  w.emit("mark", late);
  EXPECT_EQ(w.dropped(), 1u);
  EXPECT_EQ(read_lines(path).size(), 2u);
}

bool fake_device(int ordinal, DeviceDescription& out) {
  out.name = "Fake GPU " + std::to_string(ordinal);
  out.total_bytes = 1ull << 34;
  return true;
}

class RecorderTest : public TempDir {
 protected:
  Config config_for(const std::string& file_template) const {
    Config c;
    c.output_template = dir_ + "/" + file_template;
    c.buffer_kb = 64;
    c.pool = Config::PoolMode::passthrough;  // what these tests record
    return c;
  }
};

TEST_F(RecorderTest, PassthroughEventsFollowTheFormat) {
  const Config c = config_for("r.%p.jsonl");
  Recorder r(c, &fake_device);
  r.on_alloc({.api = "cudaMalloc", .kind = cumemtrace::format::MemoryKind::device, .dev = 1,
              .ptr = 0x7f0000000200, .size = 1000, .stream = std::nullopt});
  r.on_alloc({.api = "cudaMallocAsync", .kind = cumemtrace::format::MemoryKind::device, .dev = 1,
              .ptr = 0x7f0000100000, .size = 77, .stream = 0xabc});
  EXPECT_EQ(r.on_free({.api = "cudaFree", .ptr = 0x7f0000000200}), FreeOutcome::recorded);
  EXPECT_EQ(r.live_count(), 1u);
  EXPECT_EQ(r.live_bytes(), 77u);
  r.on_exit();

  const auto lines = read_lines(dir_ + "/r." + std::to_string(getpid()) + ".jsonl");
  std::vector<std::string> evs;
  for (const auto& l : lines) evs.push_back(l["ev"]);
  const std::vector<std::string> expected = {"header", "device", "segment_alloc", "alloc",
                                             "segment_alloc", "alloc", "free", "segment_free", "end"};
  ASSERT_EQ(evs, expected);
  EXPECT_EQ(lines[0]["format"], "cumemtrace");
  EXPECT_EQ(lines[0]["version"], 1);
  EXPECT_EQ(lines[0]["pid"], getpid());
  EXPECT_EQ(lines[0]["pool"], "passthrough");
  EXPECT_TRUE(lines[0]["argv"].is_array());
  EXPECT_EQ(lines[0]["config"]["buffer_kb"], 64);
  EXPECT_EQ(lines[1]["name"], "Fake GPU 1");
  EXPECT_EQ(lines[1]["total"], 1ull << 34);
  EXPECT_EQ(lines[3]["ptr"], "0x7f0000000200");
  EXPECT_EQ(lines[3]["size"], 1000);
  EXPECT_EQ(lines[3]["kind"], "device");
  EXPECT_EQ(lines[3]["stack"], 0);
  EXPECT_FALSE(lines[3].contains("stream"));
  EXPECT_EQ(lines[5]["stream"], "0xabc");
  EXPECT_EQ(lines[6]["size"], 1000);  // a free repeats its alloc's size
  EXPECT_EQ(lines[6]["dev"], 1);
  EXPECT_EQ(lines[7]["size"], 1000);
  EXPECT_EQ(lines[8]["reason"], "exit");
  EXPECT_EQ(lines[8]["live"], 1);
  EXPECT_EQ(lines[8]["live_bytes"], 77);
  EXPECT_EQ(lines[8]["dropped"], 0);
}

TEST_F(RecorderTest, AllocationOverALivePointerReplacesIt) {
  // Its free went through a route the recorder did not see.
  const Config c = config_for("again.jsonl");
  Recorder r(c, &fake_device);
  r.on_alloc({.api = "cudaMalloc", .kind = cumemtrace::format::MemoryKind::device, .dev = 0,
              .ptr = 0x2000, .size = 100, .stream = std::nullopt});
  r.on_alloc({.api = "cudaMalloc", .kind = cumemtrace::format::MemoryKind::device, .dev = 0,
              .ptr = 0x2000, .size = 30, .stream = std::nullopt});
  EXPECT_EQ(r.live_count(), 1u);
  EXPECT_EQ(r.live_bytes(), 30u);
  EXPECT_EQ(r.on_free({.api = "cudaFree", .ptr = 0x2000}), FreeOutcome::recorded);
  EXPECT_EQ(r.live_bytes(), 0u);
  r.on_exit();
}

TEST_F(RecorderTest, NoFileUntilTheFirstEvent) {
  const Config c = config_for("lazy.jsonl");
  Recorder r(c, &fake_device);
  r.on_exit();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/lazy.jsonl"));
}

TEST_F(RecorderTest, UncreatableTraceKeepsAccountingAndDoesNotThrow) {
  const Config c = config_for("missing-dir/t.jsonl");
  Recorder r(c, &fake_device);
  r.on_alloc({.api = "cudaMalloc", .kind = cumemtrace::format::MemoryKind::device, .dev = 0,
              .ptr = 0x1000, .size = 10, .stream = std::nullopt});
  EXPECT_EQ(r.live_count(), 1u);
  EXPECT_EQ(r.on_free({.api = "cudaFree", .ptr = 0x1000}), FreeOutcome::recorded);
  r.on_exit();
  EXPECT_FALSE(r.writer().is_open());
}

}  // namespace
