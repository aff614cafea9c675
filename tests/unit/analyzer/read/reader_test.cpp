// TraceReader on hand-written traces: valid, damaged, foreign and compressed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "analyzer_test_support.h"
#include "read/zstd_frames.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer {
namespace {

using format::Event;
using testing::TempDir;

// Reads every event, keeping its kind and line number.
struct ReadAll {
  std::vector<Event> kinds;
  std::vector<std::uint64_t> line_numbers;
  std::vector<std::uint64_t> sizes;
};

ReadAll read_all(TraceReader& reader) {
  ReadAll all;
  while (const TraceEvent* e = reader.next()) {
    all.kinds.push_back(e->ev);
    all.line_numbers.push_back(e->line);
    all.sizes.push_back(e->size);
  }
  return all;
}

std::string error_of(const std::string& path, ReaderOptions options = {}) {
  try {
    TraceReader reader(path, options);
    while (reader.next() != nullptr) {
    }
  } catch (const TraceError& e) {
    return e.what();
  }
  return "(no error)";
}

using testing::zstd_compressed;

const std::string kValidTrace = testing::join_lines({
    testing::header_line(),
    R"({"ev":"device","t":1200,"dev":0,"name":"NVIDIA H100 80GB HBM3","total":85045870592})",
    R"J({"ev":"stack","id":3,"frames":[{"ip":"0x55d0c2a1b136","fn":"train_step(Model&)","module":"/opt/app/bin/train","off":"0x1b136"},{"ip":"0x55d0c2a1b300","fn":null,"module":"/opt/app/bin/train","off":"0x1b300"}]})J",
    R"({"ev":"alloc","t":53001,"tid":4242,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x7f3a00200000","size":1000000,"block":1000448,"stream":"0x0","stack":3})",
    R"({"ev":"free","t":99000,"tid":4242,"api":"cudaFree","kind":"device","dev":0,"ptr":"0x7f3a00200000","size":1000000,"stack":4})",
    R"({"ev":"mark","t":99100,"tid":4242,"name":"epoch 3","kind":"push"})",
    R"({"ev":"end","t":99999999,"reason":"exit","live":3,"live_bytes":4096,"dropped":0})",
});

TEST(TraceReader, ReadsAValidTraceWithEveryFieldDecoded) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), kValidTrace);
  TraceReader reader(tmp.path("t.jsonl"));
  EXPECT_EQ(reader.header().pid, 4242);
  EXPECT_EQ(reader.header().ppid, 4100);
  EXPECT_EQ(reader.header().host, "node7");
  EXPECT_EQ(reader.header().argv, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(reader.header().pool, "caching");
  EXPECT_EQ(reader.header().start_unix_ns, 1763740000123456789ull);
  EXPECT_EQ(reader.header().config_json, R"({"max_split_size":null,"stacks":32})");

  const TraceEvent* e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ev, Event::header);
  ASSERT_NE(e->header, nullptr);
  EXPECT_EQ(e->header->exe, "/usr/bin/python3");

  e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ev, Event::device);
  EXPECT_EQ(e->name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(e->total, 85045870592ull);

  e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ev, Event::stack);
  EXPECT_EQ(e->id, 3u);
  ASSERT_EQ(e->frames.size(), 2u);
  EXPECT_EQ(e->frames[0].ip, 0x55d0c2a1b136ull);
  EXPECT_EQ(e->frames[0].fn, "train_step(Model&)");
  EXPECT_TRUE(e->frames[0].has_fn);
  EXPECT_FALSE(e->frames[1].has_fn);
  EXPECT_EQ(e->frames[1].off, 0x1b300u);

  e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ev, Event::alloc);
  EXPECT_EQ(e->line, 4u);
  EXPECT_EQ(e->t, 53001u);
  EXPECT_EQ(e->tid, 4242u);
  EXPECT_EQ(e->api, "cudaMalloc");
  EXPECT_EQ(e->memory_kind, format::MemoryKind::device);
  EXPECT_EQ(e->ptr, 0x7f3a00200000ull);
  EXPECT_EQ(e->size, 1000000u);
  EXPECT_EQ(e->block, 1000448u);
  EXPECT_EQ(e->stream, 0u);
  EXPECT_EQ(e->stack, 3u);

  e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ev, Event::free);
  EXPECT_FALSE(e->block.has_value());
  EXPECT_FALSE(e->stream.has_value());

  e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ev, Event::mark);
  EXPECT_EQ(e->name, "epoch 3");
  EXPECT_EQ(e->kind, "push");

  e = reader.next();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ev, Event::end);
  EXPECT_EQ(e->end_reason, format::EndReason::exit);
  EXPECT_EQ(reader.next(), nullptr);
  EXPECT_EQ(reader.next(), nullptr);  // stays at the end

  const ReaderStats& s = reader.stats();
  EXPECT_EQ(s.lines, 7u);
  EXPECT_TRUE(s.has_end);
  EXPECT_FALSE(s.truncated);
  EXPECT_EQ(s.bad_lines, 0u);
  EXPECT_EQ(s.events(Event::alloc), 1u);
  EXPECT_EQ(s.events(Event::header), 1u);
  ASSERT_TRUE(s.end.has_value());
  EXPECT_EQ(s.end->live_bytes, 4096u);
  EXPECT_EQ(s.end->reason_text, "exit");
}

