// Issue 4's fragmentation case at the level of a program: the whole device
// is filled with 1 MiB allocations, every other one is freed (half the
// device free, in 1 MiB holes), and a 100 MiB request must fail exactly as
// it does without cumemtrace — the same code, the same last-error state —
// after which a request that fits succeeds. Everything printed must be
// identical with and without cumemtrace except cudaMemGetInfo: the driver
// counts each 2 MiB page holding a live block as used (no page is free),
// while under the caching pool the holes are cached, not given back, and
// count as free.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "sim_test.h"

namespace {

void print_result(const char* what, cudaError_t rc) { std::printf("%s: %s\n", what, cudaGetErrorName(rc)); }

}  // namespace

int main() {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  std::size_t free_bytes = 0, total = 0;
  SIM_RT_OK(cudaMemGetInfo(&free_bytes, &total));
  const std::size_t count = total / kMiB;
  std::vector<void*> blocks(count, nullptr);
  for (auto& p : blocks) SIM_RT_OK(cudaMalloc(&p, kMiB));
  std::printf("filled: %zu blocks of 1 MiB\n", count);

  // Every other block by address: no two holes are neighbours.
  std::sort(blocks.begin(), blocks.end());
  for (std::size_t i = 0; i < count; i += 2) SIM_RT_OK(cudaFree(blocks[i]));
  SIM_RT_OK(cudaMemGetInfo(&free_bytes, &total));
  std::printf("cudaMemGetInfo: free %zu MiB of %zu MiB, free <= total: %d\n", free_bytes / kMiB, total / kMiB,
              free_bytes <= total ? 1 : 0);

  void* big = nullptr;
  print_result("cudaMalloc(100 MiB)", cudaMalloc(&big, 100 * kMiB));
  print_result("cudaPeekAtLastError", cudaPeekAtLastError());
  print_result("cudaGetLastError", cudaGetLastError());
  print_result("cudaGetLastError again", cudaGetLastError());

  void* fits = nullptr;
  print_result("cudaMalloc(1 MiB) after", cudaMalloc(&fits, kMiB));
  print_result("cudaGetLastError after", cudaGetLastError());
  SIM_RT_OK(cudaFree(fits));
  for (std::size_t i = 1; i < count; i += 2) SIM_RT_OK(cudaFree(blocks[i]));
  return 0;
}
