// The ways out of a process that run no exit handler, so that our
// destructor (hook_support.cpp) never writes the trace's `end`: exported
// _exit and _Exit, syscall() for SYS_exit_group and the last thread's
// SYS_exit, and an at_quick_exit handler. Each writes everything recorded and
// `end` (reason exit) before the real call; the program's exit status and
// everything it sees are unchanged.
//
// glibc's exit() and quick_exit() reach _exit through internal aliases, not
// the PLT: an exported _exit sees only the program's direct calls (and
// Python's os._exit, multiprocessing's fork children). quick_exit runs the
// at_quick_exit handlers, newest first, then ends the process: ours is
// registered at load, before any of the program's, so it runs after them and
// the frees they make are in the trace.
//
// Where these may run, and what that allows:
//  - a vfork child (Python's subprocess, posix_spawn fallbacks) shares the
//    parent's memory: it touches nothing (g_owner below);
//  - a signal handler: the program's own handler of a signal we watch
//    (signals::program_handler_signal) ends the trace with reason signal,
//    as an exit() there does; a handler that interrupted one of our hooks on
//    this thread (which may hold our locks) takes the async-signal-safe path.
//    A handler of another signal, outside our hooks, takes the exit path, as
//    exit() does there;
//  - syscall() is called often by some programs (futex, gettid): every other
//    number costs a comparison and the forwarded call.
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <ctime>

#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"
#include "signals/handlers.h"

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))

namespace cumemtrace::preload {
namespace {

using ExitFn = void (*)(int);
using SyscallFn = long (*)(long, ...);

std::atomic<ExitFn> g_real_exit{nullptr};
std::atomic<SyscallFn> g_real_syscall{nullptr};
// The process whose memory this is. A vfork child shares the memory (and
// this value) but has a pid of its own; a forked child sets its own.
std::atomic<pid_t> g_owner{0};

// What glibc's syscall() does, for calls made before load found the real
// one (another library's constructor): the kernel's result, errno set from
// an error.
long kernel_call(long n, long a, long b, long c, long d, long e, long f) {
  long ret;
#if defined(__x86_64__)
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
#elif defined(__aarch64__)
  register long x8 asm("x8") = n;
  register long x0 asm("x0") = a;
  register long x1 asm("x1") = b;
  register long x2 asm("x2") = c;
  register long x3 asm("x3") = d;
  register long x4 asm("x4") = e;
  register long x5 asm("x5") = f;
  asm volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  ret = x0;
#else
#error "kernel_call: x86-64 and AArch64 only"
#endif
  if (ret < 0 && ret > -4096) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return ret;
}

long forward(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  if (SyscallFn real = g_real_syscall.load(std::memory_order_relaxed)) [[likely]] return real(n, a, b, c, d, e, f);
  return kernel_call(n, a, b, c, d, e, f);
}

[[noreturn]] void leave_process(int status) {
  if (ExitFn real = g_real_exit.load(std::memory_order_relaxed)) real(status);
  for (;;) kernel_call(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

bool owned_by_this_process() { return g_owner.load(std::memory_order_relaxed) == ::getpid(); }

// Writes everything recorded and `end`, on a way out that runs no exit
// handler. Async-signal-safe where it must be (see the top of the file).
void end_trace_before_leaving() noexcept {
  if (!owned_by_this_process()) return;  // a vfork child: nothing here is its own
  Recorder* r = recorder_if_any();
  if (r == nullptr) return;
  const int saved_errno = errno;
  if (const int signo = signals::program_handler_signal(); signo != 0) {
    r->on_fatal_signal(signo);  // leaving from the program's handler: because of the signal
  } else if (ReentryGuard::active()) {
    r->on_exit_from_signal();
  } else {
    try {
      r->on_exit();
    } catch (...) {
    }
  }
  errno = saved_errno;
}

// ---- the last thread's SYS_exit --------------------------------------------

// Only open/read/close and the kernel's getdents64: no allocation, no lock
// (a thread may leave from a signal handler).
int read_small(const char* path, char* buf, int size) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = ::read(fd, buf, static_cast<std::size_t>(size));
  ::close(fd);
  return static_cast<int>(n);
}

// "/proc/self/task/<tid>/<leaf>" into `out` (64 bytes).
void task_path(char* out, long tid, const char* leaf) {
  const char prefix[] = "/proc/self/task/";
  char* o = out;
  for (const char* p = prefix; *p != '\0'; ++p) *o++ = *p;
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + tid % 10);
    tid /= 10;
  } while (tid > 0 && n < 20);
  while (n > 0) *o++ = digits[--n];
  *o++ = '/';
  for (const char* p = leaf; *p != '\0' && o < out + 63; ++p) *o++ = *p;
  *o = '\0';
}

enum class Task { gone, writer, program };

// What thread `tid` is now: gone (or a zombie: a main thread that called
// pthread_exit stays one until the process ends), cumemtrace's writer
// thread, or a thread of the program.
Task task_kind(long tid) {
  char path[64], buf[512];
  task_path(path, tid, "stat");
  const int n = read_small(path, buf, sizeof buf - 1);
  if (n <= 0) return Task::gone;
  const char* state = nullptr;
  for (int i = n - 1; i >= 0 && state == nullptr; --i) {
    if (buf[i] == ')' && i + 2 < n) state = &buf[i + 2];
  }
  if (state != nullptr && (*state == 'Z' || *state == 'X' || *state == 'x')) return Task::gone;
  static constexpr char kWriter[] = "cumemtrace-io\n";  // flush_thread.cpp names it so
  task_path(path, tid, "comm");
  const int m = read_small(path, buf, sizeof buf);
  if (m != static_cast<int>(sizeof kWriter - 1)) return Task::program;
  for (int i = 0; i < m; ++i) {
    if (buf[i] != kWriter[i]) return Task::program;
  }
  return Task::writer;
}

struct OtherTasks {
  bool program = false;  // a thread of the program runs (or it cannot be told)
  bool writer = false;   // our writer thread runs
};

// The threads other than the calling one, as far as the answer needs.
// `any`: whether any runs at all, the writer too (said as `program`).
OtherTasks other_tasks(bool any) {
  OtherTasks found;
  const int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    found.program = true;  // cannot tell: the caller leaves the trace alone
    return found;
  }
  const long self = forward(SYS_gettid);
  struct Entry {  // the kernel's linux_dirent64
    std::uint64_t ino;
    std::int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
  };
  alignas(8) char buf[2048];
  auto done = [&] { return found.program && (any || found.writer); };
  for (long n; !done() && (n = forward(SYS_getdents64, dir, reinterpret_cast<long>(buf), sizeof buf)) > 0;) {
    for (long at = 0; at < n && !done();) {
      const auto* e = reinterpret_cast<const Entry*>(buf + at);
      at += e->reclen;
      long tid = 0;
      for (const char* p = e->name; *p >= '0' && *p <= '9'; ++p) tid = tid * 10 + (*p - '0');
      if (tid <= 0 || tid == self) continue;
      switch (task_kind(tid)) {
        case Task::gone: break;
        case Task::writer: found.writer = true; break;
        case Task::program: found.program = true; break;
      }
      if (any && found.writer) found.program = true;
    }
  }
  ::close(dir);
  return found;
}

