// Line shapes (analyzer/read/line_shapes.h): a line decoded through a shape
// learnt from an earlier line must give exactly what simdjson gives for it
// alone, whatever was changed in it, and the shapes must actually be used.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "event_digest.h"
#include "read/line_parser.h"

namespace cumemtrace::analyzer::detail {
namespace {

using test::event_digest;

// What simdjson alone makes of `line`.
std::string simdjson_digest(const std::string& line) {
  LineParser parser(/*use_shapes=*/false);
  const std::string buffer = line + '\n' + std::string(LineParser::kPadding, '\0');
  TraceEvent event;
  const ParseResult result = parser.parse(std::string_view(buffer.data(), line.size()), event);
  return event_digest(result, event);
}

// Decodes `lines` as one batch (each line with its '\n'), as the reader does.
class BatchDecoder {
 public:
  std::vector<std::string> decode(const std::vector<std::string>& lines) {
    buffer_.clear();
    for (const auto& line : lines) buffer_ += line + '\n';
    const std::size_t size = buffer_.size();
    buffer_ += std::string(LineParser::kPadding, '\0');
    parser_.start_batch(std::string_view(buffer_.data(), size));
    std::vector<std::string> digests;
    std::string_view line;
    ParseResult result;
    while (parser_.next_in_batch(line, event_, result)) digests.push_back(event_digest(result, event_));
    return digests;
  }
  std::uint64_t lines_by_shape() const { return parser_.lines_by_shape(); }

 private:
  LineParser parser_;
  TraceEvent event_;  // one for all lines, as the reader keeps one
  std::string buffer_;
};

// One line of each kind the preload writes, in its field order.
const std::vector<std::string> kTeachers = {
    R"({"ev":"alloc","t":53001,"tid":4242,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x7f3a00200000","size":1000000,"block":1000448,"stream":"0x0","stack":3})",
    R"({"ev":"free","t":99000,"tid":4242,"api":"cudaFree","kind":"device","dev":0,"ptr":"0x7f3a00200000","size":1000000,"stream":"0x5","stack":4})",
    R"({"ev":"segment_alloc","t":52900,"dev":1,"ptr":"0x7f3a00000000","size":2097152,"api":"cuMemAlloc_v2"})",
    R"({"ev":"segment_free","t":88000000,"dev":0,"ptr":"0x7f3a00000000","size":2097152})",
    R"({"ev":"oom","t":120000,"tid":4242,"api":"cudaMalloc","dev":0,"size":2770000000,"block":2772434944,"allocated":8790000000,"reserved":14120000000,"cached_free":5330000000,"largest_free":1800000000,"device_free":1790000000,"device_total":16940000000,"cause":"fragmentation","stack":9})",
    R"({"ev":"pool","t":9091322,"dev":0,"allocated":3599954950,"reserved":4418699264,"cached_free":818744314,"largest_free":2097152,"free_blocks":131,"inactive_split":0})",
    R"({"ev":"mark","t":777,"tid":4242,"name":"epoch 3","kind":"push"})",
    R"({"ev":"error","t":900,"tid":4242,"api":"cudaFree","ptr":"0xdead","what":"unknown_pointer","stack":5})",
    R"({"ev":"device","t":1200,"dev":0,"name":"NVIDIA H100 80GB HBM3","total":85045870592})",
    R"({"ev":"end","t":99999999,"reason":"exit","live":3,"live_bytes":4096,"dropped":0})",
};

// Every line that differs from `line` by one byte replaced, removed or
// added, with the bytes that matter to JSON and to the shape decoder.
std::vector<std::string> mutations(const std::string& line) {
  static const std::string kBytes = std::string("\"\\ 09ax-.e},:{[n\x01\x1f\x7f") + "\xc3\xa9\xff" + std::string(1, '\0');
  std::vector<std::string> out;
  for (std::size_t i = 0; i <= line.size(); ++i) {
    for (char c : kBytes) {
      if (i < line.size()) out.push_back(line.substr(0, i) + c + line.substr(i + 1));
      out.push_back(line.substr(0, i) + c + line.substr(i));
    }
    if (i < line.size()) out.push_back(line.substr(0, i) + line.substr(i + 1));
  }
  return out;
}

TEST(LineShapes, EveryOneByteChangeToAKnownShapeDecodesAsSimdjsonDoes) {
  std::uint64_t checked = 0;
  std::uint64_t by_shape = 0;
  for (const std::string& teacher : kTeachers) {
    BatchDecoder decoder;
    ASSERT_EQ(decoder.decode({teacher, teacher}), std::vector<std::string>(2, simdjson_digest(teacher)));
    ASSERT_EQ(decoder.lines_by_shape(), 1u) << "the second line should take the shape the first taught: " << teacher;
    for (const std::string& changed : mutations(teacher)) {
      if (changed.find('\n') != std::string::npos) continue;
      const std::uint64_t before = decoder.lines_by_shape();
      const std::vector<std::string> digests = decoder.decode({changed, teacher});
      ASSERT_EQ(digests.size(), 2u) << changed;
      EXPECT_EQ(digests[0], simdjson_digest(changed)) << "line: " << changed;
      EXPECT_EQ(digests[1], simdjson_digest(teacher)) << "after: " << changed;
      by_shape += decoder.lines_by_shape() - before - 1;  // less the teacher's own line
      ++checked;
    }
  }
  EXPECT_GT(checked, 40000u);
  // Many changes keep the shape (a digit for a digit, a letter in a string):
  // those lines went the fast way, and still agreed.
  EXPECT_GT(by_shape, checked / 10) << "the shapes were hardly used: the test would prove nothing";
}