// A header line with `env` (README.md, "Additions to the trace format")
// written in place of the last brace of testing::header_line().
std::string header_with_env(const std::string& env_value, const std::string& field = "env") {
  std::string header = testing::header_line();
  header.pop_back();
  return header + ",\"" + field + "\":" + env_value + "}";
}

// Reads a trace whose header has `env_value` as its `env`, with one alloc and
// its end after it: every line must be read, none bad.
TraceHeader read_header_with_env(const std::string& env_value, const std::string& field = "env") {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines({header_with_env(env_value, field),
                                                                 testing::alloc_line(1, "0x10", 8),
                                                                 testing::end_line(2)}));
  TraceReader reader(tmp.path("t.jsonl"));
  const ReadAll all = read_all(reader);
  EXPECT_EQ(all.kinds, (std::vector<Event>{Event::header, Event::alloc, Event::end})) << env_value;
  EXPECT_EQ(reader.stats().bad_lines, 0u) << env_value;
  EXPECT_EQ(reader.stats().unknown_fields, 0u) << "a field of the header: " << env_value;
  return reader.header();
}

TEST(TraceReader, HeaderEnvIsKeptMinifiedAndAskedByName) {
  const TraceHeader h = read_header_with_env(
      R"({ "PYTORCH_CUDA_ALLOC_CONF" : "expandable_segments:True,max_split_size_mb:128", "PYTORCH_NO_CUDA_MEMORY_CACHING":"1" })");
  EXPECT_EQ(h.env_json,
            R"({"PYTORCH_CUDA_ALLOC_CONF":"expandable_segments:True,max_split_size_mb:128","PYTORCH_NO_CUDA_MEMORY_CACHING":"1"})");
  EXPECT_EQ(h.env("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True,max_split_size_mb:128");
  EXPECT_EQ(h.env("PYTORCH_NO_CUDA_MEMORY_CACHING"), "1");
  EXPECT_EQ(h.env("PYTORCH_ALLOC_CONF"), std::nullopt) << "not set in the traced process";
  EXPECT_EQ(h.config_json, R"({"max_split_size":null,"stacks":32})") << "config is unchanged by env";

  // Escapes come back as the process had them.
  const TraceHeader escaped = read_header_with_env(R"({"PYTORCH_ALLOC_CONF":"a\"b\\c\u00e9"})");
  EXPECT_EQ(escaped.env("PYTORCH_ALLOC_CONF"), "a\"b\\c\xc3\xa9");
}

// `rank_env` is read as `env` is, and as forgivingly.
TEST(TraceReader, HeaderRankEnvIsKeptAndAskedByName) {
  const TraceHeader h = read_header_with_env(R"({ "RANK" : "3", "WORLD_SIZE":"4" })", "rank_env");
  EXPECT_EQ(h.rank_env_json, R"({"RANK":"3","WORLD_SIZE":"4"})");
  EXPECT_EQ(h.rank_env("RANK"), "3");
  EXPECT_EQ(h.rank_env("LOCAL_RANK"), std::nullopt);
  EXPECT_EQ(h.env_json, "") << "env is another field";
  EXPECT_EQ(read_header_with_env("[3]", "rank_env").rank_env_json, "");
  EXPECT_EQ(read_header_with_env(R"({"RANK":3})", "rank_env").rank_env("RANK"), std::nullopt);
}

