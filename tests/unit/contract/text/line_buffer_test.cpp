#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "text/line_buffer.h"

using cumemtrace::contract::LineBuffer;

namespace {

nlohmann::json parse_object(const LineBuffer& b) {
  return nlohmann::json::parse(std::string("{\"x\":0") + std::string(b.view()) + "}");
}

TEST(LineBuffer, WritesIntegersHexAndStrings) {
  LineBuffer b;
  b.field("size", 1000000).field_i("neg", -42).field_hex("ptr", 0x7f3a00200000ull).field_str("api", "cudaMalloc");
  EXPECT_EQ(b.view(), R"(,"size":1000000,"neg":-42,"ptr":"0x7f3a00200000","api":"cudaMalloc")");
}

TEST(LineBuffer, ExtremeIntegers) {
  LineBuffer b;
  b.field("max", UINT64_MAX).field_i("min", INT64_MIN).field("zero", 0).field_hex("h0", 0);
  const auto j = parse_object(b);
  EXPECT_EQ(j["max"].get<std::uint64_t>(), UINT64_MAX);
  EXPECT_EQ(j["min"].get<std::int64_t>(), INT64_MIN);
  EXPECT_EQ(j["zero"].get<int>(), 0);
  EXPECT_EQ(j["h0"].get<std::string>(), "0x0");
}

TEST(LineBuffer, EscapesQuotesBackslashesAndControls) {
  LineBuffer b;
  const std::string nasty = std::string("a\"b\\c\n\t") + '\x01' + "</script>";
  b.field_str("s", nasty);
  EXPECT_EQ(parse_object(b)["s"].get<std::string>(), nasty);
}

TEST(LineBuffer, KeepsValidUtf8AndReplacesInvalidBytes) {
  LineBuffer b;
  b.field_str("ok", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80");
  b.field_str("bad", "a\xff" "b\xc3" "c\xed\xa0\x80" "\xc0\xaf" "d");
  const auto j = parse_object(b);  // throws if the line is not valid UTF-8 JSON
  EXPECT_EQ(j["ok"].get<std::string>(), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80");
  const std::string bad = j["bad"].get<std::string>();
  EXPECT_EQ(bad.front(), 'a');
  EXPECT_EQ(bad.back(), 'd');
  EXPECT_NE(bad.find("\xef\xbf\xbd"), std::string::npos);
  EXPECT_EQ(bad.find('\xff'), std::string::npos);
}

TEST(LineBuffer, SpillsLongLinesToTheHeapIntact) {
  LineBuffer b;
  std::string longer(3 * LineBuffer::kInline, 'x');
  b.field("before", 1).field_str("long", longer).field("after", 2);
  const auto j = parse_object(b);
  EXPECT_EQ(j["long"].get<std::string>(), longer);
  EXPECT_EQ(j["before"].get<int>(), 1);
  EXPECT_EQ(j["after"].get<int>(), 2);
}

}  // namespace
