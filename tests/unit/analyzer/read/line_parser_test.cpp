// The line decoder: what it accepts, what it rejects and why, and strict hex.
#include <gtest/gtest.h>

#include <charconv>
#include <string>
#include <type_traits>
#include <vector>

#include "read/line_parser.h"
#include "read/line_parser_schema.h"

namespace cumemtrace::analyzer::detail {
namespace {

// A parser with the padded buffer the reader gives it (the decoder reads
// ahead of the line). The event's string views point into `buffer` or into
// the parser, so both live as long as the Decoder.
struct Decoder {
  LineParser parser;
  std::string buffer;
  TraceEvent event;

  ParseResult parse(const std::string& line) {
    buffer = line + '\n' + std::string(LineParser::kPadding, '\0');
    return parser.parse(std::string_view(buffer.data(), line.size()), event);
  }
};

const std::vector<std::string> kLines = {
    R"({"ev":"alloc","t":53001,"tid":4242,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x7f3a00200000","size":1000000,"block":1000448,"stream":"0x0","stack":3})",
    R"({"ev":"free","t":99000,"tid":4242,"api":"cudaFree","kind":"device","dev":0,"ptr":"0x7f3a00200000","size":1000000,"stack":4})",
    R"({"ev":"segment_alloc","t":52900,"dev":1,"ptr":"0x7f3a00000000","size":2097152,"api":"cuMemAlloc_v2"})",
    R"({"ev":"segment_free","t":88000000,"dev":0,"ptr":"0x7f3a00000000","size":2097152})",
    R"({"ev":"oom","t":120000,"tid":4242,"api":"cudaMalloc","dev":0,"size":2770000000,"block":2772434944,"allocated":8790000000,"reserved":14120000000,"cached_free":5330000000,"largest_free":1800000000,"device_free":1790000000,"device_total":16940000000,"cause":"fragmentation","stack":9})",
    R"({"ev":"mark","t":777,"tid":4242,"name":"epoch 3","kind":"push"})",
    R"({"ev":"error","t":900,"tid":4242,"api":"cudaFree","ptr":"0xdead","what":"unknown_pointer","stack":5})",
    R"({"ev":"end","t":99999999,"reason":"exit","live":3,"live_bytes":4096,"dropped":0})",
    R"({"ev":"header","format":"cumemtrace","version":1,"pid":-1,"ppid":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"vmm","dev":2147483647,"ptr":"0xffffffffffffffff","size":18446744073709551615,"stack":0})",
    // Numbers that are not plain non-negative integers.
    R"({"ev":"alloc","t":1.5,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"alloc","t":1e3,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"alloc","t":01,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"alloc","t":-0,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"alloc","t":-5,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":18446744073709551616,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":2147483648,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":-1,"ptr":"0x1","size":1,"stack":0})",
    // Strings with escapes or non-ASCII, keys with escapes.
    R"({"ev":"alloc","t":1,"tid":1,"api":"cuda\u004dalloc","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"mark","t":1,"tid":1,"name":"époque \"3\"","kind":"instant"})",
    R"({"\u0065v":"mark","t":1,"tid":1,"name":"x","kind":"instant"})",
    "{\"ev\":\"mark\",\"t\":1,\"tid\":1,\"name\":\"\xff\xfe\",\"kind\":\"instant\"}",  // invalid UTF-8
    // Nulls: absent when optional, wrong when required.
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"block":null,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":null,"stack":0})",
    R"({"ev":null})",
    // Structure.
    R"({"ev":"alloc","t":1,})",
    R"({"ev":"alloc" "t":1})",
    R"({"ev":"alloc","t":1)",
    R"({"ev":"alloc","t":1}x)",
    R"({"ev":"alloc","t":1}})",
    R"({})",
    R"({"t":1})",
    R"({"ev":7})",
    R"({"ev":"mystery","whatever":[1,2,{"x":null}]})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0,"extra":true,"more":[]})",
    R"({"ev":"alloc","ev":"free","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1","size":2,"size":3,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"1","size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x","size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1ffffffffffffffff","size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0xABC","size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":17,"size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"teleported","dev":0,"ptr":"0x1","size":1,"stack":0})",
    "[]",
    "\"alloc\"",
    "42",
    "null",
    " ",
    "{",
    "}",
    "\xef\xbb\xbf{}",
    // Escapes and blanks in the strings the decoder reads without scanning
    // them (hex, the event's name, a memory kind).
    R"({"ev":"al\u006coc","t":1,"tid":1,"api":"a","kind":"dev\u0069ce","dev":0,"ptr":"0x\u0031f","size":1,"stream":"0x\u0030","stack":0})",
    R"({"ev":"alloc" ,"t":1,"tid":1,"api":"a","kind":"device" ,"dev":0,"ptr":"0x1f"  ,"size":1,"stack":0})",
    R"({"ev":"alloc","t":1,"tid":1,"api":"a","kind":"device","dev":0,"ptr":"0x1\"","size":1,"stack":0})",
};

