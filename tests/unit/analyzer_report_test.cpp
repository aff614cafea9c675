// The text and JSON reports built from a read trace.
#include <gtest/gtest.h>

#include "analyzer_test_support.h"
#include "cumemtrace/analyzer/report.h"

namespace cumemtrace::analyzer {
namespace {

using testing::TempDir;

struct Rendered {
  std::string text;
  nlohmann::ordered_json json;
};

Rendered render(const std::string& path) {
  TraceReader reader(path);
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  return {render_text_report(reader, analysis), render_json_report(reader, analysis)};
}

TEST(Report, JsonHasTheDocumentedKeysWithExactValues) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"),
                      testing::join_lines({testing::header_line(),
                                           R"J({"ev":"stack","id":3,"frames":[{"ip":"0x10","fn":"leaky()","module":"/bin/app","off":"0x10"}]})J",
                                           testing::alloc_line(1000, "0x100", 3000, 0, 3),
                                           testing::alloc_line(2000, "0x200", 1 << 20, 1, 0),
                                           testing::free_line(3000, "0x200", 1 << 20, 1),
                                           testing::end_line(4000)}));
  const nlohmann::ordered_json j = render(tmp.path("t.jsonl")).json;
  EXPECT_EQ(j["peak_allocated"], 3000 + (1 << 20));
  EXPECT_EQ(j["peak_allocated_t"], 2000);
  EXPECT_EQ(j["peak_reserved"], 0);
  EXPECT_TRUE(j["peak_reserved_t"].is_null());
  EXPECT_EQ(j["allocs"], 2);
  EXPECT_EQ(j["frees"], 1);
  EXPECT_EQ(j["leaked_bytes"], 3000);
  EXPECT_EQ(j["leaked_count"], 1);
  EXPECT_EQ(j["truncated"], false);
  EXPECT_EQ(j["bad_lines"], 0);
  EXPECT_EQ(j["devices"]["1"]["peak_allocated"], 1 << 20);
  EXPECT_EQ(j["devices"]["0"]["leaked_bytes"], 3000);
  ASSERT_EQ(j["leaks"].size(), 1u);
  EXPECT_EQ(j["leaks"][0]["stack"], 3);
  EXPECT_EQ(j["leaks"][0]["examples"][0]["ptr"], "0x100");
  EXPECT_EQ(j["leaks"][0]["frames"][0]["fn"], "leaky()");
  EXPECT_EQ(j["program"]["argv"][1], "train.py");
}

TEST(Report, TextShowsPeaksLeaksAndTruncation) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"),
                      testing::join_lines({testing::header_line(), testing::alloc_line(1500000, "0x100", 1572864),
                                           "not json"}));
  const std::string text = render(tmp.path("t.jsonl")).text;
  EXPECT_NE(text.find("peak allocated:  1.50 MiB (1572864 bytes) at 0.001500 s"), std::string::npos) << text;
  EXPECT_NE(text.find("program:   python3 train.py"), std::string::npos) << text;
  EXPECT_NE(text.find("pool mode: caching"), std::string::npos) << text;
  EXPECT_NE(text.find("1.50 MiB (1572864 bytes) in 1 allocation, no stack captured"), std::string::npos) << text;
  EXPECT_NE(text.find("Bad lines: 1 (skipped)\n  line 3: invalid JSON"), std::string::npos) << text;
  EXPECT_NE(text.find("TRUNCATED: the trace was cut short after line 3"), std::string::npos) << text;
}

TEST(Report, CompleteTraceIsNotMarkedTruncated) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), testing::join_lines({testing::header_line(), testing::end_line(1)}));
  const Rendered r = render(tmp.path("t.jsonl"));
  EXPECT_EQ(r.text.find("TRUNCATED"), std::string::npos);
  EXPECT_NE(r.text.find("Live at end: nothing"), std::string::npos);
  EXPECT_TRUE(r.json["truncated_after_line"].is_null());
}

}  // namespace
}  // namespace cumemtrace::analyzer
