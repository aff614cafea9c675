// The `cumemtrace` binary as users run it: exit codes, messages, `report`
// output files, and `run` launching a program with a stand-in preload.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "analyzer_test_support.h"

namespace cumemtrace::analyzer {
namespace {

using testing::CommandResult;
using testing::EnvChanges;
using testing::TempDir;

using testing::cli;

// `run` with the empty stand-in library, so these tests need no libcumemtrace.so.
CommandResult cli_run(std::vector<std::string> command, EnvChanges env = {}) {
  env.emplace_back("CUMEMTRACE_LIBRARY", testing::empty_preload(1));
  std::vector<std::string> args{"run", "--"};
  args.insert(args.end(), command.begin(), command.end());
  return cli(args, env);
}

// One line on stderr, "cumemtrace: ..." (CLI11's usage errors excepted).
void expect_one_error_line(const CommandResult& r) {
  EXPECT_EQ(r.err.rfind("cumemtrace: ", 0), 0u) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

std::string small_trace() {
  return testing::join_lines({testing::header_line(), testing::alloc_line(10, "0x100", 2048),
                              testing::end_line(20)});
}

TEST(Cli, HelpAndVersionExitZero) {
  CommandResult help = cli({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("report"), std::string::npos);
  EXPECT_EQ(cli({"report", "--help"}).exit_code, 0);
  EXPECT_EQ(cli({"--version"}).exit_code, 0);
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(cli({}).exit_code, 2);
  EXPECT_EQ(cli({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(cli({"report"}).exit_code, 2);
  CommandResult bad_format = cli({"report", "x.jsonl", "--format", "xml"});
  EXPECT_EQ(bad_format.exit_code, 2);
  EXPECT_NE(bad_format.err.find("xml"), std::string::npos) << bad_format.err;
  EXPECT_EQ(cli({"run"}).exit_code, 2);
  EXPECT_EQ(cli({"run", "--"}).exit_code, 2);
}

TEST(Cli, ReportOfUnreadableInputExitsTwoWithOneLine) {
  TempDir tmp;
  CommandResult missing = cli({"report", tmp.path("nope.jsonl")});
  EXPECT_EQ(missing.exit_code, 2);
  expect_one_error_line(missing);
  EXPECT_NE(missing.err.find("nope.jsonl: cannot open"), std::string::npos);

  testing::write_file(tmp.path("other.json"), "{\"a\":1}\n");
  CommandResult other = cli({"report", tmp.path("other.json")});
  EXPECT_EQ(other.exit_code, 2);
  expect_one_error_line(other);
  EXPECT_NE(other.err.find("not a cumemtrace trace"), std::string::npos);

  testing::write_file(tmp.path("v2.jsonl"), testing::header_line(2) + "\n");
  CommandResult newer = cli({"report", tmp.path("v2.jsonl")});
  EXPECT_EQ(newer.exit_code, 2);
  EXPECT_EQ(newer.err, "cumemtrace: " + tmp.path("v2.jsonl") +
                           ": trace format version 2 is newer than this analyzer supports (1)\n");

  testing::write_file(tmp.path("bad.zst"), std::string("\x28\xb5\x2f\xfd", 4) + std::string(100, '\xee'));
  CommandResult bad_zstd = cli({"report", tmp.path("bad.zst")});
  EXPECT_EQ(bad_zstd.exit_code, 2);
  expect_one_error_line(bad_zstd);
  EXPECT_TRUE(bad_zstd.out.empty());
}

TEST(Cli, ReportWritesTextOrOneJsonObject) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), small_trace());
  CommandResult text = cli({"report", tmp.path("t.jsonl")});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("peak allocated:  2.00 KiB (2048 bytes) at 0.000000 s"), std::string::npos) << text.out;

  CommandResult json = cli({"report", "--format", "json", tmp.path("t.jsonl")});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);  // throws unless exactly one JSON value
  EXPECT_EQ(j["peak_allocated"], 2048);
  EXPECT_EQ(j["leaked_count"], 1);
}

TEST(Cli, ReportToAFileIsAtomicAndFailsCleanly) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), small_trace());
  CommandResult to_file = cli({"report", tmp.path("t.jsonl"), "-o", tmp.path("report.txt")});
  EXPECT_EQ(to_file.exit_code, 0) << to_file.err;
  EXPECT_TRUE(to_file.out.empty());
  EXPECT_EQ(testing::read_file(tmp.path("report.txt")), cli({"report", tmp.path("t.jsonl")}).out);

  CommandResult no_dir = cli({"report", tmp.path("t.jsonl"), "-o", tmp.path("no/such/dir/r.txt")});
  EXPECT_EQ(no_dir.exit_code, 2);
  expect_one_error_line(no_dir);
  EXPECT_NE(no_dir.err.find("cannot write"), std::string::npos);

  if (::geteuid() != 0) {  // root writes anywhere
    const std::string locked = tmp.path("locked");
    ::mkdir(locked.c_str(), 0500);
    CommandResult denied = cli({"report", tmp.path("t.jsonl"), "-o", locked + "/r.txt"});
    EXPECT_EQ(denied.exit_code, 2);
    EXPECT_FALSE(testing::file_exists(locked + "/r.txt"));
  }
}