// What the parser makes of each line of kLines, in order: "ok", "unknown
// event" (skipped, not an error: the format may grow), or the bad line's reason.
const std::vector<std::string> kVerdicts = {
    "ok",  // 0
    "ok",  // 1
    "ok",  // 2
    "ok",  // 3
    "ok",  // 4
    "ok",  // 5
    "ok",  // 6
    "ok",  // 7
    "ok",  // 8
    "ok",  // 9
    "field 't' has the wrong type or value",  // 10
    "field 't' has the wrong type or value",  // 11
    "invalid JSON",  // 12
    "ok",  // 13
    "field 't' has the wrong type or value",  // 14
    "invalid JSON",  // 15
    "field 'dev' has the wrong type or value",  // 16
    "field 'dev' has the wrong type or value",  // 17
    "ok",  // 18
    "ok",  // 19
    "ok",  // 20
    "invalid JSON",  // 21
    "ok",  // 22
    "field 'size' has the wrong type or value",  // 23
    "field 'ev' has the wrong type or value",  // 24
    "invalid JSON",  // 25
    "invalid JSON",  // 26
    "invalid JSON",  // 27
    "invalid JSON",  // 28
    "invalid JSON",  // 29
    "missing field 'ev'",  // 30
    "missing field 'ev'",  // 31
    "field 'ev' has the wrong type or value",  // 32
    "unknown event",  // 33
    "ok",  // 34
    "ok",  // 35
    "ok",  // 36
    "field 'ptr' has the wrong type or value",  // 37
    "field 'ptr' has the wrong type or value",  // 38
    "field 'ptr' has the wrong type or value",  // 39
    "field 'ptr' has the wrong type or value",  // 40
    "field 'ptr' has the wrong type or value",  // 41
    "ok",  // 42
    "not a JSON object",  // 43
    "not a JSON object",  // 44
    "not a JSON object",  // 45
    "not a JSON object",  // 46
    "invalid JSON",  // 47
    "invalid JSON",  // 48
    "invalid JSON",  // 49
    "invalid JSON",  // 50
    "ok",  // 51
    "ok",  // 52
    "field 'ptr' has the wrong type or value",  // 53
};

std::string verdict(const ParseResult& r) {
  switch (r.status) {
    case ParseResult::Status::ok: return "ok";
    case ParseResult::Status::unknown_event: return "unknown event";
    case ParseResult::Status::bad: break;
  }
  return r.describe();
}

TEST(LineParser, AcceptsAndRejectsEachLineForTheRightReason) {
  ASSERT_EQ(kLines.size(), kVerdicts.size());
  Decoder d;
  for (std::size_t i = 0; i < kLines.size(); ++i) {
    EXPECT_EQ(verdict(d.parse(kLines[i])), kVerdicts[i]) << "line " << i << ": " << kLines[i];
  }
}

TEST(LineParser, DuplicateKeysKeepTheLastValue) {
  Decoder d;
  ASSERT_EQ(d.parse(kLines[35]).status, ParseResult::Status::ok);
  EXPECT_EQ(d.event.ev, format::Event::free);
  ASSERT_EQ(d.parse(kLines[36]).status, ParseResult::Status::ok);
  EXPECT_EQ(d.event.size, 3u);
}

TEST(LineParser, CountsFieldsTheEventDoesNotDefine) {
  Decoder d;
  EXPECT_EQ(d.parse(kLines[34]).unknown_fields, 2u);
}

