// fork and exec under cumemtrace.
//
//   fork_paths child-traces      forks before touching CUDA (a child of an
//        initialised CUDA process cannot use the device); the child allocates
//        3 buffers and frees 1, the parent allocates 2 and frees 2. Prints
//        "parent PID child PID".
//   fork_paths busy-parent N     the parent's trace is open and a thread
//        allocates and frees without pause (holding the writer's state as
//        often as it can) while the main thread forks N children that never
//        touch CUDA: each checks it runs as if cumemtrace were absent (one
//        thread, nothing on stderr) and exits through exit(). Prints
//        "pairs P" (the thread's cudaMalloc/cudaFree pairs).
//   fork_paths exec PROGRAM ARGS...  allocates 2 buffers, frees 1, then execs
//        PROGRAM (same pid, new program)
//   fork_paths exec-fails        allocates, tries to exec a missing program,
//        then allocates and frees more and exits 0
//   fork_paths vfork-signal      installs a SIGINT handler that exits 3, then
//        a vfork child (sharing our memory, as Python's subprocess does) sets
//        SIGINT to its default before it exits; prints "ready" and waits for
//        SIGINT, which must still reach the handler
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "robustness_support.h"
#include "forks_under_lsan.h"

namespace {

int threads_in_this_process() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

bool wait_ok(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int child_traces() {
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 4;
  if (child == 0) {
    void* a = must_malloc(1 << 20);
    void* b = must_malloc(2 << 20);
    must_malloc(3 << 20);
    must_free(b);
    (void)a;
    std::exit(0);
  }
  void* a = must_malloc(5 << 20);
  void* b = must_malloc(6 << 20);
  must_free(a);
  must_free(b);
  if (!wait_ok(child)) return 5;
  std::printf("parent %d child %d\n", getpid(), child);
  return 0;
}

int busy_parent(int children) {
  void* kept = must_malloc(1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<long> pairs{0};
  std::thread churn([&] {
    for (size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      must_free(must_malloc(512 + (i * 7919) % 65536));
      pairs.fetch_add(1, std::memory_order_relaxed);
    }
  });
  int failed = 0;
  for (int i = 0; i < children; ++i) {
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t child = fork();
    if (child == 0) {
      alarm(20);  // a deadlock becomes a failure, not a stuck test
      // Untouched by cumemtrace: no writer thread was started here, and
      // nothing is printed.
      std::exit(threads_in_this_process() == 1 ? 0 : 10);
    }
    if (child < 0 || !wait_ok(child)) ++failed;
  }
  stop.store(true);
  churn.join();
  must_free(kept);
  std::printf("pairs %ld\n", pairs.load());
  return failed == 0 ? 0 : 6;
}

int exec_program(char** argv) {
  void* a = must_malloc(1 << 20);
  void* b = must_malloc(2 << 20);
  must_free(a);
  (void)b;
  std::fflush(stdout);
  execv(argv[0], argv);
  std::perror("fork_paths: execv");
  return 7;
}

int exec_fails() {
  void* a = must_malloc(1 << 20);
  char* const args[] = {const_cast<char*>("/nonexistent/program"), nullptr};
  if (execv(args[0], args) == 0 || errno != ENOENT) return 8;
  void* b = must_malloc(2 << 20);
  must_free(a);
  must_free(b);
  return 0;
}

void exit_three(int) { std::exit(3); }

int vfork_signal() {
  void* a = must_malloc(1 << 20);
  (void)a;
  signal(SIGINT, exit_three);
  const pid_t child = vfork();
  if (child == 0) {
    signal(SIGINT, SIG_DFL);  // the child's disposition only
    _exit(0);
  }
  if (child < 0 || !wait_ok(child)) return 9;
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "child-traces") return child_traces();
  if (mode == "busy-parent" && argc == 3) return busy_parent(std::atoi(argv[2]));
  if (mode == "exec" && argc >= 3) return exec_program(argv + 2);
  if (mode == "exec-fails") return exec_fails();
  if (mode == "vfork-signal") return vfork_signal();
  std::fprintf(stderr, "usage: fork_paths child-traces|busy-parent N|exec PROGRAM...|exec-fails\n");
  return 2;
}