TEST(TraceReader, AHeaderWithoutEnvHasNone) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), kValidTrace);
  TraceReader reader(tmp.path("t.jsonl"));
  EXPECT_EQ(reader.header().env_json, "");
  EXPECT_EQ(reader.header().env("PYTORCH_CUDA_ALLOC_CONF"), std::nullopt);
}

// `env` is informational: a writer's mistake in it is ignored, never a bad
// header (which would make the whole trace unreadable).
TEST(TraceReader, AMalformedHeaderEnvIsIgnoredAndTheTraceStaysReadable) {
  for (const std::string bad : {R"("PYTORCH_CUDA_ALLOC_CONF=x")", R"(["PYTORCH_CUDA_ALLOC_CONF"])", "5", "true",
                                "null", "{}"}) {
    const TraceHeader h = read_header_with_env(bad);
    EXPECT_EQ(h.env_json, bad == "{}" ? "{}" : "") << bad;
    EXPECT_EQ(h.env("PYTORCH_CUDA_ALLOC_CONF"), std::nullopt) << bad;
  }
  // A value that is not a string is ignored on its own; the others stand.
  const TraceHeader mixed = read_header_with_env(
      R"({"PYTORCH_CUDA_ALLOC_CONF":5,"PYTORCH_ALLOC_CONF":{"a":"b"},"PYTORCH_NO_CUDA_MEMORY_CACHING":"1"})");
  EXPECT_EQ(mixed.env("PYTORCH_CUDA_ALLOC_CONF"), std::nullopt);
  EXPECT_EQ(mixed.env("PYTORCH_ALLOC_CONF"), std::nullopt);
  EXPECT_EQ(mixed.env("PYTORCH_NO_CUDA_MEMORY_CACHING"), "1");
  // A header built elsewhere may hold anything: no exception.
  TraceHeader garbage;
  garbage.env_json = "{not json";
  EXPECT_EQ(garbage.env("PYTORCH_CUDA_ALLOC_CONF"), std::nullopt);
}

TEST(TraceReader, SkipsUnknownFieldsAndEventsSilentlyButCountsThem) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"),
                      testing::join_lines({
                          testing::header_line(),
                          R"({"ev":"alloc","t":1,"tid":7,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x10","size":5,"stack":0,"future":{"a":[1,2]},"note":"x"})",
                          R"({"ev":"teleport","t":2,"ptr":17})",
                          R"({"ev":"pool","t":3,"dev":0,"allocated":1,"reserved":2,"cached_free":1,"largest_free":1,"free_blocks":1,"inactive_split":0,"ptr":"nonsense"})",
                          testing::end_line(4),
                      }));
  TraceReader reader(tmp.path("t.jsonl"));
  ReadAll all = read_all(reader);
  EXPECT_EQ(all.kinds, (std::vector<Event>{Event::header, Event::alloc, Event::pool, Event::end}));
  EXPECT_EQ(reader.stats().bad_lines, 0u);
  EXPECT_EQ(reader.stats().unknown_events, 1u);
  // future, note, and a ptr the pool event does not define
  EXPECT_EQ(reader.stats().unknown_fields, 3u);
}

TEST(TraceReader, CountsBadLinesAndRecordsTheFirstFiveWithLineNumbers) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"),
                      testing::join_lines({
                          testing::header_line(),
                          testing::alloc_line(1, "0x10", 5),
                          R"({"ev":"alloc","t":2,)",  // line 3: invalid JSON
                          R"({"ev":"alloc","t":3,"tid":7,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x20","stack":0})",  // 4: no size
                          R"({"ev":"alloc","t":"4","tid":7,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x30","size":1,"stack":0})",  // 5: t is a string
                          R"({"ev":"alloc","t":5,"tid":7,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0X40","size":1,"stack":0})",  // 6: bad hex
                          "[1,2,3]",  // 7: not an object
                          "",         // 8: empty
                          R"({"t":9})",  // 9: no ev
                          testing::alloc_line(10, "0x50", 7),
                          testing::end_line(11),
                      }));
  TraceReader reader(tmp.path("t.jsonl"));
  ReadAll all = read_all(reader);
  EXPECT_EQ(all.kinds, (std::vector<Event>{Event::header, Event::alloc, Event::alloc, Event::end}));
  EXPECT_EQ(all.line_numbers, (std::vector<std::uint64_t>{1, 2, 10, 11}));
  const ReaderStats& s = reader.stats();
  EXPECT_EQ(s.bad_lines, 7u);
  ASSERT_EQ(s.first_bad_lines.size(), 5u);
  EXPECT_EQ(s.first_bad_lines[0].line, 3u);
  EXPECT_EQ(s.first_bad_lines[0].reason, "invalid JSON");
  EXPECT_EQ(s.first_bad_lines[1].line, 4u);
  EXPECT_EQ(s.first_bad_lines[1].reason, "missing field 'size'");
  EXPECT_EQ(s.first_bad_lines[2].line, 5u);
  EXPECT_EQ(s.first_bad_lines[2].reason, "field 't' has the wrong type or value");
  EXPECT_EQ(s.first_bad_lines[3].line, 6u);
  EXPECT_EQ(s.first_bad_lines[3].reason, "field 'ptr' has the wrong type or value");
  EXPECT_EQ(s.first_bad_lines[4].line, 7u);
  EXPECT_EQ(s.first_bad_lines[4].reason, "not a JSON object");
  EXPECT_FALSE(s.truncated);
}