TEST(LineParser, ChecksTypesRangesAndRequiredFields) {
  Decoder d;
  const TraceEvent& e = d.event;
  auto describe = [&](const std::string& line) { return d.parse(line).describe(); };
  EXPECT_EQ(describe(kLines[0]), "ok");
  EXPECT_EQ(describe(kLines[10]), "field 't' has the wrong type or value");  // 1.5
  EXPECT_EQ(describe(kLines[14]), "field 't' has the wrong type or value");  // -5
  EXPECT_EQ(describe(kLines[16]), "field 'dev' has the wrong type or value");  // > INT_MAX
  EXPECT_EQ(describe(kLines[23]), "field 'size' has the wrong type or value");  // null
  EXPECT_EQ(describe(R"({"ev":"alloc","t":1})"), "missing field 'tid'");
  EXPECT_EQ(describe(R"({"t":1})"), "missing field 'ev'");
  EXPECT_EQ(describe(""), "empty line");
  EXPECT_EQ(describe(R"({"ev":"alloc","t":1,})"), "invalid JSON");

  ASSERT_EQ(d.parse(kLines[9]).status, ParseResult::Status::ok);
  EXPECT_EQ(e.size, 18446744073709551615ull);
  EXPECT_EQ(e.ptr, 0xffffffffffffffffull);
  EXPECT_EQ(e.dev, 2147483647);
  EXPECT_EQ(e.memory_kind, format::MemoryKind::vmm);

  // An unknown memory kind is not an error: the format may grow.
  ASSERT_EQ(d.parse(kLines[42]).status, ParseResult::Status::ok);
  EXPECT_EQ(e.memory_kind, format::MemoryKind::unknown);

  // Escapes are decoded by the general parser.
  ASSERT_EQ(d.parse(kLines[18]).status, ParseResult::Status::ok);
  EXPECT_EQ(e.api, "cudaMalloc");
  for (const std::size_t i : {51, 52}) {
    ASSERT_EQ(d.parse(kLines[i]).status, ParseResult::Status::ok) << kLines[i];
    EXPECT_EQ(e.ev, format::Event::alloc);
    EXPECT_EQ(e.kind, "device");
    EXPECT_EQ(e.memory_kind, format::MemoryKind::device);
    EXPECT_EQ(e.ptr, 0x1fu);
  }
  EXPECT_EQ(e.stream, std::nullopt);
  ASSERT_EQ(d.parse(kLines[51]).status, ParseResult::Status::ok);
  EXPECT_EQ(e.stream, 0u);
}

