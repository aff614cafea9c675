// Range nesting for `mark` pops, and NVTX's wide strings as UTF-8.
#include <gtest/gtest.h>

#include "markers/markers.h"

using cumemtrace::preload::RangeStack;
using cumemtrace::preload::utf8_from_wide;

namespace {

TEST(RangeStack, PopsNameTheRangeTheyCloseWithItsLevel) {
  RangeStack ranges;
  EXPECT_EQ(ranges.push(nullptr, "epoch 1"), 0);
  EXPECT_EQ(ranges.push(nullptr, "step"), 1);
  auto closed = ranges.pop(nullptr);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->name, "step");
  EXPECT_EQ(closed->level, 1);
  closed = ranges.pop(nullptr);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->name, "epoch 1");
  EXPECT_EQ(closed->level, 0);
  EXPECT_FALSE(ranges.pop(nullptr));
}

TEST(RangeStack, DomainsNestSeparately) {
  RangeStack ranges;
  int domain_a = 0, domain_b = 0;
  EXPECT_EQ(ranges.push(&domain_a, "a0"), 0);
  EXPECT_EQ(ranges.push(nullptr, "default0"), 0);
  EXPECT_EQ(ranges.push(&domain_b, "b0"), 0);
  EXPECT_EQ(ranges.push(&domain_a, "a1"), 1);
  EXPECT_FALSE(ranges.pop(reinterpret_cast<const void*>(0x1)));  // a domain with no range
  auto closed = ranges.pop(&domain_b);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->name, "b0");
  closed = ranges.pop(nullptr);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->name, "default0");
  closed = ranges.pop(&domain_a);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->name, "a1");
  EXPECT_EQ(closed->level, 1);
  closed = ranges.pop(&domain_a);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->name, "a0");
  EXPECT_EQ(closed->level, 0);
}

TEST(Utf8FromWide, EncodesEveryPlaneAndReplacesInvalidUnits) {
  EXPECT_EQ(utf8_from_wide(nullptr), "");
  EXPECT_EQ(utf8_from_wide(L""), "");
  EXPECT_EQ(utf8_from_wide(L"epoch 3"), "epoch 3");
  EXPECT_EQ(utf8_from_wide(L"\u00fc\u20ac\U0001F600"), "\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80");
  const wchar_t invalid[] = {static_cast<wchar_t>(0xd800), static_cast<wchar_t>(0x110000), L'x', 0};
  EXPECT_EQ(utf8_from_wide(invalid), "\xef\xbf\xbd\xef\xbf\xbdx");
}

}  // namespace
