// `cumemtrace run [OPTIONS] -- CMD ARGS...`: runs a program with
// libcumemtrace.so preloaded, its options passed on as CUMEMTRACE_*
// variables, and exits as the program did.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "options/config.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "output/output_template.h"
#include "cumemtrace/trace_format.h"
#include "exit_codes.h"
#include "live_view.h"
#include "output_file.h"

namespace cumemtrace::cli {

namespace {

constexpr const char* kLibraryName = "libcumemtrace.so";
constexpr const char* kLibraryEnv = "CUMEMTRACE_LIBRARY";
// NVTX loads the tool named here into programs that use NVTX ranges: ours,
// already preloaded, turns them into `mark` events.
constexpr const char* kNvtxInjectionEnv = "NVTX_INJECTION64_PATH";

// Which signals `run` passes on to the program (a launcher should be as if
// absent): every signal a process can catch, real-time ones included, but
// - SIGKILL and SIGSTOP, which cannot be caught: a launcher killed with
//   SIGKILL takes the program with it (PR_SET_PDEATHSIG in start_program);
//   SIGSTOP stops the launcher alone (SIGTSTP stops both);
// - SIGCHLD, the launcher's own news of the program;
// - SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS and SIGABRT: faults and
//   aborts of the launcher itself (tini keeps them too); it dies of them,
//   and the program with it;
// - 32 and 33, which glibc keeps for its threads (cancellation, set*id);
//   sigaction refuses them, and SIGRTMIN is above them.
// The job-control stops SIGTSTP, SIGTTIN and SIGTTOU are passed on and then
// stop the launcher as their default action would have (wait_for), so a
// shell sees its job stop and its `fg` (SIGCONT, passed on too) continues
// both. `timeout` puts itself in a group of its own and ignores SIGTTIN and
// SIGTTOU there, which leaves a program that read the terminal stopped
// after `fg`; the launcher stays in the program's group instead.
bool is_forwarded_signal(int signal) {
  switch (signal) {
    case SIGKILL:
    case SIGSTOP:
    case SIGCHLD:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGTRAP:
    case SIGSYS:
    case SIGABRT: return false;
    default: return signal > 0 && (signal < 32 || (signal >= SIGRTMIN && signal <= SIGRTMAX));
  }
}

bool is_job_control_stop(int signal) { return signal == SIGTSTP || signal == SIGTTIN || signal == SIGTTOU; }

volatile sig_atomic_t g_child_pid = 0;
// A job-control stop the launcher was sent, for wait_for to take (0: none).
volatile sig_atomic_t g_stop_signal = 0;

void forward_signal(int signal, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const pid_t child = g_child_pid;
  // Only what user space sent to us alone (kill, timeout, a batch
  // scheduler) is the program's. What the kernel sent (si_code > 0) came
  // from the terminal to the whole foreground process group, the program
  // included (Ctrl-C, Ctrl-Z, a hang-up, a window size): sending it again
  // would deliver it twice; or it is about the launcher alone (its CPU or
  // file size limit). What the launcher raised itself (its write to a
  // closed pipe raises SIGPIPE so) or the program sent its parent is not
  // for the program either.
  const bool for_the_program =
      info->si_code <= 0 && info->si_pid != ::getpid() && info->si_pid != child;
  if (child > 0 && for_the_program) {
    // A queued signal keeps its value (real-time signals carry data so).
    if (info->si_code == SI_QUEUE) {
      ::sigqueue(child, signal, info->si_value);
    } else {
      ::kill(child, signal);
    }
  }
  if (is_job_control_stop(signal)) g_stop_signal = signal;
  errno = saved_errno;
}

// SIGCHLD only has to wake wait_for's sigsuspend.
void note_child_changed(int) {}

bool is_readable_file(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

std::optional<std::string> absolute_path(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return std::nullopt;
  return std::string(resolved);
}

std::string own_directory() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  std::string path(exe, static_cast<std::size_t>(n));
  return path.substr(0, path.find_last_of('/'));
}

// CUMEMTRACE_LIBRARY, else beside our own executable: <bindir>/../<libdir>
// as installed, or the build tree's layout. Logs and returns nullopt if absent.
std::optional<std::string> find_preload_library() {
  if (const char* from_env = std::getenv(kLibraryEnv); from_env != nullptr && *from_env != '\0') {
    if (!is_readable_file(from_env)) {
      spdlog::error("{}={} does not name a readable file", kLibraryEnv, from_env);
      return std::nullopt;
    }
    return absolute_path(from_env);
  }
  const std::string dir = own_directory();
  std::vector<std::string> candidates;
  for (std::string relative : {CUMEMTRACE_INSTALL_BIN_TO_LIB, CUMEMTRACE_BUILD_BIN_TO_LIB}) {
    std::string base = relative.empty() ? dir : (relative.front() == '/' ? relative : dir + "/" + relative);
    std::string candidate = base + "/" + kLibraryName;
    if (is_readable_file(candidate)) return absolute_path(candidate);
    candidates.push_back(candidate);
  }
  spdlog::error("cannot find {} (looked for {}{}); set {} to its path", kLibraryName, candidates.front(),
                candidates.size() > 1 && candidates[1] != candidates[0] ? " and " + candidates[1] : "",
                kLibraryEnv);
  return std::nullopt;
}

// The pytest plugin's folder (preload/python), found as the library is:
// <datadir>/cumemtrace/python installed, python/ in the build tree. Goes
// first on the program's PYTHONPATH, the user's entries after it, so
// `pytest -p cumemtrace` loads it without installing; absent, nothing
// changes (most programs are not pytest).
void add_pytest_plugin_to_python_path() {
  const std::string dir = own_directory();
  for (std::string relative : {CUMEMTRACE_INSTALL_BIN_TO_PYTHON, CUMEMTRACE_BUILD_BIN_TO_PYTHON}) {
    const std::string folder = !relative.empty() && relative.front() == '/' ? relative : dir + "/" + relative;
    if (!is_readable_file(folder + "/cumemtrace/__init__.py")) continue;
    std::string value = absolute_path(folder).value_or(folder);
    if (const char* existing = std::getenv("PYTHONPATH"); existing != nullptr && *existing != '\0') {
      value += ':';
      value += existing;
    }
    ::setenv("PYTHONPATH", value.c_str(), 1);
    return;
  }
}

// ld.so splits LD_PRELOAD at spaces and colons: ours goes first, the
// existing entries stay.
bool add_to_ld_preload(const std::string& library) {
  if (library.find_first_of(" :") != std::string::npos) {
    spdlog::error("cannot preload {}: LD_PRELOAD cannot hold a path with a space or colon", library);
    return false;
  }
  std::string value = library;
  if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing != '\0') {
    value += ' ';
    value += existing;
  }
  ::setenv("LD_PRELOAD", value.c_str(), 1);
  return true;
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

// The trace path for the program's pid, unless the template holds the start
// time (%t), which only the program itself knows.
std::optional<std::string> expected_trace_path(const std::string& output_template, pid_t pid) {
  contract::TemplateValues values;
  values.pid = static_cast<long>(pid);
  values.host = host_name();
  values.rank = contract::rank_from_environment();  // the program inherits our environment
  return contract::expand_output_template(output_template, values);
}

// The path a template names whatever the program's pid, or nothing when it
// depends on the pid or the start time.
std::optional<std::string> pid_independent_trace_path(const std::string& output_template) {
  const auto first = expected_trace_path(output_template, 1);
  const auto second = expected_trace_path(output_template, 2);
  if (!first || first != second) return std::nullopt;
  return first;
}

std::string output_template(const RunArgs& args) {
  if (!args.output.empty()) return args.output;
  if (const char* env = std::getenv(format::kEnvOutput); env != nullptr && *env != '\0') return env;
  return format::kDefaultOutputTemplate;
}

// A flag of `run` and the variable that carries it to the library.
struct ForwardedOption {
  const char* flag;
  const char* env;
  std::optional<std::string> RunArgs::*value;
};

constexpr ForwardedOption kForwarded[] = {
    {"--pool", "CUMEMTRACE_POOL", &RunArgs::pool},
    {"--pool-conf", "CUMEMTRACE_POOL_CONF", &RunArgs::pool_conf},
    {"--stacks", "CUMEMTRACE_STACKS", &RunArgs::stacks},
    {"--flush-ms", "CUMEMTRACE_FLUSH_MS", &RunArgs::flush_ms},
    {"--fork", "CUMEMTRACE_FORK", &RunArgs::fork},
    {"--python", "CUMEMTRACE_PYTHON", &RunArgs::python},
};

// Sets the library's variables from the flags; false (after one line on
// stderr) for a bad value.
bool pass_options_on(const RunArgs& args, const std::string& library) {
  for (const ForwardedOption& option : kForwarded) {
    const std::optional<std::string>& value = args.*option.value;
    if (!value) continue;
    if (const auto problem = contract::option_value_problem(option.env, *value)) {
      spdlog::error("{} '{}': {}", option.flag, *value, *problem);
      return false;
    }
    ::setenv(option.env, value->c_str(), 1);
  }
  if (!args.output.empty()) ::setenv(format::kEnvOutput, args.output.c_str(), 1);
  if (args.free_stacks) ::setenv("CUMEMTRACE_FREE_STACKS", "1", 1);
  // Every allocation becomes a cudaMalloc of its own, so the trace is
  // tensor-level (DESIGN.md, the instrumented caching pool).
  if (args.torch_tensors) ::setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", 1);
  // NVTX v3 loads this tool library on the program's first NVTX call, so
  // NVTX ranges become `mark` events. A tool the user named already wins.
  ::setenv(kNvtxInjectionEnv, library.c_str(), 0);
  return true;
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitUsage;
}

// Starts the program; returns its pid, or the exit code for a program that
// could not be started (reported by the child through a close-on-exec pipe).
struct Started {
  pid_t pid = -1;
  int exec_errno = 0;
};

// The signal handling `run` found, and the signals it blocks while it
// waits (the forwarded ones and SIGCHLD: wait_for takes them in sigsuspend).
struct SignalState {
  sigset_t blocked{};
  sigset_t original_mask{};
  std::array<struct sigaction, NSIG> original_actions{};
  bool handles(int signal) const { return is_forwarded_signal(signal) || signal == SIGCHLD; }
};

void take_over_signals(SignalState& state) {
  ::sigemptyset(&state.blocked);
  for (int signal = 1; signal < NSIG; ++signal) {
    if (state.handles(signal)) ::sigaddset(&state.blocked, signal);
  }
  // Blocked until the program's pid is known, so that none is lost.
  ::sigprocmask(SIG_BLOCK, &state.blocked, &state.original_mask);
  struct sigaction forward {};
  forward.sa_sigaction = forward_signal;
  forward.sa_flags = SA_SIGINFO;
  forward.sa_mask = state.blocked;  // one at a time, in the order they came
  struct sigaction child_changed {};
  child_changed.sa_handler = note_child_changed;
  child_changed.sa_flags = SA_NOCLDSTOP;
  child_changed.sa_mask = state.blocked;
  for (int signal = 1; signal < NSIG; ++signal) {
    if (state.handles(signal)) {
      ::sigaction(signal, signal == SIGCHLD ? &child_changed : &forward, &state.original_actions[signal]);
    }
  }
}

// The handling `run` found, back in place (in the program before its exec;
// in the launcher once the program has ended, so that its own last lines
// stop, or are ignored, as any program's would).
void restore_signals(const SignalState& state) {
  for (int signal = 1; signal < NSIG; ++signal) {
    if (state.handles(signal)) ::sigaction(signal, &state.original_actions[signal], nullptr);
  }
  ::sigprocmask(SIG_SETMASK, &state.original_mask, nullptr);
}

Started start_program(const std::vector<std::string>& command, const SignalState& signals) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Started{-1, errno};
  const pid_t launcher = ::getpid();
  Started started;
  started.pid = ::fork();
  if (started.pid < 0) {
    started.exec_errno = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return started;
  }
  if (started.pid == 0) {
    // The program starts with the signal handling we were given (an ignored
    // SIGHUP under nohup stays ignored; exec resets handlers to default).
    restore_signals(signals);
    // Never leave the program behind: should the launcher die without
    // passing a signal on (SIGKILL, the OOM killer, a fault of its own), the
    // kernel kills the program too, with SIGKILL, as if the two had been
    // killed together: its trace is completed from what it had recorded
    // when it is read (end reason `killed`). The kernel ties this to the
    // thread that forked (the launcher has one), does not pass it to the
    // program's own children, and drops it at the exec of a set-user-ID
    // program (which
    // LD_PRELOAD does not trace anyway).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::kill(::getpid(), SIGKILL);  // it died before that
    ::close(pipe_fds[0]);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    [[maybe_unused]] ssize_t ignored = ::write(pipe_fds[1], &err, sizeof err);
    ::_exit(kExitCommandNotFound);
  }
  ::close(pipe_fds[1]);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(pipe_fds[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  if (n == static_cast<ssize_t>(sizeof err)) started.exec_errno = err;
  return started;
}

// Stops the launcher with a job-control stop it was sent, as the signal's
// default action would have; the kernel discards it in an orphaned process
// group, as it would have. Its SIGCONT reaches forward_signal afterwards.
void stop_as_by_default(int signal) {
  struct sigaction default_action {}, ours {};
  default_action.sa_handler = SIG_DFL;
  ::sigemptyset(&default_action.sa_mask);
  ::sigaction(signal, &default_action, &ours);
  sigset_t just_this;
  ::sigemptyset(&just_this);
  ::sigaddset(&just_this, signal);
  ::kill(::getpid(), signal);                         // pending: blocked while we wait
  ::sigprocmask(SIG_UNBLOCK, &just_this, nullptr);    // delivered here: we stop
  ::sigprocmask(SIG_BLOCK, &just_this, nullptr);
  ::sigaction(signal, &ours, nullptr);
}

// Waits for the program to end, passing signals on meanwhile (they are
// blocked but in sigsuspend, so a job-control stop is never missed between
// a check and the wait). The program's pid is forgotten before it is
// reaped, so a late signal never reaches a process that took its pid over.
// Returns its wait status, or nullopt if it cannot be waited for.
std::optional<int> wait_for(pid_t pid, const SignalState& signals) {
  sigset_t waiting = signals.original_mask;
  for (int signal = 1; signal < NSIG; ++signal) {
    if (signals.handles(signal)) ::sigdelset(&waiting, signal);
  }
  for (;;) {
    if (const int stop = g_stop_signal; stop != 0) {
      g_stop_signal = 0;
      stop_as_by_default(stop);
      continue;
    }
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      spdlog::error("cannot wait for the program: {}", std::strerror(errno));
      return std::nullopt;
    }
    if (info.si_pid == pid) break;
    ::sigsuspend(&waiting);
  }
  g_child_pid = 0;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      spdlog::error("cannot wait for the program: {}", std::strerror(errno));
      return std::nullopt;
    }
  }
  return status;
}

