// fork(): a child of a process that never touched CUDA can use the device;
// a child of an initialised process (worker threads do not survive fork)
// gets an initialisation error instead of deadlocking, like real CUDA, and
// the parent carries on. SIMCUDA_ASYNC_LATENCY_US=20000 keeps work pending
// across the fork.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_test.h"

namespace {
int run_child(int (*fn)()) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);  // a hang becomes a failure, not a stuck test
    std::_Exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) SIM_FAIL("child killed by signal %d", WTERMSIG(status));
  return WEXITSTATUS(status);
}

int fresh_child() {
  void* p = nullptr;
  if (cudaMalloc(&p, 4096) != cudaSuccess) return 1;
  if (cudaMemset(p, 1, 4096) != cudaSuccess) return 2;
  return cudaFree(p) == cudaSuccess ? 0 : 3;
}

int poisoned_child() {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, 4096);
  if (e == cudaSuccess) return 1;
  if (cudaStreamSynchronize(0) == cudaSuccess) return 2;
  return e == cudaErrorInitializationError ? 0 : 3;
}
}  // namespace

int main() {
  SIM_CHECK(run_child(fresh_child) == 0);

  simtest::require_runtime_on_sim();
  void* p = nullptr;
  SIM_RT_OK(cudaMalloc(&p, 1 << 20));
  cudaStream_t s;
  SIM_RT_OK(cudaStreamCreate(&s));
  for (int i = 0; i < 5; ++i) SIM_RT_OK(cudaMemsetAsync(p, i, 1 << 20, s));  // pending
  int rc = run_child(poisoned_child);
  if (rc != 0) SIM_FAIL("child of an initialised parent: case %d", rc);

  SIM_RT_OK(cudaStreamSynchronize(s));
  unsigned char c = 0;
  SIM_RT_OK(cudaMemcpy(&c, p, 1, cudaMemcpyDeviceToHost));
  SIM_CHECK(c == 4);
  SIM_RT_OK(cudaFree(p));
  SIM_RT_OK(cudaStreamDestroy(s));
  std::printf("sim_fork: OK\n");
  return 0;
}
