// The restricted pickle reader: the plain-data subset is read exactly, every
// opcode that loads code is refused, and malformed or hostile input ends in a
// PickleError, never a crash or unbounded memory.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "pickle_builder.h"
#include "test_support.h"
#include "torch/pickle_reader.h"

namespace cumemtrace::analyzer::pickle {
namespace {

using cumemtrace::testing::PickleDict;
using cumemtrace::testing::PickleList;
using cumemtrace::testing::PickleValue;
using cumemtrace::testing::to_pickle;
using namespace cumemtrace::testing::pickle_bytes;

std::string error_of(const std::string& bytes, const Limits& limits = {}) {
  try {
    Document::parse(bytes, limits);
  } catch (const PickleError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TorchPickle, ReadsEveryPlainType) {
  const std::string bytes = to_pickle(PickleDict{
      {"none", PickleValue()},
      {"yes", true},
      {"no", false},
      {"small", 7},
      {"negative", -123456},
      {"address", std::int64_t{0x7f3a00200000}},
      {"most_negative", std::int64_t{INT64_MIN}},
      {"largest", std::int64_t{INT64_MAX}},
      {"half", 0.5},
      {"name", "train_step(Model&) \xc3\xa9"},
      {"list", PickleList{1, "two", PickleList{}}},
      {"pair", PickleValue::tuple({0, 0})},
  });
  const Document doc = Document::parse(bytes);
  const Value root = doc.root();
  ASSERT_EQ(root.type(), Type::dict);
  EXPECT_EQ(root.size(), 12u);
  EXPECT_EQ(root.get("none")->type(), Type::none);
  EXPECT_EQ(root.get("yes")->as_bool(), true);
  EXPECT_EQ(root.get("no")->as_bool(), false);
  EXPECT_EQ(root.get("no")->as_int(), std::nullopt) << "a bool is not an int here";
  EXPECT_EQ(root.get("small")->as_int(), 7);
  EXPECT_EQ(root.get("negative")->as_int(), -123456);
  EXPECT_EQ(root.get("address")->as_int(), 0x7f3a00200000);
  EXPECT_EQ(root.get("most_negative")->as_int(), INT64_MIN);
  EXPECT_EQ(root.get("largest")->as_int(), INT64_MAX);
  EXPECT_EQ(root.get("half")->as_float(), 0.5);
  EXPECT_EQ(root.get("name")->as_string(), "train_step(Model&) \xc3\xa9");
  const Value list = *root.get("list");
  ASSERT_EQ(list.type(), Type::list);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list.item(0).as_int(), 1);
  EXPECT_EQ(list.item(1).as_string(), "two");
  EXPECT_EQ(list.item(2).size(), 0u);
  EXPECT_EQ(root.get("pair")->type(), Type::tuple);
  EXPECT_EQ(root.get("missing"), std::nullopt);
  EXPECT_EQ(root.key(0).as_string(), "none");
}

TEST(TorchPickle, ReadsProtocolFourOpcodesWithFramesAndMemo) {
  // What pickle.dumps({"a": [b"xy", "s", "s"]}, protocol=4) looks like, with
  // the second "s" a memo reference (BINGET) to the first.
  std::string body = "}\x94(\x8c\x01" "a\x94]\x94(C\x02xy\x94\x8c\x01s\x94h\x04" "e" "u.";
  const std::string bytes = "\x80\x04\x95" + le(body.size(), 8) + body;
  const Document doc = Document::parse(bytes);
  const Value a = *doc.root().get("a");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a.item(0).as_bytes(), "xy");
  EXPECT_EQ(a.item(1).as_string(), "s");
  EXPECT_EQ(a.item(2).id(), a.item(1).id()) << "a memo reference shares the value";
}

TEST(TorchPickle, ReadsEveryIntegerEncoding) {
  auto one = [](const std::string& opcode_and_arg) {
    return Document::parse("\x80\x02" + opcode_and_arg + ".").root().as_int();
  };
  EXPECT_EQ(one("K\xff"), 255);
  EXPECT_EQ(one("M\xff\xff"), 65535);
  EXPECT_EQ(one("J\xff\xff\xff\xff"), -1);
  EXPECT_EQ(one(std::string("\x8a\x00", 2)), 0);
  EXPECT_EQ(one("\x8a\x01\x80"), -128);
  EXPECT_EQ(one(std::string("\x8a\x02\x80\x00", 4)), 128);
  // 2**63 - 1 written with a redundant sign byte, and -2**63 with one.
  EXPECT_EQ(one(std::string("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\x00", 11)), INT64_MAX);
  EXPECT_EQ(one(std::string("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xff", 11)), INT64_MIN);
  EXPECT_EQ(one(std::string("\x8b\x02\x00\x00\x00\x34\x12", 7)), 0x1234);
  EXPECT_EQ(one(integer(0x7f3a00200000)), 0x7f3a00200000);
}

TEST(TorchPickle, RefusesIntegersWiderThan64Bits) {
  // 2**64 - 1 and -2**63 - 1.
  EXPECT_NE(error_of(std::string("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00.", 14)).find("wider than 64 bits"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff.", 14)).find("wider than 64 bits"),
            std::string::npos);
}

// The classic exploit: c__builtin__\neval\n (GLOBAL), then REDUCE calls it.
TEST(TorchPickle, RefusesGlobalAndReduce) {
  const std::string exploit = "\x80\x02" "cbuiltins\nexec\n(X\x0b\x00\x00\x00print('hi!')tR.";
  const std::string message = error_of(exploit);
  EXPECT_EQ(message, "offset 2: refused pickle opcode GLOBAL: it loads or calls code, and a memory snapshot "
                     "holds only plain data");
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
}

TEST(TorchPickle, RefusesEveryCodeOpcodeByName) {
  const std::pair<std::string, const char*> cases[] = {
      {"\x8c\x01" "a\x8c\x01" "b\x93", "STACK_GLOBAL"},
      {"NNR", "REDUCE"},
      {"]Nb", "BUILD"},
      {"(imod\nname\n", "INST"},
      {"(No", "OBJ"},
      {"N)\x81", "NEWOBJ"},
      {"N)}\x92", "NEWOBJ_EX"},
      {"P1\n", "PERSID"},
      {"NQ", "BINPERSID"},
      {"\x82\x01", "EXT1"},
      {std::string("\x83\x01\x00", 3), "EXT2"},
      {std::string("\x84\x01\x00\x00\x00", 5), "EXT4"},
  };
  for (const auto& [body, name] : cases) {
    const std::string message = error_of("\x80\x02" + body + ".");
    EXPECT_NE(message.find(std::string("refused pickle opcode ") + name + ":"), std::string::npos)
        << name << ": " << message;
  }
}

TEST(TorchPickle, RefusesOpcodesOutsideTheSubset) {
  EXPECT_NE(error_of("\x80\x04\x8f.").find("unsupported pickle opcode EMPTY_SET"), std::string::npos);
  EXPECT_NE(error_of("I42\n.").find("unsupported pickle opcode INT"), std::string::npos);
  EXPECT_NE(error_of("\x80\x05\x97.").find("unsupported pickle opcode NEXT_BUFFER"), std::string::npos);
  EXPECT_NE(error_of("\x80\x06N.").find("protocol 6"), std::string::npos);
  EXPECT_NE(error_of("{\"ev\":\"header\"}").find("is not a pickle opcode"), std::string::npos);
}

TEST(TorchPickle, EveryTruncationIsAnErrorNotACrash) {
  const std::string whole = to_pickle(PickleDict{{"segments", PickleList{PickleDict{{"address", 1}}}},
                                                 {"device_traces", PickleList{PickleList{"x", 1.5, -7}}}});
  ASSERT_NO_THROW(Document::parse(whole));
  for (std::size_t n = 0; n < whole.size(); ++n) {
    EXPECT_THROW(Document::parse(whole.substr(0, n)), PickleError) << "cut at " << n;
  }
  EXPECT_NE(error_of(whole.substr(0, 10)).find("truncated"), std::string::npos);
}

TEST(TorchPickle, HugeLengthsAreCheckedBeforeAnyAllocation) {
  const std::string cases[] = {
      "\x80\x04\x8d" + le(std::uint64_t{1} << 62, 8) + "abc",  // BINUNICODE8
      "\x80\x04\x8e" + le(~std::uint64_t{0}, 8),                // BINBYTES8
      "\x80\x04\x96" + le(~std::uint64_t{0} - 3, 8),            // BYTEARRAY8
      "\x80\x02X" + le(0xffffffffu, 4) + "abc",                 // BINUNICODE
      "\x80\x02\x8b" + le(0x7fffffffu, 4) + "\x01",             // LONG4
      "\x80\x04\x95" + le(~std::uint64_t{0}, 8) + "N.",         // FRAME
  };
  for (const std::string& bytes : cases) {
    EXPECT_NE(error_of(bytes).find("truncated"), std::string::npos) << error_of(bytes);
  }
  EXPECT_NE(error_of("\x80\x02\x8b" + le(0x80000000u, 4)).find("negative length"), std::string::npos);
}

TEST(TorchPickle, DeepNestingStopsAtTheLimit) {
  // 100000 nested lists, each opened with a MARK: [[[[...]]]]
  std::string bytes = "\x80\x02";
  for (int i = 0; i < 100000; ++i) bytes += "](";
  EXPECT_NE(error_of(bytes).find("nesting deeper than 1024 levels"), std::string::npos);

  // Without MARKs the stack itself is bounded.
  Limits small;
  small.max_stack = 1000;
  EXPECT_NE(error_of("\x80\x02" + std::string(5000, 'N') + ".", small).find("stack grows past 1000"),
            std::string::npos);

  // Legitimate nesting within the limit reads.
  std::string nested = "\x80\x02";
  for (int i = 0; i < 500; ++i) nested += "](";
  nested += "K\x01";
  for (int i = 0; i < 500; ++i) nested += "e";
  nested += ".";
  const Document doc = Document::parse(nested);
  Value v = doc.root();
  for (int i = 0; i < 499; ++i) {
    ASSERT_EQ(v.size(), 1u);
    v = v.item(0);
  }
  EXPECT_EQ(v.item(0).as_int(), 1);
}

TEST(TorchPickle, ValueCountIsBounded) {
  Limits small;
  small.max_values = 100;
  EXPECT_NE(error_of("\x80\x02](" + std::string(200, 'N') + "e.", small).find("more than 100 values"),
            std::string::npos);
}

TEST(TorchPickle, MemoryIsBoundedWhateverTheOpcodes) {
  Limits small;
  small.max_memory_bytes = 1 << 20;
  // One-byte opcodes that each make a memo entry, an empty list, or a list
  // entry (DUP + APPENDS).
  EXPECT_NE(error_of("\x80\x04N" + std::string(100000, '\x94') + ".", small).find("more than 1 MiB of memory"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02" + std::string(100000, ']') + ".", small).find("more than 1 MiB of memory"),
            std::string::npos);
  std::string dups = "\x80\x02]";
  for (int i = 0; i < 1000; ++i) dups += "(N" + std::string(899, '2') + "e";
  dups += ".";
  EXPECT_NE(error_of(dups, small).find("more than 1 MiB of memory"), std::string::npos);
  // A real snapshot's worth is far below the default.
  EXPECT_NO_THROW(Document::parse("\x80\x04N" + std::string(1000, '\x94') + "."));
}

TEST(TorchPickle, MemoReferencesShareInsteadOfCopying) {
  // A "billion laughs": each list holds its predecessor ten times. 30 levels
  // describe 10**30 leaves; shared, they are 30 lists of 10 references.
  std::string bytes = "\x80\x02N\x94";  // memo[0] = None
  for (int level = 1; level <= 30; ++level) {
    bytes += "](";
    for (int i = 0; i < 10; ++i) bytes += "j" + le(static_cast<std::uint32_t>(level - 1), 4);
    bytes += "e\x94";  // memo[level] = this list
  }
  bytes += ".";
  const Document doc = Document::parse(bytes);
  EXPECT_LT(doc.value_count(), 40u);
  EXPECT_EQ(doc.root().size(), 10u);
}

TEST(TorchPickle, ACycleReadsAndCostsNothing) {
  // l = []; l.append(l)
  const Document doc = Document::parse(std::string("\x80\x02]\x94h\x00" "a.", 8));
  const Value root = doc.root();
  ASSERT_EQ(root.size(), 1u);
  EXPECT_EQ(root.item(0).id(), root.id());
  EXPECT_EQ(root.item(0).item(0).item(0).id(), root.id());
}

TEST(TorchPickle, StackAndMemoMisuseIsAnError) {
  EXPECT_NE(error_of("\x80\x02" "a.").find("stack underflow"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02}K\x01" "a.").find("APPEND on a dict, not a list"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02}(K\x01u.").find("odd number"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02]K\x01K\x02s.").find("SETITEM on a list, not a dict"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02h\x05.").find("memo index 5 was never stored"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02" "e.").find("no MARK"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02(.").find("STOP with an empty stack"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02N").find("without a STOP"), std::string::npos);
  EXPECT_NE(error_of("").find("without a STOP"), std::string::npos);
  // MARK hides what is below it, as in Python's unpickler.
  EXPECT_NE(error_of("\x80\x02](K\x01\x30\x30.").find("stack underflow"), std::string::npos);
}

TEST(TorchPickle, InputSizeIsBounded) {
  Limits small;
  small.max_input_bytes = 10;
  EXPECT_NE(error_of(std::string(11, 'N'), small).find("over the limit of 10"), std::string::npos);
}

TEST(TorchPickle, LoadFileNamesThePath) {
  cumemtrace::testing::TempDir dir;
  try {
    Document::load_file(dir / "absent.pickle");
    FAIL() << "no error";
  } catch (const PickleError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "absent.pickle: cannot open", 0), 0u) << e.what();
  }
  cumemtrace::testing::write_file(dir / "evil.pickle", "\x80\x02" "cos\nsystem\n.");
  try {
    Document::load_file(dir / "evil.pickle");
    FAIL() << "no error";
  } catch (const PickleError& e) {
    EXPECT_NE(std::string(e.what()).find("evil.pickle: offset 2: refused pickle opcode GLOBAL"), std::string::npos);
  }
  // A file that is not a pickle at all (here a trace) is named as such.
  cumemtrace::testing::write_file(dir / "trace.jsonl", "{\"ev\":\"header\"}\n");
  try {
    Document::load_file(dir / "trace.jsonl");
    FAIL() << "no error";
  } catch (const PickleError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "trace.jsonl: not a PyTorch memory snapshot: ", 0), 0u) << e.what();
  }
}

// Random corruption of a realistic pickle: every outcome is a document or a
// PickleError.
TEST(TorchPickle, RandomCorruptionNeverCrashes) {
  PickleList events;
  for (int i = 0; i < 20; ++i) {
    events.push_back(PickleDict{{"action", "alloc"}, {"addr", std::int64_t{0x7f0000000000} + i * 512},
                                {"size", 512}, {"frames", PickleList{PickleDict{{"name", "f"}, {"line", i}}}}});
  }
  const std::string whole = to_pickle(PickleDict{{"device_traces", PickleList{events}}});
  std::mt19937 rng(12345);
  int parsed = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = whole;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    try {
      const Document doc = Document::parse(bytes);
      (void)doc.root().type();
      ++parsed;
    } catch (const PickleError&) {
      ++refused;
    }
  }
  EXPECT_EQ(parsed + refused, 3000);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace cumemtrace::analyzer::pickle