// ---- After the run: what became of its traces ----------------------------

enum class TraceEnding { complete, dropped, killed, cut, running, unreadable };

struct RunTrace {
  std::string path;
  TraceEnding ending = TraceEnding::cut;
  std::uint64_t dropped = 0;
  long pid = 0;         // the process that wrote it (its header)
  std::string details;  // unreadable: the reader's words
};

// A trace's `end` line, if its last line is one.
struct EndLine {
  std::string reason;
  std::uint64_t dropped = 0;
};

bool is_zstd_file(const std::string& path) {
  unsigned char magic[4] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool zstd = ::pread(fd, magic, sizeof magic, 0) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 &&
                    magic[2] == 0x2f && magic[3] == 0xfd;
  ::close(fd);
  return zstd;
}

std::optional<EndLine> end_line_from_json(std::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || j.value("ev", std::string()) != format::name(format::Event::end)) return std::nullopt;
  EndLine end;
  if (const auto reason = j.find("reason"); reason != j.end() && reason->is_string()) end.reason = *reason;
  if (const auto dropped = j.find("dropped"); dropped != j.end() && dropped->is_number_unsigned()) {
    end.dropped = dropped->get<std::uint64_t>();
  }
  return end;
}

// The end line of a plain trace, read from the file's end: a trace of
// gigabytes costs one read (a compressed one is read through). None when
// the last line is cut or not an end.
std::optional<EndLine> end_line_of_plain_trace(const std::string& path) {
  constexpr off_t kTail = 64 * 1024;  // an end line is some 100 bytes
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::string tail;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const off_t from = std::max<off_t>(0, st.st_size - kTail);
    tail.resize(static_cast<std::size_t>(st.st_size - from));
    const ssize_t n = ::pread(fd, tail.data(), tail.size(), from);
    tail.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  if (tail.empty() || tail.back() != '\n') return std::nullopt;
  tail.pop_back();
  const std::size_t start = tail.find_last_of('\n');
  return end_line_from_json(start == std::string::npos ? std::string_view(tail)
                                                       : std::string_view(tail).substr(start + 1));
}