// Whether the calling thread is the program's last. The writer thread is
// told from the program's by its name, which it gives itself when it starts:
// while the trace is open and no thread has that name yet, one of the
// others may be the writer before it named itself (a process that leaves
// moments after its first event), so the question is asked again, for up
// to 50 ms.
bool last_program_thread() {
  const timespec ms{0, 1'000'000};
  for (int tries = 0;; ++tries) {
    const OtherTasks others = other_tasks(/*any=*/false);
    if (!others.program) return true;
    if (others.writer || tries == 50) return false;
    nanosleep(&ms, nullptr);
  }
}

// SYS_exit ends the calling thread only; the process ends with its last.
void end_trace_if_last_thread() noexcept {
  if (!owned_by_this_process()) return;
  Recorder* r = recorder_if_any();
  if (r == nullptr || !r->writer().is_open() || !last_program_thread()) return;
  end_trace_before_leaving();
  // The writer thread, told to stop, must leave first: the kernel reports
  // the exit status of the process's last thread (up to 2 s: a write stuck
  // on a dead file system must not hold the program).
  const timespec ms{0, 1'000'000};
  for (int i = 0; i < 2000 && other_tasks(/*any=*/true).program; ++i) nanosleep(&ms, nullptr);
}

void on_quick_exit() { end_trace_before_leaving(); }

void fork_child_owns_its_memory() { g_owner.store(::getpid(), std::memory_order_relaxed); }

}  // namespace

void install_exit_hooks() {
  g_real_exit.store(reinterpret_cast<ExitFn>(find_real_symbol("_exit")), std::memory_order_relaxed);
  g_real_syscall.store(reinterpret_cast<SyscallFn>(find_real_symbol("syscall")), std::memory_order_relaxed);
  g_owner.store(::getpid(), std::memory_order_relaxed);
  pthread_atfork(nullptr, nullptr, &fork_child_owns_its_memory);
  at_quick_exit(&on_quick_exit);
}

}  // namespace cumemtrace::preload

using cumemtrace::preload::end_trace_before_leaving;
using cumemtrace::preload::end_trace_if_last_thread;
using cumemtrace::preload::forward;
using cumemtrace::preload::leave_process;

CUMEMTRACE_EXPORT void _exit(int status) {
  end_trace_before_leaving();
  leave_process(status);
}

// The same function as _exit in glibc, under C99's name.
CUMEMTRACE_EXPORT void _Exit(int status) noexcept {
  end_trace_before_leaving();
  leave_process(status);
}

// Variadic like the real one: six arguments are passed on unchanged
// whatever the call takes (as glibc's does, which reads six registers).
CUMEMTRACE_EXPORT long syscall(long number, ...) noexcept {
  va_list args;
  va_start(args, number);
  const long a = va_arg(args, long), b = va_arg(args, long), c = va_arg(args, long);
  const long d = va_arg(args, long), e = va_arg(args, long), f = va_arg(args, long);
  va_end(args);
  if (number == SYS_exit_group) [[unlikely]] {
    end_trace_before_leaving();
  } else if (number == SYS_exit) [[unlikely]] {
    end_trace_if_last_thread();
  }
  return forward(number, a, b, c, d, e, f);
}
