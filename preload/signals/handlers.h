// The trace survives the signals that end a process: SIGINT, SIGTERM,
// SIGHUP, SIGQUIT and the faults SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL.
//
// Once the trace is open (not before: a process that records nothing keeps
// its signal handling untouched) our handler sits in front of whatever the
// program installed. On delivery it writes what the threads have recorded,
// async-signal-safely, then:
//  - the program's own handler is called, as the kernel would have called it
//    (same mask and flags; SA_RESETHAND emulated); a program that exits from
//    it gets `end` with reason signal;
//  - with no handler (SIG_DFL), `end` (reason signal) is written, the default
//    disposition restored and the signal raised again, so the exit status,
//    the core dump and a fault's address are what they would have been;
//  - an ignored signal (SIG_IGN) is never taken over.
//
// Programs install handlers after we do (Python and PyTorch set SIGINT,
// faulthandler the faults). Like the JVM's libjsig, the preload exports
// sigaction, signal and bsd_signal (signals/sigaction_hooks.cpp): for the signals above
// it records the program's action, keeps ours in front of it, and answers
// with the program's own action, so the program sees exactly what it set. A
// handler set without those functions (a raw rt_sigaction system call,
// sysv_signal, sigset) is found by recheck() on the writer thread within one
// flush interval and put behind ours the same way.
#pragma once

#include <signal.h>

namespace cumemtrace::preload::signals {

// Takes over the signals above (idempotent). Called when the trace opens.
void install();

// Adopts handlers that were installed behind our back (see above).
void recheck();

// In a forked child: the lock of the functions below may have been held by a
// thread of the parent, which does not exist here.
void forget_lock_after_fork();

// True while this thread runs a program handler we called for a signal
// above: a program that exits from it exits because of the signal.
bool in_program_handler();
// The signal whose program handler this thread runs (the innermost), 0 if none.
int program_handler_signal();

// The program's view of sigaction and signal (BSD semantics, like glibc's).
int program_sigaction(int signo, const struct sigaction* act, struct sigaction* old);
sighandler_t program_signal(int signo, sighandler_t handler);

}  // namespace cumemtrace::preload::signals