TEST(LineParser, HexIsStrict) {
  std::uint64_t v = 0;
  EXPECT_TRUE(parse_hex("0x0", v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(parse_hex("0x7f3a00200000", v));
  EXPECT_EQ(v, 0x7f3a00200000ull);
  EXPECT_TRUE(parse_hex("0xffffffffffffffff", v));
  EXPECT_EQ(v, ~0ull);
  for (const char* bad : {"", "0x", "7f", "0X1", "0x1g", "0xABC", "0x 1", "0x-1", "0x10000000000000000", "x0"}) {
    EXPECT_FALSE(parse_hex(bad, v)) << bad;
  }
}

// Everything a decoded line yields, as text, to compare two decodings.
std::string digest(const ParseResult& r, const TraceEvent& e) {
  std::string out = verdict(r) + " unknown_fields=" + std::to_string(r.unknown_fields);
  if (r.status != ParseResult::Status::ok) return out;
  auto add = [&out](const char* name, auto value) {
    out += ' ';
    out += name;
    out += '=';
    if constexpr (std::is_convertible_v<decltype(value), std::string_view>) {
      out += std::string_view(value);
    } else {
      out += std::to_string(value);
    }
  };
  add("ev", static_cast<int>(e.ev));
  add("t", e.t);
  add("tid", e.tid);
  add("dev", e.dev);
  add("ptr", e.ptr);
  add("size", e.size);
  add("block", e.block.value_or(~0ull));
  add("stream", e.stream.value_or(~0ull));
  add("stack", e.stack);
  add("api", e.api);
  add("kind", e.kind);
  add("name", e.name);
  add("frames", e.frames.size());
  for (const StackFrame& f : e.frames) {
    add("fn", f.fn);
    add("py", f.py ? 1 : 0);
  }
  add("argv", e.argv.size());
  add("config", e.config_json);
  add("env", e.env_json);
  add("rank_env", e.rank_env_json);
  add("version", e.version);
  add("live_bytes", e.live_bytes);
  return out;
}

TEST(LineParser, BatchGivesExactlyWhatLineByLineGives) {
  // Each line of kLines, and the shapes only batch mode could confuse (an
  // object over two lines, two objects on one line, leading blanks, CR LF),
  // in a batch of its own between lines in the writer's shape.
  const std::string good =
      R"({"ev":"alloc","t":5,"tid":7,"api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x10","size":5,"stack":0})";
  std::vector<std::vector<std::string>> cases;
  for (const std::string& line : kLines) cases.push_back({good, line, good, good});
  for (const std::string& line : kLines) {
    for (const char* tail : {"\xff", "\x80", " x", "x", "}", ",", "\x01"}) cases.push_back({line, line + tail, line});
  }
  cases.push_back({good, R"({"ev":"alloc","t":1,"tid":1,)",
                   R"("api":"a","kind":"device","dev":0,"ptr":"0x1","size":1,"stack":0})", good});
  for (const std::string& odd : {good + good, good + " " + good, "  " + good, good + "\r", good + "  ", "\t" + good,
                                 good + R"("size":5,"stack":1})", good + "]", good + "\"", good + "{", good + "\xff",
                                 good + "\x80", good + "\xc3", "\xef\xbb\xbf" + good, good + std::string(1, '\0')}) {
    cases.push_back({good, odd, good});
    cases.push_back({good, odd});  // last in its batch (found by the fuzzer)
  }
  cases.push_back({good, good, good});
  // Fields an event does not define, with values its own fields would refuse
  // (found by the fuzzer: one path read the hex digits before the bad bytes).
  const std::string end_with_extras =
      R"({"ev":"end","t":8000,"reason":"exit","live":1,"live_bytes":10485760,"dropped":2,"ptr":"0x7e0040000000!!!!","size":536870912,"stack":0})";
  cases.push_back({end_with_extras});
  cases.push_back({good, end_with_extras, good});
  cases.push_back({good, R"({"ev":"end","t":9,"reason":"exit","live":0,"live_bytes":0,"dropped":0,"ptr":null})", good});
  // Lines of one kind in a row must not inherit each other's lists.
  const std::string stack_a = R"({"ev":"stack","id":1,"frames":[{"ip":"0x1","fn":"a"},{"ip":"0x2","fn":"b"}]})";
  const std::string stack_b = R"({"ev":"stack","id":2,"frames":[{"ip":"0x3","fn":"c"}]})";
  const std::string header_a =
      R"({"ev":"header","format":"cumemtrace","version":1,"argv":["x","y"],"config":{"a":1},"env":{"PYTORCH_ALLOC_CONF":"x"}})";
  const std::string header_b = R"({"ev":"header","format":"cumemtrace","version":1,"argv":["z"]})";
  cases.push_back({stack_a, stack_b, stack_a, good, stack_b});
  const std::string stack_py =
      R"({"ev":"stack","id":3,"frames":[{"ip":"0x1","fn":"a"},{"py":true,"fn":"f","file":"/a.py","line":null},{"ip":"0x2"}]})";
  cases.push_back({stack_py, stack_a, good, stack_py, stack_b});
  cases.push_back({header_a, header_b, header_a, header_a});

  LineParser shaped_batch_parser;
  LineParser streaming_batch_parser(/*use_shapes=*/false);  // every batch through iterate_many
  Decoder single;
  // Rounds 0 and 1 with shapes (the second with the field orders learnt),
  // 2 and 3 with every batch through simdjson's iterate_many.
  for (int round = 0; round < 4; ++round) {
    LineParser& batch_parser = round < 2 ? shaped_batch_parser : streaming_batch_parser;
    for (const std::vector<std::string>& lines : cases) {
      std::string block;
      for (const std::string& line : lines) block += line + '\n';
      const std::string padded = block + std::string(LineParser::kPadding, '\0');
      batch_parser.start_batch(std::string_view(padded.data(), block.size()));
      std::size_t index = 0;
      std::string_view line;
      TraceEvent event;
      ParseResult result;
      while (batch_parser.next_in_batch(line, event, result)) {
        ASSERT_LT(index, lines.size());
        ASSERT_EQ(line, lines[index]);
        // The reference: a fresh event, parsed alone (nothing left from earlier lines).
        Decoder fresh;
        EXPECT_EQ(digest(result, event), digest(fresh.parse(lines[index]), fresh.event))
            << "line " << index << " of the batch: " << line;
        // The same parser on one event line after line: the same again.
        EXPECT_EQ(digest(single.parse(lines[index]), single.event), digest(fresh.parse(lines[index]), fresh.event))
            << "line " << index << " of the batch: " << line;
        ++index;
      }
      EXPECT_EQ(index, lines.size());
    }
  }
}

TEST(LineParser, HexAgreesWithTheStandardLibraryOnEveryLengthAndDigit) {
  // Compare parse_hex with from_chars on every length, every digit in every
  // position, and bytes around the ranges.
  std::uint64_t seed = 0x9E3779B97F4A7C15ull;
  auto random = [&seed] { return seed = seed * 6364136223846793005ull + 1442695040888963407ull; };
  const std::string alphabet = "0123456789abcdef";
  for (int round = 0; round < 20000; ++round) {
    const std::size_t length = 1 + round % 16;
    std::string digits;
    for (std::size_t i = 0; i < length; ++i) digits += alphabet[(random() >> 33) % 16];
    if (round % 3 == 0) {  // one byte that is not a lowercase hex digit
      static constexpr char kNotDigitBytes[] = "/:`gAF G\x7f\x80\xff\0x-";
      static const std::string kNotDigits(kNotDigitBytes, sizeof kNotDigitBytes - 1);
      digits[(random() >> 33) % length] = kNotDigits[(random() >> 33) % kNotDigits.size()];
    }
    std::uint64_t expected = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), expected, 16);
    const bool valid = error == std::errc() && end == digits.data() + digits.size() &&
                       digits.find_first_of("ABCDEF") == std::string::npos;
    std::uint64_t actual = 0;
    EXPECT_EQ(parse_hex("0x" + digits, actual), valid) << digits;
    if (valid) {
      EXPECT_EQ(actual, expected) << digits;
    }
    // The 16-byte version, with random bytes after the text as in a line.
    std::string padded = "0x" + digits;
    for (int i = 0; i < 18; ++i) padded += static_cast<char>(random() >> 56);
    std::uint64_t fast = 0;
    EXPECT_EQ(parse_hex_padded(std::string_view(padded.data(), length + 2), fast), valid) << digits;
    if (valid) {
      EXPECT_EQ(fast, expected) << digits;
    }
  }
}

