#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "output/output_template.h"
#include "output/output_path.h"

using namespace cumemtrace::contract;

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

TEST_F(TraceFile, WorldWritableDirectoryWithoutStickyBitIsRefused) {
  const std::string open_dir = dir_ + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);  // past the umask
  const int refused = create_trace_file(open_dir + "/t.jsonl");
  EXPECT_LT(refused, 0);
  EXPECT_FALSE(std::filesystem::exists(open_dir + "/t.jsonl"));
  EXPECT_NE(std::string(trace_file_error(refused)).find("writable by every user and has no sticky bit"),
            std::string::npos);
  ASSERT_EQ(chmod(open_dir.c_str(), 01777), 0);  // as /tmp
  const int fd = create_trace_file(open_dir + "/t.jsonl");
  EXPECT_GE(fd, 0);
  close(fd);
  EXPECT_STREQ(trace_file_error(-ENOENT), std::strerror(ENOENT));
}

TEST(TraceDirectory, OnlyDirectoriesTheUserControlsAreWrittenTo) {
  const uid_t me = 1000, other = 1001;
  const auto dir = [](uid_t owner, mode_t mode) {
    struct stat st{};
    st.st_uid = owner;
    st.st_mode = S_IFDIR | mode;
    return st;
  };
  EXPECT_EQ(directory_refusal(dir(me, 0700), me), 0);
  EXPECT_EQ(directory_refusal(dir(me, 0775), me), 0) << "the user's own group directory";
  EXPECT_EQ(directory_refusal(dir(0, 01777), me), 0) << "/tmp";
  EXPECT_EQ(directory_refusal(dir(0, 0755), 0), 0);
  EXPECT_EQ(directory_refusal(dir(other, 0755), me), 0) << "only its owner may change it, and it let us in";
  EXPECT_EQ(directory_refusal(dir(other, 01775), me), 0) << "sticky: nobody replaces our file";
  EXPECT_LT(directory_refusal(dir(me, 0777), me), 0);
  EXPECT_LT(directory_refusal(dir(0, 0777), me), 0);
  EXPECT_LT(directory_refusal(dir(other, 0775), me), 0) << "another user's shared directory";
  EXPECT_LT(directory_refusal(dir(other, 0757), 0), 0) << "root writing where others may swap entries";
  EXPECT_NE(directory_refusal(dir(me, 0777), me), directory_refusal(dir(other, 0775), me)) << "two reasons";
}

TEST(TraceFileName, NumberedNameGoesBeforeTheTraceExtension) {
  EXPECT_EQ(numbered_trace_path("/r/t.123.jsonl", 1), "/r/t.123.1.jsonl");
  EXPECT_EQ(numbered_trace_path("t.123.jsonl.zst", 2), "t.123.2.jsonl.zst");
  EXPECT_EQ(numbered_trace_path("/r.d/t.123.zst", 3), "/r.d/t.123.3.zst");
  EXPECT_EQ(numbered_trace_path("/r.jsonl/t", 4), "/r.jsonl/t.4");
  EXPECT_EQ(numbered_trace_path(".jsonl", 5), ".jsonl.5");
}

TEST_F(TraceFile, NameTakenByThisPidGetsTheNextNumberOnlyWhenAsked) {
  // A process that exec'd keeps its pid: its new program's trace must not
  // fail on the file the old program wrote.
  std::string path = dir_ + "/t.42.jsonl";
  ASSERT_GE(create_trace_file(path), 0);
  std::string again = path;
  EXPECT_EQ(create_trace_file(again, /*numbered_if_taken=*/false), -EEXIST);
  EXPECT_EQ(again, path);
  for (const char* expected : {"/t.42.1.jsonl", "/t.42.2.jsonl"}) {
    std::string next = path;
    const int fd = create_trace_file(next, /*numbered_if_taken=*/true);
    ASSERT_GE(fd, 0);
    close(fd);
    EXPECT_EQ(next, dir_ + expected);
  }
}

}  // namespace
