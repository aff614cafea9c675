// `cumemtrace run` as a launcher should be: as if absent (issue 21, item 4).
// Every signal it can pass on reaches the program, job-control stops stop
// it too, a SIGKILL on it takes the program along, an output that cannot be
// created is refused before the program starts, and one line at the end
// says whether each trace is complete.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "integration_support.h"

using namespace cumemtrace::testing;
namespace fs = std::filesystem;

namespace {

const std::string kReporter = CUMEMTRACE_APPS_DIR "/signal_report";

using Clock = std::chrono::steady_clock;

// Every signal `run` must pass on, listed apart from the launcher's own list:
// all but SIGKILL/SIGSTOP (uncatchable), SIGCHLD (the launcher's own) and
// the faults of the launcher itself, and glibc's reserved 32 and 33.
std::vector<int> forwardable_signals() {
  const std::vector<int> kept = {SIGKILL, SIGSTOP, SIGCHLD, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
  std::vector<int> signals;
  for (int s = 1; s < 32; ++s) {
    if (std::find(kept.begin(), kept.end(), s) == kept.end()) signals.push_back(s);
  }
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) signals.push_back(s);
  return signals;
}

// Starts `argv` like start_command, in a process group of its own within
// our session: not orphaned (we, its parent, are in another group of the
// session), so a job-control stop stops it as it would under a shell.
RunningCommand start_in_own_group(const std::vector<std::string>& argv, const EnvChanges& env,
                                  const TempDir& scratch) {
  RunningCommand running;
  running.out_path = scratch / "launcher.out";
  running.err_path = scratch / "launcher.err";
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  running.pid = ::fork();
  if (running.pid == 0) {
    ::setpgid(0, 0);
    for (const auto& [name, value] : env) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
    ::dup2(::open(running.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDOUT_FILENO);
    ::dup2(::open(running.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDERR_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(running.pid, running.pid);  // either side may win the race; both ask the same
  return running;
}

std::size_t count_of(const std::string& text, const std::string& line) {
  std::size_t n = 0;
  for (std::size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1)) ++n;
  return n;
}

// Waits (at most 10 s) until `done`; false if it never came.
template <typename Done>
bool eventually(Done done) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return true;
}

// The state letter of /proc/PID/stat ('T': stopped), or '?' when gone.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

// A shell command that writes a header line for process PID (a shell
// word: "$$" is the program itself) into `file`, and `more` after it: the
// program stands in for the library, so any ending can be made on purpose.
std::string fake_trace_command(const std::string& file, const std::string& pid, const std::string& more) {
  return "printf '%s%s%s\\n%s' '{\"ev\":\"header\",\"format\":\"cumemtrace\",\"version\":1,\"pid\":' " + pid +
         " ',\"ppid\":1,\"host\":\"h\",\"exe\":\"/x\",\"argv\":[\"x\"],\"start_unix_ns\":1,\"pool\":\"caching\","
         "\"config\":{}}' '" + more + "' > " + file + "; ";
}

const std::string kEndWithDrops = R"({"ev":"end","t":5,"reason":"exit","live":0,"live_bytes":0,"dropped":7})" "\n";

long pid_line(const std::string& out) {
  const std::size_t at = out.find("pid ");
  return at == std::string::npos ? -1 : std::stol(out.substr(at + 4));
}

// One program run takes every signal, each sent to the launcher alone, in
// turn: a standard one with kill, a real-time one with sigqueue and a value.
TEST(RunSignals, EverySignalSentToTheLauncherReachesTheProgramOnce) {
  TempDir dir;
  const std::string trace = dir / "t.jsonl";
  const auto running = start_in_own_group({CUMEMTRACE_CLI, "run", "--output", trace, "--", kReporter},
                                          sim_environment(), dir);
  wait_for_ready(running);
  std::vector<int> missing;
  for (const int signal : forwardable_signals()) {
    if (signal == SIGTERM) continue;  // last: it ends the program
    std::string expected = "got " + std::to_string(signal);
    if (signal >= SIGRTMIN) {
      ::sigqueue(running.pid, signal, sigval{.sival_int = 1000 + signal});
      expected += " value " + std::to_string(1000 + signal);
    } else {
      ::kill(running.pid, signal);
    }
    if (!eventually([&] { return read_file(running.out_path).find(expected + "\n") != std::string::npos; })) {
      missing.push_back(signal);
      break;  // one is enough, and the launcher may be gone
    }
    if (signal == SIGTSTP || signal == SIGTTIN || signal == SIGTTOU) {
      // Passed on, then the launcher stops as the signal would have stopped
      // it, so a shell sees its job stop; SIGCONT continues both.
      EXPECT_TRUE(eventually([&] { return process_state(running.pid) == 'T'; })) << strsignal(signal);
      ::kill(running.pid, SIGCONT);
      EXPECT_TRUE(eventually([&] { return process_state(running.pid) != 'T'; })) << strsignal(signal);
    }
  }
  ::kill(running.pid, SIGTERM);
  const auto r = wait_command(running);
  EXPECT_EQ(missing, std::vector<int>{}) << "the launcher exited " << r.exit_code << "; the program said:\n" << r.out;
  EXPECT_EQ(r.exit_code, 3) << "the program's status: " << r.err;
  // Each once: a signal passed on twice would be counted twice.
  for (const int signal : forwardable_signals()) {
    if (signal == SIGCONT || signal >= SIGRTMIN) continue;
    EXPECT_EQ(count_of(r.out, "got " + std::to_string(signal) + "\n"), 1u) << strsignal(signal) << "\n" << r.out;
  }
  EXPECT_NE(r.err.find("cumemtrace: trace written to " + trace + ": complete\n"), std::string::npos) << r.err;
}

// The kernel kills the program when the launcher dies without passing a
// signal on; as a subreaper we inherit the orphan and see how it ended.
TEST(RunSignals, SigkillOnTheLauncherTakesTheProgramAlong) {
  TempDir dir;
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const auto running = start_command(
      {CUMEMTRACE_CLI, "run", "--output", dir / "t.jsonl", "--", kReporter}, sim_environment(), dir);
  wait_for_ready(running);
  const pid_t program = static_cast<pid_t>(pid_line(read_file(running.out_path)));
  ASSERT_GT(program, 0);
  ::kill(running.pid, SIGKILL);
  EXPECT_EQ(wait_command(running).exit_code, 128 + SIGKILL);
  int status = 0;
  const bool ended = eventually([&] { return ::waitpid(program, &status, WNOHANG) == program; });
  if (!ended) {
    ::kill(program, SIGKILL);
    ::waitpid(program, &status, 0);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  EXPECT_TRUE(ended) << "the program was left running";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

// Refused with one line and exit 2 before the program runs (it would have
// made `ran`), and nothing is left behind.
TEST(RunOutput, OutputThatCannotBeCreatedIsRefusedBeforeTheProgramStarts) {
  TempDir dir;
  write_file(dir / "plain", "a file, not a directory\n");
  fs::create_directory(dir / "shared");
  fs::permissions(dir / "shared", fs::perms::all);  // writable by all, no sticky bit: the library refuses it
  const std::string ran = dir / "ran";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/nonexistent-cumemtrace-dir/t.jsonl", "the directory /nonexistent-cumemtrace-dir does not exist"},
      {"/nonexistent-cumemtrace-dir/t.%p.jsonl", "the directory /nonexistent-cumemtrace-dir does not exist"},
      {dir / "plain/t.jsonl", "is not a directory"},
      {dir / "shared/t.jsonl", "writable by every user"},
      {dir / (std::string(300, 'n') + ".jsonl"), "File name too long"}};
  for (const auto& [output, why] : cases) {
    const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", output, "--", "/bin/sh", "-c", "touch " + ran},
                               sim_environment());
    EXPECT_EQ(r.exit_code, 2) << output << ": " << r.err;
    EXPECT_EQ(r.err.rfind("cumemtrace: cannot create the trace file ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(file_exists(ran)) << output << ": the program ran";
  }
  EXPECT_TRUE(fs::is_empty(dir / "shared"));
  // A good output: the launcher's own try leaves no file.
  const auto ok = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "ok.%p.jsonl", "--", "/bin/true"},
                              sim_environment());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  for (const auto& entry : fs::directory_iterator(dir.dir())) {
    EXPECT_FALSE(entry.path().filename().string().starts_with("ok.")) << entry.path();
  }
}

TEST(RunOutput, LastLineSaysWhetherTheTraceIsComplete) {
  TempDir dir;
  const auto complete = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "c.jsonl", "--",
                                     CUMEMTRACE_APPS_DIR "/known_sequence", dir / "manifest.txt"},
                                    sim_environment());
  EXPECT_EQ(complete.exit_code, 0) << complete.err;
  EXPECT_NE(complete.err.find("cumemtrace: trace written to " + (dir / "c.jsonl") + ": complete\n"),
            std::string::npos)
      << complete.err;

  const auto cut = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "k.jsonl", "--", kReporter, "kill-self"},
                               sim_environment());
  const auto lossy = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "d.jsonl", "--", "/bin/sh", "-c",
                                  fake_trace_command(dir / "d.jsonl", "\"$$\"", kEndWithDrops)},
                                 sim_environment());
  EXPECT_EQ(lossy.err, "cumemtrace: trace written to " + (dir / "d.jsonl") +
                           ": 7 events dropped (the trace holds less than the program did)\n");

  EXPECT_EQ(cut.exit_code, 128 + SIGKILL) << cut.err;
  // Completed from what the process had recorded where it left its pending
  // file, else cut: never complete. (Cut traces are made on purpose below.)
  const std::string said = "cumemtrace: trace written to " + (dir / "k.jsonl") + ": ";
  EXPECT_TRUE(cut.err.find(said + "the process was killed; completed from what it had recorded\n") !=
                  std::string::npos ||
              cut.err.find(said + "cut short, no end line") != std::string::npos)
      << cut.err;
}

