// The following source: a trace read while it is written. Each test's
// "writer" is the on_idle callback, which appends the next piece each time
// the reader waits at the file's end, so the interleaving is exact.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <deque>
#include <string>
#include <vector>

#include "cumemtrace/analyzer/trace_reader.h"
#include "read/following_source.h"
#include "test_support.h"

namespace cumemtrace::analyzer {
namespace {

using cumemtrace::testing::TempDir;

constexpr const char* kHeader =
    R"({"ev":"header","format":"cumemtrace","version":1,"pid":1,"ppid":0,"host":"h","exe":"/bin/x","argv":["x"],"start_unix_ns":1,"pool":"caching"})"
    "\n";
constexpr const char* kAlloc =
    R"({"ev":"alloc","t":10,"tid":1,"dev":0,"api":"cudaMalloc","kind":"device","ptr":"0x1000","size":4096,"stack":0})"
    "\n";
constexpr const char* kFree = R"({"ev":"free","t":20,"tid":1,"dev":0,"api":"cudaFree","kind":"device","ptr":"0x1000","size":4096,"stack":0})"
                              "\n";
constexpr const char* kEnd = R"({"ev":"end","t":30,"reason":"exit","live":0,"live_bytes":0,"dropped":0})"
                             "\n";

void append(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

struct Followed {
  std::vector<format::Event> events;
  ReaderStats stats;
  int idle_calls = 0;
};

// Reads `path` following it; at each wait the next piece is appended; once
// none is left, the following stops.
Followed follow(const std::string& path, std::deque<std::string> pieces) {
  Followed result;
  detail::FollowOptions options;
  options.poll = std::chrono::milliseconds(1);
  options.on_idle = [&]() {
    ++result.idle_calls;
    if (pieces.empty()) return false;
    append(path, pieces.front());
    pieces.pop_front();
    return true;
  };
  ReaderOptions reader_options;
  reader_options.complete_killed = false;
  TraceReader reader(path, detail::open_following_byte_source(path, options), reader_options);
  while (const TraceEvent* e = reader.next()) result.events.push_back(e->ev);
  result.stats = reader.stats();
  return result;
}

TEST(FollowingSource, WaitsForTheRestOfALineInsteadOfReportingIt) {
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  append(path, "");
  const std::string alloc = kAlloc;
  // The header arrives in two writes, the alloc cut in three places.
  const std::string header = kHeader;
  const Followed f = follow(path, {header.substr(0, 7), header.substr(7), alloc.substr(0, 1), alloc.substr(1, 40),
                                   alloc.substr(41), kFree, kEnd});
  EXPECT_EQ(f.events, (std::vector<format::Event>{format::Event::header, format::Event::alloc, format::Event::free,
                                                  format::Event::end}));
  EXPECT_EQ(f.stats.bad_lines, 0u);
  EXPECT_FALSE(f.stats.partial_last_line);
  EXPECT_TRUE(f.stats.has_end);
  EXPECT_GE(f.idle_calls, 7);  // it waited at each piece
}

TEST(FollowingSource, StoppedInsideALineEndsWithoutABadLine) {
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  append(path, kHeader);
  const std::string alloc = kAlloc;
  const Followed f = follow(path, {kFree, alloc.substr(0, 30)});
  EXPECT_EQ(f.events, (std::vector<format::Event>{format::Event::header, format::Event::free}));
  EXPECT_EQ(f.stats.bad_lines, 0u);
  EXPECT_TRUE(f.stats.partial_last_line);
  EXPECT_TRUE(f.stats.truncated);
}

TEST(FollowingSource, ReadsWhatTheFileGrowsBy) {
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  append(path, kHeader);
  std::deque<std::string> pieces;
  std::string many;
  for (int i = 0; i < 5000; ++i) many += kAlloc;
  pieces.push_back(many);  // more than a read's buffer at once
  for (int i = 0; i < 50; ++i) pieces.push_back(kFree);
  pieces.push_back(kEnd);
  const Followed f = follow(path, pieces);
  EXPECT_EQ(f.stats.events(format::Event::alloc), 5000u);
  EXPECT_EQ(f.stats.events(format::Event::free), 50u);
  EXPECT_EQ(f.stats.lines, 5052u);
  EXPECT_TRUE(f.stats.has_end);
}

TEST(FollowingSource, FollowsAZstdStreamFlushedAfterEachBatch) {
  TempDir dir;
  const std::string path = dir / "t.jsonl.zst";
  append(path, "");
  // As the preload writes: one frame, ZSTD_e_flush after each batch, and
  // the file grows by pieces cut anywhere (even inside the magic number).
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  const auto compress = [&](const std::string& text, ZSTD_EndDirective mode) {
    std::string out(ZSTD_compressBound(text.size()) + 64, '\0');
    ZSTD_inBuffer in{text.data(), text.size(), 0};
    ZSTD_outBuffer o{out.data(), out.size(), 0};
    while (ZSTD_compressStream2(cctx, &o, &in, mode) != 0) {
    }
    out.resize(o.pos);
    return out;
  };
  const std::string first = compress(std::string(kHeader) + kAlloc, ZSTD_e_flush);
  const std::string second = compress(std::string(kFree) + kEnd, ZSTD_e_end);
  ZSTD_freeCCtx(cctx);
  const Followed f = follow(path, {first.substr(0, 2), first.substr(2, first.size() / 2),
                                   first.substr(2 + first.size() / 2), second.substr(0, 5), second.substr(5)});
  EXPECT_EQ(f.events, (std::vector<format::Event>{format::Event::header, format::Event::alloc, format::Event::free,
                                                  format::Event::end}));
  EXPECT_EQ(f.stats.bad_lines, 0u);
}

TEST(FollowingSource, AFileThatShrinksIsAnError) {
  TempDir dir;
  const std::string path = dir / "t.jsonl";
  append(path, std::string(kHeader) + kAlloc);
  bool cut = false;
  detail::FollowOptions options;
  options.poll = std::chrono::milliseconds(1);
  options.on_idle = [&]() {
    if (cut) return false;
    cut = true;
    return ::truncate(path.c_str(), 10) == 0;
  };
  TraceReader reader(path, detail::open_following_byte_source(path, options), ReaderOptions{});
  EXPECT_THROW(
      {
        while (reader.next() != nullptr) {
        }
      },
      TraceError);
}

}  // namespace
}  // namespace cumemtrace::analyzer
