// `cumemtrace run [--output PATH] -- CMD ARGS...`: runs a program with
// libcumemtrace.so preloaded and exits as the program did.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "cumemtrace/output_template.h"
#include "cumemtrace/trace_format.h"
#include "exit_codes.h"

namespace cumemtrace::cli {

namespace {

constexpr const char* kLibraryName = "libcumemtrace.so";
constexpr const char* kLibraryEnv = "CUMEMTRACE_LIBRARY";
constexpr std::array<int, 4> kForwardedSignals{SIGINT, SIGTERM, SIGHUP, SIGQUIT};

volatile sig_atomic_t g_child_pid = 0;

void forward_signal(int signal, siginfo_t* info, void*) {
  // A signal from the terminal (Ctrl-C, hang-up) already went to the whole
  // foreground process group, the program included: sending it again would
  // deliver it twice. Forward only what was sent to us alone (kill, timeout,
  // a batch scheduler).
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  const pid_t child = g_child_pid;
  if (child > 0) ::kill(child, signal);
}

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
  format::TemplateValues values;
  values.pid = static_cast<long>(pid);
  values.host = host_name();
  values.rank = format::rank_from_environment();  // the program inherits our environment
  return format::expand_output_template(output_template, values);
}

std::string output_template(const RunArgs& args) {
  if (!args.output.empty()) return args.output;
  if (const char* env = std::getenv(format::kEnvOutput); env != nullptr && *env != '\0') return env;
  return format::kDefaultOutputTemplate;
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

using SignalActions = std::array<struct sigaction, kForwardedSignals.size()>;

Started start_program(const std::vector<std::string>& command, const sigset_t& original_mask,
                      const SignalActions& original_actions) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Started{-1, errno};
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
    for (std::size_t i = 0; i < kForwardedSignals.size(); ++i) {
      ::sigaction(kForwardedSignals[i], &original_actions[i], nullptr);
    }
    ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
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

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      spdlog::error("cannot wait for the program: {}", std::strerror(errno));
      return kExitUsage;
    }
  }
  return exit_status_of(status);
}

}  // namespace

CLI::App* add_run_command(CLI::App& app, RunArgs& args) {
  CLI::App* run = app.add_subcommand("run", "Run a program with cumemtrace preloaded, writing a trace");
  run->add_option("-o,--output", args.output,
                  "Trace path template: %p pid, %h host, %r rank, %t start time "
                  "(default cumemtrace.%h.%p.jsonl; a .zst suffix compresses)");
  run->add_option("--check", args.check,
                  "Check the run's traces afterwards, e.g. 'peak<=2GiB,leaked==0' (names as in `check`; "
                  "exit: the program's status if it failed, else 1 if a check failed)");
  run->add_option("command", args.command, "The program and its arguments (after --)")->required();
  // Everything from the program's name on belongs to the program, options included.
  run->positionals_at_end();
  return run;
}

int run_command(const RunArgs& args) {
  const std::optional<std::string> library = find_preload_library();
  if (!library || !add_to_ld_preload(*library)) return kExitUsage;
  // NVTX v3 loads this tool library on the program's first NVTX call, so
  // NVTX ranges become `mark` events. A tool the user named already wins.
  ::setenv("NVTX_INJECTION64_PATH", library->c_str(), 0);
  if (!args.output.empty()) ::setenv(format::kEnvOutput, args.output.c_str(), 1);
  std::unique_ptr<RunCheck> check;
  if (!args.check.empty() && !(check = RunCheck::prepare(args.check, output_template(args)))) return kExitUsage;

  // Block the forwarded signals until the child's pid is known, so none is lost.
  sigset_t forwarded, original_mask;
  ::sigemptyset(&forwarded);
  for (int signal : kForwardedSignals) ::sigaddset(&forwarded, signal);
  ::sigprocmask(SIG_BLOCK, &forwarded, &original_mask);
  struct sigaction action {};
  action.sa_sigaction = forward_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  ::sigemptyset(&action.sa_mask);
  SignalActions original_actions{};
  for (std::size_t i = 0; i < kForwardedSignals.size(); ++i) {
    ::sigaction(kForwardedSignals[i], &action, &original_actions[i]);
  }

  const Started started = start_program(args.command, original_mask, original_actions);
  if (started.pid > 0) g_child_pid = started.pid;
  ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);

  const std::string& program = args.command.front();
  if (started.pid < 0) {
    spdlog::error("cannot start {}: {}", program, std::strerror(started.exec_errno));
    return kExitUsage;
  }
  const int status = wait_for(started.pid);
  if (started.exec_errno != 0) {
    if (started.exec_errno == ENOENT && program.find('/') == std::string::npos) {
      spdlog::error("{}: command not found", program);
    } else {
      spdlog::error("{}: {}", program, std::strerror(started.exec_errno));
    }
    return started.exec_errno == ENOENT ? kExitCommandNotFound : kExitCannotExecute;
  }
  if (auto trace = expected_trace_path(output_template(args), started.pid)) {
    if (::access(trace->c_str(), F_OK) == 0) {
      spdlog::info("trace written to {}", *trace);
    } else {
      // The preload creates the file on the first allocation it sees.
      spdlog::info("no trace at {}: the program made no device allocation that cumemtrace saw",
                   *trace);
    }
  }
  // A failed program's status wins: the checks are still printed.
  if (check) {
    const int verdict = check->check_new_traces();
    return status != 0 ? status : verdict;
  }
  return status;
}

}  // namespace cumemtrace::cli
