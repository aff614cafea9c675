// Every way out of a process (issue 21), for tests/integration/exit_ways_test.cpp.
//
//   exit_ways WAY WHERE
//
// The process that leaves allocates ten 1 MiB buffers and frees one, prints
// its manifest (what its trace must hold), then leaves by WAY:
//
//   manifest pid=P allocs=A frees=F reason=R signal=S
//
// F counts the frees that exit handlers make on the way out (an atexit
// handler frees one buffer, an at_quick_exit handler another: each runs only
// where the C library runs it); R is the `end` line's reason, S its signal
// (0: none).
//
// WAY: return, exit, _exit, _Exit, quick_exit, exit_group and exit_thread
// (libc's syscall() with SYS_exit_group, and SYS_exit as the last thread),
// pthread_exit (as the last thread), execve, execv, execvp, execvpe, execl,
// execlp, execle, fexecve, execveat (each of /bin/sh -c 'exit 7'),
// signal (SIGTERM at its default), abort, terminate (std::terminate),
// vfork (two vfork children, which share our memory, leave at once, one
// with _exit(0), one with syscall(SYS_exit_group, 0); then exit(7)),
// handler-_exit / handler-exit (the program's SIGTERM handler calls _exit(3)
// / exit(3)), segv-_exit / segv-exit (the program's SIGSEGV handler calls
// _exit(4) / exit(4) after a fault).
//
// `exit_ways syscalls` checks that libc's syscall() still does what the
// kernel does for calls that do not end anything (six arguments, results,
// errno) and prints "syscalls ok", or what differed and exits 1.
//
// WHERE: main (the main thread), fork (a child forked at once, before
// anything else; the parent prints "child exit N" or "child signal N" and
// exits 0), thread (a second thread; for the ways that end only a thread the
// main thread leaves first with pthread_exit, so that the second is the
// last).
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "robustness_support.h"

namespace {

std::string g_way;
void* g_buffers[10] = {};

void frees_at_exit() { must_free(g_buffers[8]); }
void frees_at_quick_exit() { must_free(g_buffers[9]); }

// Ways that end only the calling thread: the process ends with its last one.
bool ends_a_thread(const std::string& way) {
  return way == "return" || way == "pthread_exit" || way == "exit_thread";
}

void exit_from_handler(int signo) {
  const int status = signo == SIGSEGV ? 4 : 3;
  if (g_way.ends_with("_exit")) _exit(status);
  std::exit(status);
}

void set_handler(int signo) {
  struct sigaction a {};
  a.sa_handler = exit_from_handler;
  sigemptyset(&a.sa_mask);
  sigaction(signo, &a, nullptr);
}

bool is_exec(const std::string& way) { return way.starts_with("exec") || way == "fexecve"; }

// Runs /bin/sh -c 'exit 7' in place of this program with `way`, the exec
// function of that name; returns if it failed.
void exec_shell(const std::string& way) {
  char sh[] = "sh", c[] = "-c", script[] = "exit 7";
  char* const argv[] = {sh, c, script, nullptr};
  if (way == "execve") execve("/bin/sh", argv, environ);
  if (way == "execv") execv("/bin/sh", argv);
  if (way == "execvp") execvp("sh", argv);
  if (way == "execvpe") execvpe("sh", argv, environ);
  if (way == "execl") execl("/bin/sh", sh, c, script, static_cast<char*>(nullptr));
  if (way == "execlp") execlp("sh", sh, c, script, static_cast<char*>(nullptr));
  if (way == "execle") execle("/bin/sh", sh, c, script, static_cast<char*>(nullptr), environ);
  if (way == "fexecve") {
    const int fd = open("/bin/sh", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) fexecve(fd, argv, environ);
  }
  if (way == "execveat") execveat(AT_FDCWD, "/bin/sh", argv, environ, 0);
}

// Allocates the pattern, prints the manifest, leaves. Returns only for
// "return" (from main or the thread's start function).
int allocate_and_leave() {
  const std::string& way = g_way;
  std::atexit(frees_at_exit);
  at_quick_exit(frees_at_quick_exit);
  if (way == "handler-_exit" || way == "handler-exit") set_handler(SIGTERM);
  if (way == "segv-_exit" || way == "segv-exit") set_handler(SIGSEGV);
  for (void*& p : g_buffers) p = must_malloc(1 << 20);
  must_free(g_buffers[0]);

  // What the trace must say.
  int frees = 1;
  const bool runs_atexit = way == "return" || way == "exit" || way == "vfork" || way == "pthread_exit" ||
                           way == "handler-exit" || way == "segv-exit";
  if (runs_atexit) ++frees;
  if (way == "quick_exit") ++frees;
  const char* reason = is_exec(way) ? "exec" : "exit";
  int signo = 0;
  if (way == "signal" || way.starts_with("handler-")) signo = SIGTERM;
  if (way == "abort" || way == "terminate") signo = SIGABRT;
  if (way.starts_with("segv-")) signo = SIGSEGV;
  if (signo != 0) reason = "signal";
  std::printf("manifest pid=%d allocs=10 frees=%d reason=%s signal=%d\n", getpid(), frees, reason, signo);
  std::fflush(stdout);

  if (way == "return") return 7;
  if (way == "exit") std::exit(7);
  if (way == "vfork") {
    for (const bool through_syscall : {false, true}) {
      const pid_t child = vfork();
      if (child == 0) {
        if (through_syscall) syscall(SYS_exit_group, 0);
        _exit(0);
      }
      int status = -1;
      if (child < 0 || waitpid(child, &status, 0) != child || status != 0) _exit(35);
    }
    std::exit(7);
  }
  if (way == "_exit") _exit(7);
  if (way == "_Exit") std::_Exit(7);
  if (way == "quick_exit") std::quick_exit(7);
  if (way == "exit_group") syscall(SYS_exit_group, 7);
  if (way == "exit_thread") syscall(SYS_exit, 7);
  if (way == "pthread_exit") pthread_exit(nullptr);
  if (is_exec(way)) {
    exec_shell(way);
    std::perror(("exit_ways: " + way).c_str());
    _exit(30);
  }
  if (way == "signal" || way.starts_with("handler-")) raise(SIGTERM);
  if (way == "abort") std::abort();
  if (way == "terminate") std::terminate();
  if (way.starts_with("segv-")) {
    // A store to a page mapped without access: a real SIGSEGV (through a
    // null pointer it is undefined, and UBSan stops it).
    void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page != MAP_FAILED) *static_cast<volatile int*>(page) = 1;
  }
  std::fprintf(stderr, "exit_ways: %s did not leave\n", way.c_str());
  _exit(31);
}