TEST(TraceReader, TraceWithoutEndIsTruncatedAndEverythingIsUsed) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines({testing::header_line(),
                                                                 testing::alloc_line(1, "0x10", 5),
                                                                 testing::alloc_line(2, "0x20", 6)}));
  TraceReader reader(tmp.path("t.jsonl"));
  ReadAll all = read_all(reader);
  EXPECT_EQ(all.sizes, (std::vector<std::uint64_t>{0, 5, 6}));
  EXPECT_TRUE(reader.stats().truncated);
  EXPECT_FALSE(reader.stats().has_end);
  EXPECT_FALSE(reader.stats().partial_last_line);
  EXPECT_EQ(reader.stats().last_complete_line, 3u);
}

TEST(TraceReader, PartialLastLineIsTruncationNotABadLine) {
  TempDir tmp;
  std::string content = testing::join_lines({testing::header_line(), testing::alloc_line(1, "0x10", 5),
                                             testing::end_line(3)});
  content += R"({"ev":"alloc","t":2,"tid":7,"api":"cudaMal)";  // the writer was killed here
  testing::write_file(tmp.path("t.jsonl"), content);
  TraceReader reader(tmp.path("t.jsonl"));
  ReadAll all = read_all(reader);
  EXPECT_EQ(all.kinds, (std::vector<Event>{Event::header, Event::alloc, Event::end}));
  EXPECT_TRUE(reader.stats().truncated);
  EXPECT_TRUE(reader.stats().partial_last_line);
  EXPECT_EQ(reader.stats().bad_lines, 0u);
  EXPECT_EQ(reader.stats().last_complete_line, 3u);
}

TEST(TraceReader, RejectsFilesThatAreNotTracesWithOneClearLine) {
  TempDir tmp;
  testing::write_file(tmp.path("empty.jsonl"), "");
  EXPECT_EQ(error_of(tmp.path("empty.jsonl")), tmp.path("empty.jsonl") + ": empty file, not a cumemtrace trace");

  std::string noise;
  for (int i = 0; i < 5000; ++i) noise += static_cast<char>((i * 7919 + 13) % 256);
  testing::write_file(tmp.path("noise.bin"), noise);
  EXPECT_EQ(error_of(tmp.path("noise.bin")),
            tmp.path("noise.bin") + ": not a cumemtrace trace (first line is not a header)");

  testing::write_file(tmp.path("other.json"), "{\"name\":\"package\",\"version\":1}\n");
  EXPECT_EQ(error_of(tmp.path("other.json")),
            tmp.path("other.json") + ": not a cumemtrace trace (first line is not a header)");

  testing::write_file(tmp.path("format.jsonl"), "{\"ev\":\"header\",\"format\":\"memtrace\",\"version\":1}\n");
  EXPECT_EQ(error_of(tmp.path("format.jsonl")),
            tmp.path("format.jsonl") + ": not a cumemtrace trace (header format is 'memtrace')");

  // A trace whose header is not first is not trusted either.
  testing::write_file(tmp.path("late.jsonl"), testing::join_lines({testing::alloc_line(1, "0x10", 5), testing::header_line()}));
  EXPECT_EQ(error_of(tmp.path("late.jsonl")),
            tmp.path("late.jsonl") + ": not a cumemtrace trace (first line is not a header)");

  EXPECT_EQ(error_of(tmp.path("missing.jsonl")), tmp.path("missing.jsonl") + ": cannot open: No such file or directory");
  EXPECT_EQ(error_of(tmp.dir()), tmp.dir() + ": cannot read: Is a directory");
}

