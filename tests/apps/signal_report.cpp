// A program that says which signals reach it, for `cumemtrace run`'s
// signal tests (tests/integration/run_signals_test.cpp). It holds one device
// allocation, so that it has a trace, prints "pid N" and "ready", then:
//
//   signal_report            catches every signal it can; prints "got N" for
//                            each (with "value V" for one sent by sigqueue),
//                            and on SIGTERM frees its memory and exits 3
//   signal_report kill-self  SIGKILLs itself: a trace without an end line
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "robustness_support.h"

namespace {

volatile sig_atomic_t g_terminate = 0;

// Appends `n` in decimal: the handler may not call printf.
char* put_number(char* out, long n) {
  char digits[24];
  int count = 0;
  const bool negative = n < 0;
  unsigned long u = negative ? 0UL - static_cast<unsigned long>(n) : static_cast<unsigned long>(n);
  do {
    digits[count++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (negative) *out++ = '-';
  while (count > 0) *out++ = digits[--count];
  return out;
}

void report(int signo, siginfo_t* info, void*) {
  char line[64];
  char* end = put_number(std::strcpy(line, "got ") + 4, signo);
  if (info != nullptr && info->si_code == SI_QUEUE) {
    end = put_number(std::strcpy(end, " value ") + 7, info->si_value.sival_int);
  }
  *end++ = '\n';
  ssize_t ignored = write(STDOUT_FILENO, line, static_cast<size_t>(end - line));
  (void)ignored;
  if (signo == SIGTERM) g_terminate = 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  void* held = must_malloc(1 << 20);
  std::printf("pid %ld\n", static_cast<long>(getpid()));
  if (mode == "kill-self") {
    std::fflush(stdout);
    kill(getpid(), SIGKILL);
  }
  if (!mode.empty()) {
    std::fprintf(stderr, "usage: signal_report [kill-self]\n");
    return 2;
  }
  // SIGTERM stays blocked but in sigsuspend, so its flag is never missed.
  sigset_t term, waiting;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, &waiting);
  struct sigaction action {};
  action.sa_sigaction = report;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  // Every signal but SIGKILL and SIGSTOP; glibc refuses its own (32, 33).
  for (int signo = 1; signo <= SIGRTMAX; ++signo) {
    if (signo != SIGKILL && signo != SIGSTOP) sigaction(signo, &action, nullptr);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  while (g_terminate == 0) sigsuspend(&waiting);
  must_free(held);
  return 3;
}
