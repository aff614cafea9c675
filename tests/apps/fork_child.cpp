// Allocates, forks a child that exits normally without touching CUDA (its
// exit runs every atexit handler and destructor, cumemtrace's included), then
// allocates more. The parent's trace must hold the parent's events exactly
// once: the child must never flush the parent's buffered lines into it.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "forks_under_lsan.h"

int main() {
  void* before = nullptr;
  void* after = nullptr;
  if (cudaMalloc(&before, 1 << 20) != cudaSuccess) return 3;
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 4;
  if (child == 0) std::exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
  if (cudaMalloc(&after, 3 << 20) != cudaSuccess) return 6;
  if (cudaFree(before) != cudaSuccess || cudaFree(after) != cudaSuccess) return 7;
  return 0;
}