bool process_is_running(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

RunTrace judge_run_trace(const std::string& path, pid_t program) {
  RunTrace trace;
  trace.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_size == 0) return trace;  // created, nothing written: cut
  std::optional<EndLine> end;
  try {
    // The reader completes a killed process's trace from its pending file
    // (read/killed_trace.h) and says so: after the run is when it should.
    analyzer::TraceReader reader(path);
    trace.pid = static_cast<long>(reader.header().pid);
    if (is_zstd_file(path)) {
      while (reader.next() != nullptr) {
      }
      const analyzer::ReaderStats& stats = reader.stats();
      if (stats.has_end && !stats.partial_last_line && stats.end) {
        end = EndLine{stats.end->reason_text, stats.end->dropped};
      }
    } else {
      end = end_line_of_plain_trace(path);
    }
  } catch (const std::exception& e) {  // TraceError, or out of memory on a hostile file
    trace.ending = TraceEnding::unreadable;
    trace.details = e.what();
    return trace;
  }
  if (!end) {
    // A forked child may outlive the program and still be writing.
    trace.ending = trace.pid != program && process_is_running(trace.pid) ? TraceEnding::running : TraceEnding::cut;
  } else if (end->reason == "killed") {  // TRACE_FORMAT.md: completed after the process was killed
    trace.ending = TraceEnding::killed;
  } else {
    trace.dropped = end->dropped;
    trace.ending = end->dropped != 0 ? TraceEnding::dropped : TraceEnding::complete;
  }
  return trace;
}

