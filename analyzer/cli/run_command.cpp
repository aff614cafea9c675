// `cumemtrace run [OPTIONS] -- CMD ARGS...`: runs a program with
// libcumemtrace.so preloaded, its options passed on as CUMEMTRACE_*
// variables, and exits as the program did.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "config/config.h"
#include "cumemtrace/output_template.h"
#include "cumemtrace/trace_format.h"
#include "exit_codes.h"

namespace cumemtrace::cli {

namespace {

constexpr const char* kLibraryName = "libcumemtrace.so";
constexpr const char* kLibraryEnv = "CUMEMTRACE_LIBRARY";
// NVTX loads the tool named here into programs that use NVTX ranges: ours,
// already preloaded, turns them into `mark` events.
constexpr const char* kNvtxInjectionEnv = "NVTX_INJECTION64_PATH";
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
    if (const auto problem = preload::option_value_problem(option.env, *value)) {
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
  run->add_option("command", args.command, "The program and its arguments (after --)")->required();
  // Everything from the program's name on belongs to the program, options included.
  run->positionals_at_end();
  return run;
}

int run_command(const RunArgs& args) {
  const std::optional<std::string> library = find_preload_library();
  if (!library || !pass_options_on(args, *library) || !add_to_ld_preload(*library)) return kExitUsage;
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