// `-o /dev/null` once renamed a regular file over /dev/null (as root, which
// may create files in /dev): the device was gone for every program on the
// machine. A FIFO stands in for the device here: written in place, it stays
// a FIFO and its reader gets the report; a symlink stays a symlink, and the
// file it names gets the report.
TEST(Cli, OutputToADeviceOrFifoIsWrittenInPlaceAndASymlinkIsKept) {
  TempDir tmp;
  testing::write_file(tmp.path("t.jsonl"), small_trace());
  const std::string expected = cli({"report", tmp.path("t.jsonl")}).out;
  const std::string expected_csv = cli({"export", tmp.path("t.jsonl"), "--format", "csv"}).out;
  ASSERT_FALSE(expected.empty());
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"report", tmp.path("t.jsonl")},  // write_output
        std::vector<std::string>{"export", tmp.path("t.jsonl"), "--format", "csv"}}) {  // write_streamed
    const std::string fifo = tmp.path("fifo");
    ::unlink(fifo.c_str());
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    // Both ends open before the command runs, so nothing blocks whatever it
    // does: were the FIFO replaced, the reader would just see end of file.
    const int read_end = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    const int held_open = ::open(fifo.c_str(), O_WRONLY);
    ASSERT_GE(read_end, 0);
    ASSERT_GE(held_open, 0);
    ::fcntl(read_end, F_SETFL, 0);
    std::string received;
    std::thread reader([&] {
      char buffer[4096];
      for (ssize_t n; (n = ::read(read_end, buffer, sizeof buffer)) > 0;) received.append(buffer, static_cast<std::size_t>(n));
    });
    std::vector<std::string> args = command;
    args.insert(args.end(), {"-o", fifo});
    CommandResult r = cli(args);
    ::close(held_open);
    reader.join();
    ::close(read_end);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(received, command[0] == "report" ? expected : expected_csv);
    struct stat st {};
    ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a file";

    const std::string target = tmp.path("target.txt");
    const std::string link = tmp.path("link.txt");
    testing::write_file(target, "old");
    ::unlink(link.c_str());
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
    args = command;
    args.insert(args.end(), {"-o", link});
    r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(::lstat(link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the symlink was replaced by a file";
    EXPECT_EQ(testing::read_file(target), command[0] == "report" ? expected : expected_csv);
  }
}

TEST(Cli, RunPropagatesTheProgramsExitStatus) {
  EXPECT_EQ(cli_run({"sh", "-c", "exit 7"}).exit_code, 7);
  EXPECT_EQ(cli_run({"true"}).exit_code, 0);
  CommandResult killed = cli_run({"sh", "-c", "kill -TERM $$"});
  EXPECT_TRUE(killed.exited);  // cumemtrace itself exits normally...
  EXPECT_EQ(killed.exit_code, 143);  // ...with 128 + SIGTERM
  CommandResult options = cli_run({"sh", "-c", "echo \"$0 $1\"", "--output", "x"});
  EXPECT_EQ(options.out, "--output x\n");  // options after the command belong to it
}

TEST(Cli, RunReportsACommandThatCannotStart) {
  CommandResult missing = cli_run({"cumemtrace-no-such-command-xyz"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_EQ(missing.err, "cumemtrace: cumemtrace-no-such-command-xyz: command not found\n");
  TempDir tmp;
  testing::write_file(tmp.path("not-executable"), "#!/bin/sh\n");
  CommandResult denied = cli_run({tmp.path("not-executable")});
  EXPECT_EQ(denied.exit_code, 126);  // no execute bit: even root cannot run it
  expect_one_error_line(denied);
}

TEST(Cli, RunWithoutItsLibraryExitsTwo) {
  CommandResult r = cli({"run", "--", "true"}, {{"CUMEMTRACE_LIBRARY", "/nonexistent/libcumemtrace.so"}});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_error_line(r);
  EXPECT_NE(r.err.find("/nonexistent/libcumemtrace.so"), std::string::npos);
}

TEST(Cli, RunPrependsTheLibraryToLdPreloadAndKeepsExistingEntries) {
  const std::string lib1 = testing::empty_preload(1);
  const std::string lib2 = testing::empty_preload(2);
  CommandResult alone = cli_run({"sh", "-c", "echo \"$LD_PRELOAD\""}, {{"LD_PRELOAD", std::nullopt}});
  EXPECT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(alone.out, lib1 + "\n");
  CommandResult both = cli_run({"sh", "-c", "echo \"$LD_PRELOAD\""}, {{"LD_PRELOAD", lib2}});
  EXPECT_EQ(both.out, lib1 + " " + lib2 + "\n");
}

TEST(Cli, RunPassesTheOutputTemplateAndSaysWhereTheTraceIs) {
  TempDir tmp;
  const std::string output_template = tmp.path("trace.%h.%p.jsonl");
  // The program stands in for the preload: it creates the file the template names.
  std::vector<std::string> args{"run", "--output", output_template, "--", "sh", "-c",
                                "echo \"$CUMEMTRACE_OUTPUT\"; touch \"" + tmp.path("trace.") + "$(hostname).$$.jsonl\""};
  CommandResult with_output = cli(args, {{"CUMEMTRACE_LIBRARY", testing::empty_preload(1)}});
  EXPECT_EQ(with_output.exit_code, 0) << with_output.err;
  EXPECT_EQ(with_output.out, output_template + "\n");
  EXPECT_EQ(with_output.err.rfind("cumemtrace: trace written to " + tmp.path("trace."), 0), 0u) << with_output.err;

  // %t cannot be expanded by `run`: it says nothing rather than guess.
  std::vector<std::string> timed{"run", "--output", tmp.path("trace.%t.jsonl"), "--", "true"};
  CommandResult quiet = cli(timed, {{"CUMEMTRACE_LIBRARY", testing::empty_preload(1)}});
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.err, "");
}

TEST(Cli, RunForwardsTerminationSignalsToTheProgram) {
  TempDir tmp;
  const std::string started = tmp.path("started");
  testing::RunningCommand running = testing::start_command(
      {testing::cli_path(), "run", "--", "sh", "-c", "touch \"" + started + "\"; exec sleep 30"},
      {{"CUMEMTRACE_LIBRARY", testing::empty_preload(1)}}, tmp);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!testing::file_exists(started) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(testing::file_exists(started));
  ::kill(running.pid, SIGTERM);
  CommandResult r = testing::wait_command(running);
  EXPECT_TRUE(r.exited);  // cumemtrace survived the signal and passed it on
  EXPECT_EQ(r.exit_code, 143);
}

}  // namespace
}  // namespace cumemtrace::analyzer
