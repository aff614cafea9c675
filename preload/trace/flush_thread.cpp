// TraceWriter: the background thread that writes the trace every flush
// interval and whenever a thread's buffer fills, and the output lock that it
// shares with the exit, exec and signal paths.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "text/diagnostics.h"
#include "trace/flush_futex.h"
#include "trace/trace_writer.h"

namespace cumemtrace::preload {
namespace {

std::atomic<TraceWriter::ProcessHook> g_on_open{nullptr};
std::atomic<TraceWriter::ProcessHook> g_periodic{nullptr};

// gettid, asked once per thread (a forked child asks again: see
// forget_thread_ids_after_fork).
thread_local pid_t t_tid __attribute__((tls_model("initial-exec"))) = 0;

pid_t this_thread_id() {
  if (t_tid == 0) t_tid = static_cast<pid_t>(::syscall(SYS_gettid));
  return t_tid;
}

void pause_ns(long ns) {
  const timespec pause{0, ns};
  nanosleep(&pause, nullptr);
}

// The process state letter of /proc/self/<path>/stat ('Z': zombie); 0 if it
// cannot be read. Only open/read/close: no stdio, no allocation.
char task_state(const char* stat_path) {
  const int fd = ::open(stat_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');
  return paren != nullptr && paren[1] == ' ' ? paren[2] : 0;
}

// How long the background thread may wait for the output lock before it
// skips a round (the exit or a signal path has it).
constexpr std::uint64_t kFlusherLockWaitNs = 50'000'000;
// How long a signal handler or exec waits for the background thread to finish
// a write in progress.
constexpr std::uint64_t kSignalLockWaitNs = 200'000'000;

}  // namespace

void TraceWriter::set_process_hooks(ProcessHook on_open, ProcessHook periodic) {
  g_on_open.store(on_open);
  g_periodic.store(periodic);
}

std::atomic<void (*)(std::uint64_t)> TraceWriter::test_seq_taken_{nullptr};
std::atomic<void (*)(std::uint64_t)> TraceWriter::test_flusher_waits_{nullptr};
std::atomic<void (*)(std::uint64_t)> TraceWriter::test_batch_written_{nullptr};

void TraceWriter::set_test_hooks(const TestHooks& hooks) {
  test_seq_taken_.store(hooks.seq_taken);
  test_batch_written_.store(hooks.batch_written);
  test_flusher_waits_.store(hooks.flusher_waits);
}

void TraceWriter::run_open_hook() {
  if (auto hook = g_on_open.load(std::memory_order_relaxed)) hook();
}

void TraceWriter::forget_thread_ids_after_fork() { t_tid = 0; }

bool TraceWriter::owned_by_this_process() const { return ::getpid() == owner_pid_; }

bool TraceWriter::lock_output(std::uint64_t budget_ns) {
  const pid_t self = this_thread_id();
  const std::uint64_t start = TickClock::monotonic_ns();
  for (;;) {
    pid_t holder = 0;
    if (output_owner_.compare_exchange_strong(holder, self, std::memory_order_acquire)) return true;
    // Held by this very thread: a signal arrived while it was writing.
    if (holder == self || TickClock::monotonic_ns() - start > budget_ns) return false;
    pause_ns(100'000);
  }
}

bool TraceWriter::try_lock_output_from_signal() { return lock_output(kSignalLockWaitNs); }

void TraceWriter::unlock_output() { output_owner_.store(0, std::memory_order_release); }

bool TraceWriter::compression_is_safe_here() {
  // zstd needs more stack than a small alternate signal stack may have (a
  // program's SIGSEGV handler stack can be MINSIGSTKSZ); plain writes do not.
  stack_t ss{};
  if (sigaltstack(nullptr, &ss) != 0) return false;
  return (ss.ss_flags & SS_ONSTACK) == 0 || ss.ss_size >= 64 * 1024;
}

void TraceWriter::wake_flusher() {
  if (flusher_running_.load(std::memory_order_acquire)) {
    wake_word_.fetch_add(1, std::memory_order_release);
    futex_wake_all(wake_word_);
    return;
  }
  // No writer thread (it could not be started): the thread that filled a
  // buffer writes it, if no one else is writing.
  if (is_open() && owned_by_this_process() && lock_output(0)) {
    drain(Drain::background);
    write_output();
    count_dropped(sink_.flush());
    release_written();
    unlock_output();
  }
}

void TraceWriter::start_flusher() {
  if (flusher_started_.exchange(true)) return;
  // The thread takes no signal meant for the process: a SIGINT must reach a
  // thread of the program, and a SIGXFSZ from a write past RLIMIT_FSIZE must
  // not kill the program (write(2) then fails with EFBIG).
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 512 * 1024);
  flusher_running_.store(true, std::memory_order_release);
  pthread_t thread;
  const int err = pthread_create(&thread, &attr, &TraceWriter::flusher_entry, this);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (err != 0) {
    flusher_running_.store(false, std::memory_order_release);
    contract::warn("cannot start the trace writer thread: %s; the trace is written only when buffers fill "
         "and at exit",
         std::strerror(err));
  }
}

void* TraceWriter::flusher_entry(void* self) {
  static_cast<TraceWriter*>(self)->flusher_main();
  return nullptr;
}

void TraceWriter::flusher_main() {
  pthread_setname_np(pthread_self(), "cumemtrace-io");
  flush::TraceSink::note_signals_blocked_on_this_thread();
  const std::uint64_t interval_ns = std::uint64_t{flush_interval_ms_} * 1'000'000;
  const timespec interval{static_cast<time_t>(flush_interval_ms_ / 1000),
                          static_cast<long>(flush_interval_ms_ % 1000) * 1'000'000};
  std::uint64_t last_housekeeping = TickClock::monotonic_ns();
  while (!flusher_stop_.load(std::memory_order_acquire)) {
    const std::uint32_t seen = wake_word_.load(std::memory_order_acquire);
    if (auto hook = test_flusher_waits_.load(std::memory_order_relaxed)) [[unlikely]] {
      hook(static_cast<std::uint64_t>(interval.tv_sec) * 1'000'000'000 + static_cast<std::uint64_t>(interval.tv_nsec));
    }
    futex_wait(wake_word_, seen, interval);
    if (flusher_stop_.load(std::memory_order_acquire) || !is_open()) break;
    if (lock_output(kFlusherLockWaitNs)) {
      if (is_open()) {
        drain(Drain::background);
        write_output();
        count_dropped(sink_.flush());
        release_written();
      }
      unlock_output();
    }
    // Once per interval, not at every full buffer: a busy program fills
    // buffers often, and these cost system calls.
    const std::uint64_t now = TickClock::monotonic_ns();
    if (now - last_housekeeping < interval_ns) continue;
    last_housekeeping = now;
    if (auto hook = g_periodic.load(std::memory_order_relaxed)) hook();
    // Never keep the process alive: when the program's last thread has gone
    // (main called pthread_exit), returning lets the C library exit the
    // process, which runs the exit path that writes `end`.
    if (only_this_thread_left()) break;
  }
  flusher_running_.store(false, std::memory_order_release);
}

bool TraceWriter::only_this_thread_left() const {
  // While the main thread runs the process is alive for its own reasons;
  // checked first, it makes this one small read per round.
  if (task_state("/proc/self/stat") != 'Z') return false;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  const pid_t self = this_thread_id();
  bool others = false;
  while (const dirent* e = readdir(tasks)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == self) continue;
    char path[320];
    std::snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    if (task_state(path) != 'Z') {
      others = true;
      break;
    }
  }
  closedir(tasks);
  return !others;
}

}  // namespace cumemtrace::preload