// What became of a trace, after "N " (how many traces of the run did so).
const char* ending_words(TraceEnding ending) {
  switch (ending) {
    case TraceEnding::complete: return "complete";
    case TraceEnding::dropped: return "with events dropped (holding less than the program did)";
    case TraceEnding::killed: return "killed, completed from what was recorded";
    case TraceEnding::cut: return "cut short, no end line (report reads it up to the cut)";
    case TraceEnding::running: return "still being written by a process that outlived the program";
    case TraceEnding::unreadable: return "unreadable";
  }
  return "";
}

std::string trace_with_details(const RunTrace& trace) {
  if (trace.ending == TraceEnding::dropped) return trace.path + " (" + std::to_string(trace.dropped) + " dropped)";
  if (trace.ending == TraceEnding::unreadable) return trace.path + " (" + trace.details + ")";
  if (trace.ending == TraceEnding::running) return trace.path + " (pid " + std::to_string(trace.pid) + ")";
  return trace.path;
}

// One line on stderr: where the run's traces are and whether each is
// complete, so nobody reads a cut trace as the whole run. A run with no
// trace says why, as far as the launcher can know it.
void report_run_traces(const std::vector<std::string>& paths, const std::string& output_template, pid_t program) {
  if (paths.empty()) {
    const auto expected = expected_trace_path(output_template, program);
    if (!expected) return;  // %t: the name is the program's to know
    if (const std::string problem = trace_output_problem(output_template); !problem.empty()) {
      spdlog::warn("no trace at {}: {} now, so the program ran untraced", *expected, problem);
    } else {
      // The library creates the file on the first allocation it sees; the
      // launcher cannot tell "none" from "not created", but the library says
      // so on stderr when it cannot create the file.
      spdlog::info("no trace at {}: the program made no device allocation that cumemtrace saw "
                   "(unless the library said above that it could not create the file)",
                   *expected);
    }
    return;
  }
  std::vector<RunTrace> traces;
  for (const std::string& path : paths) traces.push_back(judge_run_trace(path, program));
  const bool all_complete = std::all_of(traces.begin(), traces.end(), [](const RunTrace& t) {
    return t.ending == TraceEnding::complete;
  });
  std::string line = "trace written to ";
  if (traces.size() == 1) {
    const RunTrace& trace = traces.front();
    line += trace.path + ": ";
    if (trace.ending == TraceEnding::dropped) {
      line += std::to_string(trace.dropped) + " events dropped (the trace holds less than the program did)";
    } else if (trace.ending == TraceEnding::killed) {
      line += "the process was killed; completed from what it had recorded";
    } else {
      line += ending_words(trace.ending);
    }
    if (trace.ending == TraceEnding::unreadable) line += ": " + trace.details;
    if (trace.ending == TraceEnding::running) line += " (pid " + std::to_string(trace.pid) + ")";
  } else {
    // Forked and exec'd children write traces of their own.
    constexpr std::size_t kNamed = 8;  // per kind, so a hundred workers still make one readable line
    line += std::to_string(traces.size()) + " files";
    const char* separator = ": ";
    for (const TraceEnding ending : {TraceEnding::complete, TraceEnding::dropped, TraceEnding::killed,
                                     TraceEnding::cut, TraceEnding::running, TraceEnding::unreadable}) {
      std::vector<std::string> named;
      std::size_t count = 0;
      for (const RunTrace& trace : traces) {
        if (trace.ending == ending && ++count <= kNamed) named.push_back(trace_with_details(trace));
      }
      if (count == 0) continue;
      line += separator + std::to_string(count) + " " + ending_words(ending) + ": ";
      separator = "; ";
      for (std::size_t i = 0; i < named.size(); ++i) line += (i == 0 ? "" : ", ") + named[i];
      if (count > named.size()) line += " and " + std::to_string(count - named.size()) + " more";
    }
  }
  if (all_complete) {
    spdlog::info("{}", line);
  } else {
    spdlog::warn("{}", line);
  }
}

