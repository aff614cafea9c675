#include "signals/handlers.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "hooks/hook_support.h"

// glibc's sigaction under the name our exported `sigaction` does not replace
// (GLIBC_2.2.5, the same function): the kernel's disposition is set with it.
extern "C" int __sigaction(int signo, const struct sigaction* act, struct sigaction* old);

namespace cumemtrace::preload::signals {
namespace {

constexpr int kWatched[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
constexpr int kCount = sizeof kWatched / sizeof kWatched[0];

// The handler part of the program's action, packed into one word so that
// the signal handler reads a consistent (handler, SA_SIGINFO, SA_RESETHAND)
// without a lock. User-space code addresses fit in 56 bits on x86-64 and
// AArch64; SIG_DFL (0) and SIG_IGN (1) pack as themselves.
static_assert(sizeof(void*) == 8);
constexpr std::uint64_t kSiginfoBit = 1ull << 62;
constexpr std::uint64_t kResetBit = 1ull << 61;
constexpr std::uint64_t kAddressMask = (1ull << 56) - 1;

struct Watched {
  // What the program believes is installed: the whole action (mask and
  // flags, for sigaction's `old`), under g_lock...
  struct sigaction program{};
  // ...and the part the handler needs, readable at any time.
  std::atomic<std::uint64_t> packed{0};
  bool ours_in_kernel = false;  // under g_lock
};

Watched g_watched[kCount];
bool g_installed = false;  // under g_lock
// The process whose table g_watched is. A vfork child (Python's subprocess)
// shares our memory but not our signal dispositions: its sigaction calls go
// straight to the kernel and must not touch the table.
std::atomic<pid_t> g_owner{0};

// The lock of the functions above; a signal handler never takes it. Held by
// a thread id; the same thread entering again (sigaction called from a
// handler that interrupted our own sigaction) goes ahead without it.
std::atomic<pid_t> g_lock{0};

// The signal whose program handler this thread runs now (0: none).
thread_local int t_program_signal __attribute__((tls_model("initial-exec"))) = 0;

// Not cached: a forked child's thread would keep its parent's id.
pid_t this_thread() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

class Locked {
 public:
  Locked() : self_(this_thread()) {
    for (;;) {
      pid_t holder = 0;
      if (g_lock.compare_exchange_weak(holder, self_, std::memory_order_acquire)) {
        owned_ = true;
        return;
      }
      if (holder == self_) return;
      sched_yield();
    }
  }
  ~Locked() {
    if (owned_) g_lock.store(0, std::memory_order_release);
  }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  pid_t self_;
  bool owned_ = false;
};

Watched* watched(int signo) {
  for (int i = 0; i < kCount; ++i) {
    if (kWatched[i] == signo) return &g_watched[i];
  }
  return nullptr;
}

std::uint64_t handler_address(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) != 0 ? reinterpret_cast<std::uintptr_t>(a.sa_sigaction)
                                        : reinterpret_cast<std::uintptr_t>(a.sa_handler);
}

std::uint64_t pack(const struct sigaction& a) {
  std::uint64_t word = handler_address(a) & kAddressMask;
  if ((a.sa_flags & SA_SIGINFO) != 0) word |= kSiginfoBit;
  if ((a.sa_flags & SA_RESETHAND) != 0) word |= kResetBit;
  return word;
}

bool faults_again_on_return(int signo, const siginfo_t* info) {
  // A fault the kernel raised (si_code > 0) happens again when the handler
  // returns to the faulting instruction: the default action then sees the
  // original fault (address, core dump) rather than a re-sent signal.
  const bool fault = signo == SIGSEGV || signo == SIGBUS || signo == SIGFPE || signo == SIGILL;
  return fault && info != nullptr && info->si_code > 0;
}

void on_signal(int signo, siginfo_t* info, void* context);

bool is_ours(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) != 0 && a.sa_sigaction == &on_signal;
}

// Puts our handler in the kernel in front of `program`, with the program's
// mask and flags, so its handler runs as it would have without us.
int install_in_front_of(int signo, Watched& w, const struct sigaction& program) {
  struct sigaction ours = program;
  ours.sa_sigaction = &on_signal;
  const bool has_handler = program.sa_handler != SIG_DFL;
  // SA_RESETHAND is emulated (we must stay in front); SA_ONSTACK lets the
  // handler run on a thread's alternate stack when the fault is a stack
  // overflow.
  ours.sa_flags = (has_handler ? program.sa_flags & ~SA_RESETHAND : SA_ONSTACK | SA_RESTART) | SA_SIGINFO;
  if (!has_handler) sigemptyset(&ours.sa_mask);
  const int rc = __sigaction(signo, &ours, nullptr);
  if (rc == 0) w.ours_in_kernel = true;
  return rc;
}

// Adopts `program` as the program's action for `signo` (g_lock held).
int adopt(int signo, Watched& w, const struct sigaction& program) {
  if (program.sa_handler == SIG_IGN) {
    // Ignored signals are left to the kernel: a handler, even one that does
    // nothing, would interrupt system calls.
    if (__sigaction(signo, &program, nullptr) != 0) return -1;
    w.ours_in_kernel = false;
  } else if (install_in_front_of(signo, w, program) != 0) {
    return -1;
  }
  w.program = program;
  w.packed.store(pack(program), std::memory_order_release);
  return 0;
}

void raise_default(int signo, const siginfo_t* info) {
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  __sigaction(signo, &dfl, nullptr);
  if (Watched* w = watched(signo)) w->ours_in_kernel = false;
  if (faults_again_on_return(signo, info)) return;
  // Blocked while this handler runs: delivered, with its default action, as
  // soon as the handler returns.
  ::syscall(SYS_tgkill, ::getpid(), this_thread(), signo);
}

void on_signal(int signo, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  Watched* w = watched(signo);
  const std::uint64_t word = w != nullptr ? w->packed.load(std::memory_order_acquire) : 0;
  const std::uint64_t address = word & kAddressMask;
  Recorder* r = recorder_if_any();
  if (address == reinterpret_cast<std::uintptr_t>(SIG_IGN)) {
    errno = saved_errno;
    return;
  }
  if (address == reinterpret_cast<std::uintptr_t>(SIG_DFL)) {
    if (r != nullptr) r->on_fatal_signal(signo);
    raise_default(signo, info);
    errno = saved_errno;
    return;
  }
  if ((word & kResetBit) != 0) {
    // SA_RESETHAND: the next delivery finds the default action.
    std::uint64_t expected = word;
    w->packed.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(SIG_DFL));
  }
  // The program's handler may not return (exit, longjmp, _exit): what the
  // threads recorded so far is written first.
  if (r != nullptr) r->flush_from_signal();
  const int outer_signal = t_program_signal;
  t_program_signal = signo;
  errno = saved_errno;
  if ((word & kSiginfoBit) != 0) {
    reinterpret_cast<void (*)(int, siginfo_t*, void*)>(address)(signo, info, context);
  } else {
    reinterpret_cast<void (*)(int)>(address)(signo);
  }
  t_program_signal = outer_signal;
}

