// Exported sigaction, signal and bsd_signal: the program's view of the
// signals whose handlers cumemtrace keeps in front (signals/handlers.h). Every
// other signal goes straight to the C library's implementation.
#include <signal.h>

#include "signals/handlers.h"

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))

using namespace cumemtrace::preload;

CUMEMTRACE_EXPORT int sigaction(int signo, const struct sigaction* act, struct sigaction* old) noexcept {
  return signals::program_sigaction(signo, act, old);
}

CUMEMTRACE_EXPORT sighandler_t signal(int signo, sighandler_t handler) noexcept {
  return signals::program_signal(signo, handler);
}

// The same function as signal in glibc, under its older name.
CUMEMTRACE_EXPORT sighandler_t bsd_signal(int signo, sighandler_t handler) noexcept {
  return signals::program_signal(signo, handler);
}