// Several traces (a program's forked children write their own): one line,
// each trace under what became of it.
TEST(RunOutput, LastLineNamesEveryTraceOfTheRunAndWhatBecameOfIt) {
  TempDir dir;
  // t.1: 7 events dropped; t.2: no end line, written by the program; t.3: no
  // end line, its writer (pid 1) still running.
  const std::string script = fake_trace_command(dir / "t.1.jsonl", "\"$$\"", kEndWithDrops) +
                             fake_trace_command(dir / "t.2.jsonl", "\"$$\"", "") +
                             fake_trace_command(dir / "t.3.jsonl", "1", "");
  write_file(dir / "t.old.jsonl", "");  // matches the template, but is not this run's
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "t.%p.jsonl", "--", "/bin/sh", "-c", script},
                             sim_environment());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("cumemtrace: trace written to 3 files: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("1 with events dropped (holding less than the program did): " + (dir / "t.1.jsonl") +
                       " (7 dropped)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("1 cut short, no end line (report reads it up to the cut): " + (dir / "t.2.jsonl")),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("1 still being written by a process that outlived the program: " + (dir / "t.3.jsonl") +
                       " (pid 1)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("t.old.jsonl"), std::string::npos) << r.err;
}

// A trace the library could not create is not a program that allocated
// nothing: here its directory went away while the program ran.
TEST(RunOutput, NoTraceBecauseTheDirectoryWentIsSaidSo) {
  TempDir dir;
  fs::create_directory(dir / "sub");
  const auto r = run_command({CUMEMTRACE_CLI, "run", "--output", dir / "sub/t.jsonl", "--", "/bin/sh", "-c",
                              "rmdir " + (dir / "sub") + " && " + CUMEMTRACE_APPS_DIR "/known_sequence " +
                                  (dir / "manifest.txt")},
                             sim_environment());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cumemtrace: no trace at " + (dir / "sub/t.jsonl") + ": cannot create the trace file"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("does not exist now, so the program ran untraced"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no device allocation"), std::string::npos) << r.err;
}

}  // namespace