TEST(LineShapes, NumbersAtTheEdgesOfTheirRange) {
  const std::string start = R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":)";
  const std::string middle = R"(,"ptr":"0x1","size":)";
  const std::string end = R"(,"stack":0})";
  const std::vector<std::string> values = {"0",  "00", "01", "9", "2147483647", "2147483648", "9999999999999999999",
                                           "10000000000000000000", "18446744073709551615", "18446744073709551616",
                                           "99999999999999999999", "12345678", "123456789", "1234567890123456",
                                           "12345678901234567", "-0", "1.0", "1e3"};
  BatchDecoder decoder;
  const std::string teacher = start + "0" + middle + "1" + end;
  decoder.decode({teacher});
  for (const std::string& dev : values) {
    for (const std::string& size : values) {
      const std::string line = start + dev + middle + size + end;
      EXPECT_EQ(decoder.decode({line})[0], simdjson_digest(line)) << line;
    }
  }
  EXPECT_GT(decoder.lines_by_shape(), 50u);
}

TEST(LineShapes, HexValuesOfEveryLength) {
  BatchDecoder decoder;
  const auto line_with = [](const std::string& ptr) {
    return R"({"ev":"error","t":900,"tid":4242,"api":"cudaFree","ptr":")" + ptr + R"(","what":"x","stack":5})";
  };
  decoder.decode({line_with("0x1")});
  const std::string digits = "0123456789abcdefABCDEF0fedcba9876543210";
  for (std::size_t length = 0; length <= 18; ++length) {
    for (std::size_t start = 0; start + length <= digits.size(); start += 3) {
      for (const std::string prefix : {"0x", "0X", "x0", ""}) {
        const std::string line = line_with(prefix + digits.substr(start, length));
        EXPECT_EQ(decoder.decode({line})[0], simdjson_digest(line)) << line;
      }
    }
  }
  EXPECT_GT(decoder.lines_by_shape(), 100u);
}

TEST(LineShapes, KeysTheEventDoesNotDefineAreCountedAsSimdjsonCountsThem) {
  const std::string line =
      R"({"ev":"mark","t":1,"tid":2,"name":"x","kind":"push","colour":"red","weight":3,"size":4})";
  BatchDecoder decoder;
  const std::vector<std::string> digests = decoder.decode({line, line, line});
  EXPECT_EQ(digests, std::vector<std::string>(3, simdjson_digest(line)));
  EXPECT_EQ(decoder.lines_by_shape(), 2u);
  EXPECT_NE(digests[0].find("|unknown 3|"), std::string::npos) << digests[0];
}

TEST(LineShapes, MoreShapesThanTheTableHoldsStillDecodeRight) {
  // 40 shapes (an extra key each) in turns: the table keeps 16, and lines
  // whose shape was replaced go through simdjson again. A batch per pair:
  // many misses in one batch would hand the rest of it to iterate_many.
  BatchDecoder decoder;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 40; ++i) {
      const std::string line = R"({"ev":"mark","t":)" + std::to_string(round * 100 + i) +
                               R"(,"tid":2,"name":"n","kind":"push","x)" + std::to_string(i) + R"(":1})";
      EXPECT_EQ(decoder.decode({line, line}), std::vector<std::string>(2, simdjson_digest(line))) << line;
    }
  }
  EXPECT_EQ(decoder.lines_by_shape(), 120u);  // each line's twin, never its first
}

TEST(LineShapes, SingleLinesAndLinesWithoutTheirNewlineUseThemToo) {
  LineParser parser;
  TraceEvent event;
  const std::string line = kTeachers[0];
  std::string buffer = line + std::string(LineParser::kPadding, '\0');  // no '\n' after the line
  for (int i = 0; i < 3; ++i) {
    const ParseResult result = parser.parse(std::string_view(buffer.data(), line.size()), event);
    EXPECT_EQ(event_digest(result, event), simdjson_digest(line));
  }
  EXPECT_EQ(parser.lines_by_shape(), 2u);
  // A batch whose last line lacks its '\n' (the reader never gives one).
  parser.start_batch(std::string_view(buffer.data(), line.size()));
  std::string_view decoded;
  ParseResult result;
  ASSERT_TRUE(parser.next_in_batch(decoded, event, result));
  EXPECT_EQ(decoded, line);
  EXPECT_EQ(event_digest(result, event), simdjson_digest(line));
  EXPECT_FALSE(parser.next_in_batch(decoded, event, result));
}

TEST(LineShapes, EveryLineOfTheGoldenTracesDecodesAsSimdjsonDoes) {
  std::uint64_t lines_checked = 0;
  for (const char* name : {"training_loop.jsonl", "oom_fragmentation.jsonl", "two_devices.jsonl", "normal_leak.jsonl",
                           "job.rank0.jsonl", "parent.jsonl", "truncated.jsonl", "python_frames.jsonl"}) {
    std::ifstream in(std::string(CUMEMTRACE_GOLDEN_TRACES) + "/" + name);
    ASSERT_TRUE(in) << name;
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    BatchDecoder decoder;
    const std::vector<std::string> digests = decoder.decode(lines);
    ASSERT_EQ(digests.size(), lines.size()) << name;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(digests[i], simdjson_digest(lines[i])) << name << ":" << i + 1 << ": " << lines[i];
    }
    lines_checked += lines.size();
  }
  EXPECT_GT(lines_checked, 100u);
}

}  // namespace
}  // namespace cumemtrace::analyzer::detail