TEST(LineParser, PythonFramesAreKeptMixedWithNativeOnes) {
  Decoder d;
  const std::string stack =
      R"({"ev":"stack","id":4,"frames":[{"ip":"0x10","fn":"device_alloc","module":"/bin/app","off":"0x10"},)"
      R"({"py":true,"fn":"Trainer.train_step","file":"/work/train.py","line":42},)"
      R"({"ip":"0x20","fn":null,"module":"/lib/libpython3.12.so","off":"0x20"},)"
      R"({"py":true,"fn":"<module>","file":"/work/train.py","line":null}]})";
  ASSERT_EQ(verdict(d.parse(stack)), "ok");
  const std::vector<StackFrame>& f = d.event.frames;
  ASSERT_EQ(f.size(), 4u);
  EXPECT_FALSE(f[0].py);
  EXPECT_EQ(f[0].ip, 0x10u);
  EXPECT_TRUE(f[1].py);
  EXPECT_EQ(f[1].fn, "Trainer.train_step");
  EXPECT_TRUE(f[1].has_fn);
  EXPECT_EQ(f[1].file, "/work/train.py");
  EXPECT_EQ(f[1].line, 42u);
  EXPECT_EQ(f[1].ip, 0u);
  EXPECT_TRUE(f[1].module.empty());
  EXPECT_FALSE(f[1].off);
  EXPECT_FALSE(f[2].py) << "a frame after a Python frame starts native again";
  EXPECT_TRUE(f[3].py);
  EXPECT_FALSE(f[3].line) << "line null: unknown";
  // Only a Python frame may go without an address; `py` is a boolean.
  EXPECT_EQ(verdict(d.parse(R"({"ev":"stack","id":5,"frames":[{"py":false,"fn":"f","file":"a.py","line":1}]})")),
            "field 'frames' has the wrong type or value");
  EXPECT_EQ(verdict(d.parse(R"({"ev":"stack","id":5,"frames":[{"fn":"f","file":"a.py","line":1}]})")),
            "field 'frames' has the wrong type or value");
  EXPECT_EQ(verdict(d.parse(R"({"ev":"stack","id":5,"frames":[{"py":1,"fn":"f","file":"a.py","line":1}]})")),
            "field 'frames' has the wrong type or value");
  EXPECT_EQ(verdict(d.parse(R"({"ev":"stack","id":5,"frames":[{"py":"true","fn":"f","file":"a.py"}]})")),
            "field 'frames' has the wrong type or value");
  // The same decoder, reused: a native frame in the slot a Python one held is native.
  ASSERT_EQ(verdict(d.parse(R"({"ev":"stack","id":6,"frames":[{"ip":"0x1"},{"ip":"0x2"}]})")), "ok");
  EXPECT_FALSE(d.event.frames[1].py);
}

}  // namespace
}  // namespace cumemtrace::analyzer::detail