TEST(TraceReader, RejectsANewerFormatVersion) {
  TempDir tmp;
  testing::write_file(tmp.path("v2.jsonl"), testing::join_lines({testing::header_line(2), testing::end_line(1)}));
  EXPECT_EQ(error_of(tmp.path("v2.jsonl")),
            tmp.path("v2.jsonl") + ": trace format version 2 is newer than this analyzer supports (1)");
  testing::write_file(tmp.path("v0.jsonl"), testing::join_lines({testing::header_line(0)}));
  EXPECT_EQ(error_of(tmp.path("v0.jsonl")), tmp.path("v0.jsonl") + ": unsupported trace format version 0");
}

TEST(TraceReader, SkipsOverlongLinesWithBoundedMemory) {
  TempDir tmp;
  const std::string huge = R"({"ev":"mark","t":1,"tid":1,"kind":"instant","name":")" + std::string(5000, 'x') + "\"}";
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines({testing::header_line(), huge,
                                                                 testing::alloc_line(2, "0x10", 5), testing::end_line(3)}));
  ReaderOptions options;
  options.max_line_bytes = 1024;
  TraceReader reader(tmp.path("t.jsonl"), options);
  ReadAll all = read_all(reader);
  EXPECT_EQ(all.kinds, (std::vector<Event>{Event::header, Event::alloc, Event::end}));
  ASSERT_EQ(reader.stats().first_bad_lines.size(), 1u);
  EXPECT_EQ(reader.stats().first_bad_lines[0].line, 2u);
  EXPECT_EQ(reader.stats().first_bad_lines[0].reason, "line longer than 1024 bytes");
  EXPECT_FALSE(reader.stats().truncated);
}

TEST(TraceReader, LinesLongerThanTheReadBufferAreStillRead) {
  TempDir tmp;
  std::vector<std::string> lines{testing::header_line()};
  // 3 MiB stack line: bigger than the initial 1 MiB buffer, under the limit.
  std::string frames;
  for (int i = 0; i < 30000; ++i) {
    frames += std::string(i ? "," : "") + R"({"ip":"0x1","fn":")" + std::string(90, 'f') + "\"}";
  }
  lines.push_back(R"({"ev":"stack","id":1,"frames":[)" + frames + "]}");
  lines.push_back(testing::alloc_line(2, "0x10", 5, 0, 1));
  lines.push_back(testing::end_line(3));
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines(lines));
  TraceReader reader(tmp.path("t.jsonl"));
  reader.next();
  const TraceEvent* stack = reader.next();
  ASSERT_NE(stack, nullptr);
  EXPECT_EQ(stack->frames.size(), 30000u);
  ReadAll rest = read_all(reader);
  EXPECT_EQ(rest.kinds, (std::vector<Event>{Event::alloc, Event::end}));
  EXPECT_EQ(reader.stats().bad_lines, 0u);
}

TEST(TraceReader, ReadsZstdCompressedTracesLikePlainOnes) {
  TempDir tmp;
  std::vector<std::string> lines{testing::header_line()};
  for (int i = 0; i < 20000; ++i) lines.push_back(testing::alloc_line(i, "0x10", static_cast<std::uint64_t>(i)));
  lines.push_back(testing::end_line(20001));
  const std::string plain = testing::join_lines(lines);
  testing::write_file(tmp.path("t.jsonl"), plain);
  testing::write_file(tmp.path("t.jsonl.zst"), zstd_compressed(plain));

  TraceReader from_plain(tmp.path("t.jsonl"));
  TraceReader from_zstd(tmp.path("t.jsonl.zst"));
  ReadAll a = read_all(from_plain);
  ReadAll b = read_all(from_zstd);
  EXPECT_EQ(a.sizes, b.sizes);
  EXPECT_EQ(b.kinds.size(), 20002u);
  EXPECT_EQ(from_zstd.stats().bytes, plain.size());
  EXPECT_FALSE(from_zstd.stats().truncated);
}

