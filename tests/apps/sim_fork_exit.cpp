// fork() from a thread whose per-thread default stream is busy, and a child
// that exits normally: exit() runs the forking thread's thread-local
// destructors in the child, which must leave the parent's streams alone
// (their workers did not survive the fork; their locks and condition
// variables may have been caught mid-use). Many forks, each while short
// operations run on the stream, so some land inside the worker's wait.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "sim_test.h"
#include "forks_under_lsan.h"

int main() {
  simtest::require_runtime_on_sim();
  void* p = nullptr;
  SIM_RT_OK(cudaMalloc(&p, 4096));
  for (int i = 0; i < 1000; ++i) {
    for (int j = 0; j < 8; ++j) SIM_RT_OK(cudaMemsetAsync(p, i + j, 4096, cudaStreamPerThread));
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(5);  // a hang becomes a failure, not a stuck test
      std::exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) SIM_FAIL("fork %d: the child hung in exit() (signal %d)", i, WTERMSIG(status));
    SIM_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  SIM_RT_OK(cudaStreamSynchronize(cudaStreamPerThread));
  SIM_RT_OK(cudaFree(p));
  std::printf("sim_fork_exit: OK\n");
  return 0;
}
