// A program that ends badly, for the robustness tests: it allocates a known
// pattern (6 cudaMalloc, 2 cudaFree: 4 buffers live), prints "ready", then
// waits for a signal, faults, aborts, or fills its file-size limit.
//
//   survive_signals wait                      wait for any signal (default actions)
//   survive_signals handler before|after|sysv exit|continue|reraise
//        SIGINT/SIGTERM handlers installed before the first CUDA call or after
//        the trace is open (sysv: after, with sysv_signal, which does not go
//        through sigaction: cumemtrace finds it on its next flush); on the signal they exit(3) from the handler, or
//        set a flag after which main frees everything and returns 0, or
//        (reraise) frees everything, restores the default action and sends
//        itself the signal again, as CPython does after a KeyboardInterrupt
//   survive_signals segv | abort              fault after the pattern
//   survive_signals segv-handler              a program SIGSEGV handler that
//        reports, restores the default and returns (the fault repeats)
//   survive_signals fill BYTES ignore|default 2000 cudaMalloc/cudaFree pairs
//        under RLIMIT_FSIZE=BYTES, SIGXFSZ ignored or left at its default
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "robustness_support.h"

namespace {

std::vector<void*> live;
volatile sig_atomic_t g_signalled = 0;

void allocate_pattern() {
  for (size_t mib = 1; mib <= 6; ++mib) live.push_back(must_malloc(mib << 20));
  must_free(live[1]);
  must_free(live[4]);
  live.erase(live.begin() + 4);
  live.erase(live.begin() + 1);
}

void ready() {
  std::printf("ready\n");
  std::fflush(stdout);
}

void exit_from_handler(int) { std::exit(3); }
void set_flag(int signo) { g_signalled = signo; }

void install(void (*handler)(int)) {
  struct sigaction a {};
  a.sa_handler = handler;
  sigemptyset(&a.sa_mask);
  sigaction(SIGINT, &a, nullptr);
  sigaction(SIGTERM, &a, nullptr);
}

void report_and_restore(int signo) {
  static const char kMessage[] = "survive_signals: program SIGSEGV handler ran\n";
  ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  (void)ignored;
  signal(signo, SIG_DFL);  // returning repeats the fault, which now kills
}

int usage() {
  std::fprintf(stderr, "usage: survive_signals wait|handler|segv|abort|segv-handler|fill ...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  if (mode == "wait") {
    allocate_pattern();
    ready();
    for (;;) pause();
  }
  if (mode == "handler" && argc == 4) {
    const bool before = std::strcmp(argv[2], "before") == 0;
    const bool sysv = std::strcmp(argv[2], "sysv") == 0;
    void (*handler)(int) = std::strcmp(argv[3], "exit") == 0 ? exit_from_handler : set_flag;
    if (before) install(handler);
    allocate_pattern();
    if (sysv) {
      sysv_signal(SIGINT, handler);
      sysv_signal(SIGTERM, handler);
    } else if (!before) {
      install(handler);
    }
    // SIGINT and SIGTERM blocked from before "ready" until sigsuspend opens
    // them atomically: with "while (!flag) pause()" a signal handled between
    // the test and the pause is lost and the program sleeps forever.
    sigset_t stop_signals, waiting;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop_signals, &waiting);
    ready();
    while (!g_signalled) sigsuspend(&waiting);
    sigprocmask(SIG_SETMASK, &waiting, nullptr);
    for (void* p : live) must_free(p);
    if (std::strcmp(argv[3], "reraise") == 0) {
      const int signo = g_signalled;
      signal(signo, SIG_DFL);
      kill(getpid(), signo);
    }
    return 0;
  }
  if (mode == "segv" || mode == "segv-handler") {
    allocate_pattern();
    if (mode == "segv-handler") signal(SIGSEGV, report_and_restore);
    // A store to a page mapped without access: a real SIGSEGV, which a
    // store through a null pointer is not guaranteed to be (it is undefined:
    // GCC may turn it into a trap instruction, SIGILL, and UBSan stops it).
    void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 2;
    *static_cast<volatile int*>(page) = 1;
    return 0;
  }
  if (mode == "abort") {
    allocate_pattern();
    std::abort();
  }
  if (mode == "fill" && argc == 4) {
    const rlim_t limit = std::strtoull(argv[2], nullptr, 10);
    const rlimit r{limit, limit};
    if (setrlimit(RLIMIT_FSIZE, &r) != 0) return 22;
    if (std::strcmp(argv[3], "ignore") == 0) signal(SIGXFSZ, SIG_IGN);
    for (int i = 0; i < 2000; ++i) must_free(must_malloc(4096 + 512 * static_cast<size_t>(i % 7)));
    std::printf("pairs 2000\n");
    return 0;
  }
  return usage();
}