// This thread is the process's only one left: the main thread is a zombie
// (it called pthread_exit). Waited for, so that the second thread leaves as
// the last one every time (else which of the two is last is a race).
void wait_until_main_thread_is_gone() {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", getpid());
  for (int tries = 0; tries < 10000; ++tries) {
    if (FILE* f = std::fopen(path, "r")) {
      char buf[512] = {};
      const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      const char* paren = n > 0 ? std::strrchr(buf, ')') : nullptr;
      if (paren != nullptr && paren[1] == ' ' && paren[2] == 'Z') return;
    }
    usleep(1000);
  }
}

void* thread_main(void*) {
  if (ends_a_thread(g_way)) wait_until_main_thread_is_gone();
  allocate_and_leave();  // "return": the start function returns
  return nullptr;
}

// Calls through syscall() that cumemtrace only passes on.
int check_syscalls() {
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("syscalls: %s\n", what);
      ++failures;
    }
  };
  expect(syscall(SYS_getpid) == getpid(), "getpid");
  expect(syscall(SYS_gettid) == gettid(), "gettid");
  errno = 0;
  expect(syscall(SYS_close, -1) == -1 && errno == EBADF, "close(-1): -1 and EBADF");
  // Six arguments, the last one on the stack of the variadic call.
  void* p = reinterpret_cast<void*>(
      syscall(SYS_mmap, 0L, 8192L, long{PROT_READ | PROT_WRITE}, long{MAP_PRIVATE | MAP_ANONYMOUS}, -1L, 0L));
  expect(p != MAP_FAILED, "mmap with six arguments");
  if (p != MAP_FAILED) {
    static_cast<char*>(p)[8191] = 1;
    expect(syscall(SYS_munmap, p, 8192L) == 0, "munmap");
  }
  const int fd = static_cast<int>(syscall(SYS_memfd_create, "exit_ways", 0L));
  expect(fd >= 0, "memfd_create");
  const char text[] = "abcdef";
  expect(syscall(SYS_pwrite64, fd, text, 6L, 4096L) == 6, "pwrite64 at an offset");
  char back[6] = {};
  expect(pread(fd, back, 6, 4096) == 6 && std::memcmp(back, text, 6) == 0, "what pwrite64 wrote");
  // The sixth argument matters here: the file's second page.
  void* page = reinterpret_cast<void*>(syscall(SYS_mmap, 0L, 4096L, long{PROT_READ}, long{MAP_SHARED}, long{fd}, 4096L));
  expect(page != MAP_FAILED && std::memcmp(page, text, 6) == 0, "mmap of a file at an offset (six arguments)");
  if (page != MAP_FAILED) munmap(page, 4096);
  close(fd);
  errno = 0;
  expect(syscall(99999) == -1 && errno == ENOSYS, "an unknown number: -1 and ENOSYS");
  if (failures == 0) std::printf("syscalls ok\n");
  return failures == 0 ? 0 : 1;
}

std::string status_text(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "other";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "syscalls") return check_syscalls();
  if (argc != 3) {
    std::fprintf(stderr, "usage: exit_ways WAY main|fork|thread, or exit_ways syscalls\n");
    return 2;
  }
  g_way = argv[1];
  const std::string where = argv[2];
  if (where == "main") return allocate_and_leave();
  if (where == "fork") {
    const pid_t child = fork();
    if (child < 0) return 32;
    if (child == 0) return allocate_and_leave();  // at once after the fork
    int status = 0;
    if (waitpid(child, &status, 0) != child) return 33;
    std::printf("child %s\n", status_text(status).c_str());
    return 0;
  }
  if (where == "thread") {
    pthread_t thread;
    if (pthread_create(&thread, nullptr, thread_main, nullptr) != 0) return 34;
    if (ends_a_thread(g_way)) pthread_exit(nullptr);
    for (;;) pause();
  }
  std::fprintf(stderr, "exit_ways: unknown WHERE %s\n", where.c_str());
  return 2;
}
