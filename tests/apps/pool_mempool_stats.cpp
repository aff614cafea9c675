// What a program reads of the device's default memory pool
// (cudaMemPoolGetAttribute: used and reserved, current and high) around its
// stream-ordered allocations and frees, and after resetting the highs, as
// PyTorch's backend:cudaMallocAsync reads memory_allocated() and
// memory_reserved(). Issue 30, item 4: under cumemtrace's pool the used
// figures must be exactly what the program reads bare.
//
//   pool_mempool_stats    prints one line per point: "NAME used=U used_high=H
//                         reserved=R reserved_high=RH"
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "sim_test.h"

namespace {

void show(cudaMemPool_t pool, const char* name) {
  unsigned long long v[4] = {};
  const cudaMemPoolAttr attrs[4] = {cudaMemPoolAttrUsedMemCurrent, cudaMemPoolAttrUsedMemHigh,
                                    cudaMemPoolAttrReservedMemCurrent, cudaMemPoolAttrReservedMemHigh};
  for (int i = 0; i < 4; ++i) SIM_RT_OK(cudaMemPoolGetAttribute(pool, attrs[i], &v[i]));
  std::printf("%s used=%llu used_high=%llu reserved=%llu reserved_high=%llu\n", name, v[0], v[1], v[2], v[3]);
}

}  // namespace

int main() {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  cudaMemPool_t pool = nullptr;
  SIM_RT_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  cudaStream_t s = nullptr;
  SIM_RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  show(pool, "start");
  std::vector<void*> blocks;
  for (std::size_t size : {std::size_t{1000}, 3 * kMiB + 7, 40 * kMiB, 100 * kMiB, std::size_t{77}}) {
    void* p = nullptr;
    SIM_RT_OK(cudaMallocAsync(&p, size, s));
    blocks.push_back(p);
  }
  show(pool, "allocated");
  SIM_RT_OK(cudaFreeAsync(blocks[3], s));  // the 100 MiB one
  SIM_RT_OK(cudaFreeAsync(blocks[0], s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  show(pool, "freed");
  unsigned long long zero = 0;
  SIM_RT_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  SIM_RT_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  show(pool, "reset");
  void* p = nullptr;
  SIM_RT_OK(cudaMallocAsync(&p, 20 * kMiB, s));
  show(pool, "again");
  SIM_RT_OK(cudaFreeAsync(p, s));
  for (std::size_t i : {1, 2, 4}) SIM_RT_OK(cudaFreeAsync(blocks[i], s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  show(pool, "end");
  SIM_RT_OK(cudaStreamDestroy(s));
  return 0;
}