bool owned_by_this_process() { return g_owner.load(std::memory_order_relaxed) == ::getpid(); }

}  // namespace

void install() {
  Locked lock;
  if (g_installed) return;
  g_installed = true;
  g_owner.store(::getpid(), std::memory_order_relaxed);
  for (int i = 0; i < kCount; ++i) {
    struct sigaction current{};
    if (__sigaction(kWatched[i], nullptr, &current) != 0 || is_ours(current)) continue;
    adopt(kWatched[i], g_watched[i], current);
  }
}

void recheck() {
  Locked lock;
  if (!g_installed || !owned_by_this_process()) return;
  for (int i = 0; i < kCount; ++i) {
    struct sigaction current{};
    if (__sigaction(kWatched[i], nullptr, &current) != 0 || is_ours(current)) continue;
    // Ignored behind our back: most likely system(), which ignores SIGINT
    // and SIGQUIT while its child runs and then puts back what it found
    // (ours). The program's action stays as it is.
    if (current.sa_handler == SIG_IGN) {
      g_watched[i].ours_in_kernel = false;
      continue;
    }
    adopt(kWatched[i], g_watched[i], current);
  }
}

void forget_lock_after_fork() {
  g_lock.store(0, std::memory_order_relaxed);
  g_owner.store(::getpid(), std::memory_order_relaxed);  // a fork child's table is its own copy
}

bool in_program_handler() { return t_program_signal != 0; }

int program_handler_signal() { return t_program_signal; }

int program_sigaction(int signo, const struct sigaction* act, struct sigaction* old) {
  Watched* w = watched(signo);
  if (w == nullptr) return __sigaction(signo, act, old);
  Locked lock;
  if (!g_installed || !owned_by_this_process()) return __sigaction(signo, act, old);
  struct sigaction previous = w->program;
  // The handler may have reset itself (SA_RESETHAND) since it was set.
  if ((w->packed.load(std::memory_order_acquire) & kAddressMask) == 0) {
    previous.sa_handler = SIG_DFL;
    previous.sa_flags &= ~SA_SIGINFO;
  }
  if (act != nullptr && adopt(signo, *w, *act) != 0) return -1;
  if (old != nullptr) *old = previous;
  return 0;
}

sighandler_t program_signal(int signo, sighandler_t handler) {
  // glibc's signal(): BSD semantics, the signal blocked in its own handler,
  // interrupted system calls restarted.
  if (handler == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  struct sigaction act{}, old{};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (signo > 0 && signo < NSIG) sigaddset(&act.sa_mask, signo);
  act.sa_flags = SA_RESTART;
  if (program_sigaction(signo, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

}  // namespace cumemtrace::preload::signals
