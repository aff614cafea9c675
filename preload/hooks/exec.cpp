// Exported exec functions: a process that execs another program replaces its
// memory without running exit handlers, so whatever the writer had not yet
// written would be lost and the trace would have no `end`. Before the real
// exec, everything is written with `end` (reason exec); if the exec fails,
// that `end` is taken back and recording goes on.
//
// The C library's exec functions call the execve system call directly, not
// through execve(), so each is wrapped. Kept cheap and safe:
//  - a process with no open trace (a shell, a compiler) only pays a load;
//  - a vfork child (Python's subprocess uses vfork) shares the parent's
//    memory: the writer checks the pid and touches nothing there;
//  - exec may be called from a signal handler: the writer's exec path is
//    async-signal-safe.
// posix_spawn and system() do not go through these (their children exec
// inside the C library), and need not: they start a new process.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>

#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))

namespace cumemtrace::preload {
namespace {

using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using ExecvFn = int (*)(const char*, char* const[]);
using FexecveFn = int (*)(int, char* const[], char* const[]);
using ExecveatFn = int (*)(int, const char*, char* const[], char* const[], int);

struct RealExec {
  ExecveFn execve = nullptr;
  ExecvFn execv = nullptr;
  ExecvFn execvp = nullptr;
  ExecveFn execvpe = nullptr;
  FexecveFn fexecve = nullptr;
  ExecveatFn execveat = nullptr;
};
RealExec g_real;

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(find_real_symbol(name));
}

// Writes `end` (exec) before the exec; takes it back if the exec returns.
class ExecGuard {
 public:
  ExecGuard() : recorder_(recorder_if_any()) {
    began_ = recorder_ != nullptr && recorder_->on_exec_begin();
  }
  ~ExecGuard() {
    if (!began_) return;
    const int err = errno;
    recorder_->on_exec_failed();
    errno = err;
  }
  ExecGuard(const ExecGuard&) = delete;
  ExecGuard& operator=(const ExecGuard&) = delete;

 private:
  Recorder* recorder_;
  bool began_ = false;
};

int missing() {
  errno = ENOSYS;
  return -1;
}

// Calls exec(argv) with execl-style arguments (`first`, then `args` up to a
// null pointer) gathered into an argv on this function's stack: exec may run
// in a vfork child or a signal handler, where nothing may be allocated.
template <typename Exec>
int with_exec_args(const char* first, va_list* args, Exec exec) {
  va_list scan;
  va_copy(scan, *args);
  std::size_t count = 1;
  while (va_arg(scan, const char*) != nullptr) ++count;
  va_end(scan);
  auto** argv = static_cast<char**>(__builtin_alloca((count + 1) * sizeof(char*)));
  argv[0] = const_cast<char*>(first);
  for (std::size_t i = 1; i <= count; ++i) argv[i] = va_arg(*args, char*);
  return exec(argv);
}

}  // namespace

void resolve_exec_functions() {
  g_real.execve = next<ExecveFn>("execve");
  g_real.execv = next<ExecvFn>("execv");
  g_real.execvp = next<ExecvFn>("execvp");
  g_real.execvpe = next<ExecveFn>("execvpe");
  g_real.fexecve = next<FexecveFn>("fexecve");
  g_real.execveat = next<ExecveatFn>("execveat");
}

}  // namespace cumemtrace::preload

using cumemtrace::preload::ExecGuard;
using cumemtrace::preload::g_real;
using cumemtrace::preload::with_exec_args;
using cumemtrace::preload::missing;

CUMEMTRACE_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  if (g_real.execve == nullptr) return missing();
  ExecGuard guard;
  return g_real.execve(path, argv, envp);
}

CUMEMTRACE_EXPORT int execv(const char* path, char* const argv[]) noexcept {
  if (g_real.execv == nullptr) return missing();
  ExecGuard guard;
  return g_real.execv(path, argv);
}

CUMEMTRACE_EXPORT int execvp(const char* file, char* const argv[]) noexcept {
  if (g_real.execvp == nullptr) return missing();
  ExecGuard guard;
  return g_real.execvp(file, argv);
}

CUMEMTRACE_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
  if (g_real.execvpe == nullptr) return missing();
  ExecGuard guard;
  return g_real.execvpe(file, argv, envp);
}

CUMEMTRACE_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
  if (g_real.fexecve == nullptr) return missing();
  ExecGuard guard;
  return g_real.fexecve(fd, argv, envp);
}

CUMEMTRACE_EXPORT int execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
                               int flags) noexcept {
  if (g_real.execveat == nullptr) return missing();
  ExecGuard guard;
  return g_real.execveat(dirfd, path, argv, envp, flags);
}

CUMEMTRACE_EXPORT int execl(const char* path, const char* arg, ...) noexcept {
  va_list args;
  va_start(args, arg);
  const int rc = with_exec_args(arg, &args, [&](char** argv) { return execv(path, argv); });
  va_end(args);
  return rc;
}

CUMEMTRACE_EXPORT int execlp(const char* file, const char* arg, ...) noexcept {
  va_list args;
  va_start(args, arg);
  const int rc = with_exec_args(arg, &args, [&](char** argv) { return execvp(file, argv); });
  va_end(args);
  return rc;
}

CUMEMTRACE_EXPORT int execle(const char* path, const char* arg, ...) noexcept {
  va_list args;
  va_start(args, arg);
  const int rc = with_exec_args(arg, &args, [&](char** argv) {
    char* const* envp = va_arg(args, char* const*);  // after the null pointer
    return execve(path, argv, envp);
  });
  va_end(args);
  return rc;
}
