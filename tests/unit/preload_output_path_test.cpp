#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cumemtrace/output_template.h"
#include "output_path.h"

using namespace cumemtrace::preload;
using namespace cumemtrace::format;

namespace {

TemplateValues values() {
  TemplateValues v;
  v.pid = 4242;
  v.host = "node7";
  v.rank = "3";
  v.start_unix_ns = 1763740000123456789ull;  // 2025-11-21T15:46:40Z
  return v;
}

TEST(OutputTemplate, ExpandsEveryPlaceholder) {
  EXPECT_EQ(expand_output_template("cumemtrace.%h.%p.jsonl", values()), "cumemtrace.node7.4242.jsonl");
  EXPECT_EQ(expand_output_template("/r/rank%r-%p.jsonl.zst", values()), "/r/rank3-4242.jsonl.zst");
  EXPECT_EQ(expand_output_template("t%t", values()), "t20251121T154640Z");
  EXPECT_EQ(expand_output_template("100%%-%x-%", values()), "100%-%x-%");
}

TEST(OutputTemplate, StartTimeUnknownOutsideTheTracedProcess) {
  TemplateValues v = values();
  v.start_unix_ns.reset();
  EXPECT_EQ(expand_output_template("t%t.%p", v), std::nullopt);
  EXPECT_EQ(expand_output_template("t%%t.%p", v), "t%t.4242");
}

TEST(OutputTemplate, HostAndRankCannotEscapeTheDirectory) {
  TemplateValues v = values();
  v.host = "../../etc/passwd";
  v.rank = "a/b";
  EXPECT_EQ(expand_output_template("%h-%r", v), ".._.._etc_passwd-a_b");
}

TEST(OutputTemplate, RankFromEnvironment) {
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(rank_from_environment(), "0");
  setenv("LOCAL_RANK", "5", 1);
  EXPECT_EQ(rank_from_environment(), "5");
  setenv("RANK", "12", 1);
  EXPECT_EQ(rank_from_environment(), "12");
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
}

class TraceFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cumemtrace-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(TraceFile, CreatedExclusivelyWithMode0600) {
  const std::string path = dir_ + "/t.jsonl";
  const int fd = create_trace_file(path);
  ASSERT_GE(fd, 0);
  close(fd);
  struct stat st{};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(create_trace_file(path), -EEXIST);  // never overwrites another run's trace
}

TEST_F(TraceFile, NeverFollowsASymlink) {
  const std::string target = dir_ + "/victim";
  const std::string link = dir_ + "/t.jsonl";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_LT(create_trace_file(link), 0);
  EXPECT_FALSE(std::filesystem::exists(target));
}

TEST_F(TraceFile, MissingDirectoryIsAnError) {
  EXPECT_EQ(create_trace_file(dir_ + "/no/such/dir/t.jsonl"), -ENOENT);
}

}  // namespace