TEST(TraceReader, CutZstdStreamIsTruncatedAndCorruptOneIsAnError) {
  TempDir tmp;
  std::vector<std::string> lines{testing::header_line()};
  for (int i = 0; i < 20000; ++i) lines.push_back(testing::alloc_line(i, "0x10", 1));
  lines.push_back(testing::end_line(20001));
  const std::string compressed = zstd_compressed(testing::join_lines(lines));

  testing::write_file(tmp.path("cut.jsonl.zst"), compressed.substr(0, compressed.size() / 2));
  TraceReader cut(tmp.path("cut.jsonl.zst"));
  ReadAll all = read_all(cut);
  EXPECT_GT(all.kinds.size(), 1u);
  EXPECT_LT(all.kinds.size(), 20002u);
  EXPECT_TRUE(cut.stats().truncated);

  std::string corrupt = compressed.substr(0, 4) + std::string(compressed.size() - 4, '\xff');
  testing::write_file(tmp.path("corrupt.jsonl.zst"), corrupt);
  const std::string error = error_of(tmp.path("corrupt.jsonl.zst"));
  EXPECT_EQ(error.rfind(tmp.path("corrupt.jsonl.zst") + ": corrupt zstd data: ", 0), 0u) << error;
}

TEST(TraceReader, ErrorMessagesAreOneLine) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), "\x01\x02\n\n\n");
  const std::string error = error_of(tmp.path("t.jsonl"));
  EXPECT_NE(error, "(no error)");
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST(TraceReader, AcceptsCrLfAndWhitespaceThroughTheGeneralParser) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), testing::header_line() + "\r\n" +
                                               R"({ "ev" : "alloc", "t":1,"tid":7,"api":"cuMemAlloc_v2","kind":"managed","dev":1,"ptr":"0xabc","size":5,"stack":0 })" +
                                               "\r\n" + testing::end_line(3) + "\n");
  TraceReader reader(tmp.path("t.jsonl"));
  ReadAll all = read_all(reader);
  EXPECT_EQ(all.kinds, (std::vector<Event>{Event::header, Event::alloc, Event::end}));
  EXPECT_EQ(reader.stats().bad_lines, 0u);
}

// Everything a read yields, as text: each event's line number and fields,
// and the statistics.
std::string read_digest(const std::string& path, ReaderOptions options) {
  TraceReader reader(path, options);
  std::string out;
  while (const TraceEvent* e = reader.next()) {
    out += std::to_string(e->line) + ' ' + std::to_string(static_cast<int>(e->ev)) + ' ' + std::to_string(e->t) +
           ' ' + std::to_string(e->ptr) + ' ' + std::to_string(e->size) + ' ' + std::string(e->api) + ' ' +
           std::to_string(e->frames.size()) + '\n';
  }
  const ReaderStats& s = reader.stats();
  out += "lines=" + std::to_string(s.lines) + " bytes=" + std::to_string(s.bytes) +
         " bad=" + std::to_string(s.bad_lines) + " unknown=" + std::to_string(s.unknown_events) +
         " truncated=" + std::to_string(s.truncated) + " partial=" + std::to_string(s.partial_last_line) +
         " last_complete=" + std::to_string(s.last_complete_line);
  for (const BadLine& b : s.first_bad_lines) out += " [" + std::to_string(b.line) + ": " + b.reason + "]";
  return out;
}