// `--live`: the view follows the program's own trace (not those of children
// it forks) from the moment the program creates it.
std::unique_ptr<LiveRun> start_live_view(const RunArgs& args, const std::string& trace_pattern,
                                         const TraceFileStamps& traces_before, pid_t pid) {
  LiveOptions options;
  options.fd = STDERR_FILENO;  // the program's stdout may go to a file; the view stays on the terminal
  options.output = is_live_terminal(STDERR_FILENO) ? LiveOutput::bottom_panel : LiveOutput::lines;
  options.line_prefix = "cumemtrace: ";
  const std::optional<std::string> expected = expected_trace_path(output_template(args), pid);
  auto locate = [expected, trace_pattern, traces_before]() -> std::optional<std::string> {
    if (expected) return ::access(expected->c_str(), F_OK) == 0 ? expected : std::nullopt;
    // %t in the template: the first trace file the run created.
    const std::vector<std::string> created = changed_trace_files(traces_before, trace_file_stamps(trace_pattern));
    if (created.empty()) return std::nullopt;
    return created.front();
  };
  return std::make_unique<LiveRun>(options, locate,
                                   "the program's first device allocation (" + expected.value_or("its trace") + ")");
}

}  // namespace

CLI::App* add_run_command(CLI::App& app, RunArgs& args) {
  CLI::App* run = app.add_subcommand("run", "Run a program with cumemtrace preloaded, writing a trace");
  run->add_option("-o,--output", args.output,
                  "Trace path template: %p pid, %h host, %r rank, %t start time "
                  "(default cumemtrace.%h.%p.jsonl; a .zst suffix compresses)")
      // An unset shell variable must not quietly mean the default file.
      ->check(CLI::Validator(
          [](const std::string& value) {
            return value.empty() ? std::string("an empty value is not a path (an unset variable?)") : std::string();
          },
          "", "non-empty"));
  run->add_option("--pool", args.pool,
                  "caching (default: cumemtrace's instrumented pool serves allocations) or "
                  "passthrough (every call forwarded; the trace shows the program's own allocator)")
      ->type_name("caching|passthrough");
  run->add_option("--pool-conf", args.pool_conf,
                  "Pool settings, as PYTORCH_CUDA_ALLOC_CONF: key:value,... "
                  "(e.g. max_split_size_mb:128,expandable_segments:true)")
      ->type_name("KEY:VALUE,...");
  run->add_option("--stacks", args.stacks, "Call stack depth recorded per event (default 32; 0: none)")
      ->type_name("DEPTH");
  run->add_option("--python", args.python,
                  "Python frames (function, file, line) in the stacks of a Python program: auto "
                  "(default; CPython 3.9-3.14) or off")
      ->type_name("auto|off");
  run->add_flag("--free-stacks", args.free_stacks,
                "Give each free its own call stack too (off by default: a bad free's error "
                "event has its stack either way)");
  run->add_option("--flush-ms", args.flush_ms,
                  "Longest time an event waits before it is written (default 200): a killed "
                  "program loses at most this much")
      ->type_name("MS");
  run->add_option("--fork", args.fork,
                  "What a child forked without exec records: trace (its own trace file, the "
                  "default) or off")
      ->type_name("trace|off");
  run->add_flag("--torch-tensors", args.torch_tensors,
                "Set PYTORCH_NO_CUDA_MEMORY_CACHING=1: PyTorch allocates each tensor with "
                "cudaMalloc, so the trace shows tensors, not PyTorch's cached segments");
  run->add_option("--check", args.check,
                  "Check the run's traces afterwards, e.g. 'peak<=2GiB,leaked==0' (names as in `check`; "
                  "exit: the program's status if it failed, else 1 if a check failed)");
  run->add_flag("--allow-incomplete", args.allow_incomplete,
                "With --check: judge a trace that was cut short, lost events or was completed after a kill "
                "(by default such a trace fails the check)");
  run->add_flag("--allow-unassessed", args.allow_unassessed,
                "With --check: pass a growth limit where growth cannot be assessed (no repeating mark, no period "
                "in any thread's allocations), saying so (by default it fails)");
  add_iteration_marker_option(*run, args.iteration_marker)->needs("--check");
  run->add_flag("--live", args.live,
                "Show the live view of `cumemtrace top` while the program runs: on a terminal, a panel at the "
                "bottom of the screen (the program's output scrolls above it, and the last frame stays after "
                "the run); else one summary line per second on stderr");
  run->add_option("command", args.command, "The program and its arguments (after --)")->required();
  // Everything from the program's name on belongs to the program, options included.
  run->positionals_at_end();
  return run;
}

int run_command(const RunArgs& args) {
  const std::optional<std::string> library = find_preload_library();
  if (!library || !pass_options_on(args, *library) || !add_to_ld_preload(*library)) return kExitUsage;
  add_pytest_plugin_to_python_path();
  // The library creates traces exclusively and never overwrites a file (so a
  // planted symlink cannot redirect one): an existing fixed path would leave
  // the run untraced, so it is refused before the program starts.
  if (const auto fixed = pid_independent_trace_path(output_template(args))) {
    struct stat existing {};
    if (::lstat(fixed->c_str(), &existing) == 0) {
      spdlog::error("{} already exists: cumemtrace never overwrites a trace; remove it or choose another --output",
                    *fixed);
      return kExitUsage;
    }
  }
  std::unique_ptr<RunCheck> check;
  if (args.check && !(check = RunCheck::prepare(*args.check, output_template(args), args.allow_incomplete,
                                                       args.allow_unassessed, args.iteration_marker))) {
    return kExitUsage;
  }

  // The library would refuse the file: say so now, not after an untraced run.
  if (const std::string problem = trace_output_problem(output_template(args)); !problem.empty()) {
    spdlog::error("{}; choose another --output", problem);
    return kExitUsage;
  }
  const std::string trace_pattern = trace_file_pattern(output_template(args));
  const TraceFileStamps traces_before = trace_file_stamps(trace_pattern);

  SignalState signals;
  take_over_signals(signals);
  const Started started = start_program(args.command, signals);
  if (started.pid > 0) g_child_pid = started.pid;
  std::unique_ptr<LiveRun> live;
  if (args.live && started.pid > 0) live = start_live_view(args, trace_pattern, traces_before, started.pid);

  const std::string& program = args.command.front();
  if (started.pid < 0) {
    restore_signals(signals);
    spdlog::error("cannot start {}: {}", program, std::strerror(started.exec_errno));
    return kExitUsage;
  }
  const std::optional<int> wait_status = wait_for(started.pid, signals);
  if (live) live->program_ended();  // its last frame, and the terminal given back, before our own lines
  restore_signals(signals);
  // Our own last lines to a closed pipe must not turn the program's status into 141.
  ::signal(SIGPIPE, SIG_IGN);
  if (!wait_status) return kExitUsage;
  const int status = exit_status_of(*wait_status);
  if (started.exec_errno != 0) {
    if (started.exec_errno == ENOENT && program.find('/') == std::string::npos) {
      spdlog::error("{}: command not found", program);
    } else {
      spdlog::error("{}: {}", program, std::strerror(started.exec_errno));
    }
    return started.exec_errno == ENOENT ? kExitCommandNotFound : kExitCannotExecute;
  }
  report_run_traces(changed_trace_files(traces_before, trace_file_stamps(trace_pattern)), output_template(args),
                    started.pid);
  // A failed program's status wins: the checks are still printed.
  if (check) {
    const int verdict = check->check_new_traces();
    return status != 0 ? status : verdict;
  }
  return status;
}

}  // namespace cumemtrace::cli