TEST(TraceReader, MappedWindowsReadExactlyWhatReadingIntoTheBufferReads) {
  // Lines of every length around the windows' and batches' edges: short
  // events, stack lines longer than a batch (64 KiB) and than some windows,
  // a bad line, an unknown event, then either an end line or a cut line.
  TempDir tmp;
  std::uint64_t seed = 7;
  auto random = [&seed] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (const bool cut : {false, true}) {
    std::vector<std::string> lines{testing::header_line()};
    for (int i = 0; i < 4000; ++i) {
      const std::uint64_t pick = random() % 100;
      if (pick == 0) {
        std::string frames;
        const std::uint64_t count = 1 + random() % 900;
        for (std::uint64_t f = 0; f < count; ++f) {
          frames += std::string(f ? "," : "") + R"({"ip":"0x1","fn":")" + std::string(random() % 120, 'f') + "\"}";
        }
        lines.push_back(R"({"ev":"stack","id":)" + std::to_string(i) + R"(,"frames":[)" + frames + "]}");
      } else if (pick == 1) {
        lines.push_back(R"({"ev":"alloc","t":)" + std::to_string(i) + ",");  // bad
      } else if (pick == 2) {
        lines.push_back(R"({"ev":"future_event","t":)" + std::to_string(i) + "}");
      } else {
        const std::string ptr = "0x" + std::to_string(1000 + random() % 5000);
        lines.push_back(pick % 2 ? testing::alloc_line(static_cast<std::uint64_t>(i), ptr.c_str(), 1 + random() % 99999)
                                 : testing::free_line(static_cast<std::uint64_t>(i), ptr.c_str(), 1 + random() % 999));
      }
    }
    std::string content = testing::join_lines(lines);
    if (cut) {
      content += testing::alloc_line(9999, "0x10", 5).substr(0, 30);
    } else {
      content += testing::end_line(99999) + "\n";
    }
    const std::string path = tmp.path(cut ? "cut.jsonl" : "whole.jsonl");
    testing::write_file(path, content);
    ASSERT_GT(content.size(), std::size_t{1} << 20);  // past the first read into the buffer

    ReaderOptions buffered;
    buffered.map_window_bytes = 0;
    const std::string expected = read_digest(path, buffered);
    EXPECT_NE(expected.find("bytes=" + std::to_string(content.size())), std::string::npos) << expected.substr(expected.rfind('\n'));
    for (const std::size_t window : {std::size_t{4096}, std::size_t{70001}, std::size_t{1} << 20, std::size_t{16} << 20}) {
      ReaderOptions mapped;
      mapped.map_window_bytes = window;
      EXPECT_EQ(read_digest(path, mapped), expected) << "window " << window << (cut ? ", cut trace" : "");
    }
  }
}

TEST(TraceReader, CountsTheLinesDecodedThroughALineShape) {
  TempDir tmp;
  std::vector<std::string> lines = {testing::header_line()};
  for (int i = 0; i < 50; ++i) {
    const std::string ptr = "0x" + std::to_string(1000 + i);
    lines.push_back(testing::alloc_line(static_cast<std::uint64_t>(i), ptr.c_str(), 4096));
    lines.push_back(testing::free_line(static_cast<std::uint64_t>(i), ptr.c_str(), 4096));
  }
  const std::string path = tmp.path("shapes.jsonl");
  testing::write_file(path, testing::join_lines(lines) + testing::end_line(99999999) + "\n");
  TraceReader reader(path);
  EXPECT_EQ(read_all(reader).kinds.size(), 102u);
  // The header, the end and the first alloc and free teach; the rest follow.
  EXPECT_EQ(reader.stats().lines_by_shape, 98u);
  EXPECT_EQ(reader.stats().lines, 102u);
}

// A plain file is read through mapped windows: truncated behind the
// reader, its lost pages would raise SIGBUS on the next read. The reader
// must say the file changed, not kill the process.
TEST(TraceReader, AFileThatShrinksWhileItIsReadIsAnErrorNotACrash) {
  TempDir tmp;
  std::vector<std::string> lines = {testing::header_line()};
  for (int i = 0; lines.size() < 30000; ++i) {
    const std::string ptr = "0x" + std::to_string(1000 + i);
    lines.push_back(testing::alloc_line(static_cast<std::uint64_t>(i), ptr.c_str(), 4096));
    lines.push_back(testing::free_line(static_cast<std::uint64_t>(i), ptr.c_str(), 4096));
  }
  const std::string content = testing::join_lines(lines) + testing::end_line(99999999) + "\n";
  const std::string path = tmp.path("shrinks.jsonl");
  testing::write_file(path, content);
  ReaderOptions options;
  options.map_window_bytes = std::size_t{256} << 10;
  std::string error = "(no error)";
  std::uint64_t events = 0;
  try {
    TraceReader reader(path, options);
    while (reader.next() != nullptr) {
      // Well past the first read, in a mapped window: cut the file behind it.
      if (++events == 20000) {
        ASSERT_EQ(::truncate(path.c_str(), 1 << 20), 0);
      }
    }
  } catch (const TraceError& e) {
    error = e.what();
  }
  EXPECT_GE(events, 20000u);  // everything read before the cut is yielded
  EXPECT_LT(events, lines.size());
  EXPECT_NE(error.find("the file shrank while it was being read"), std::string::npos) << error;
}

}  // namespace
}  // namespace cumemtrace::analyzer
