// For the pool's reuse tests (pool_reuse_after_free, pool_thread_streams):
// reads B back after the device is synchronised and prints whether the pool
// handed A's memory out again ("reused: 0|1") and whether B's pattern
// survived ("pattern: intact", or how many bytes queued work overwrote).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "sim_test.h"

// True when every byte of b (size bytes, device) is `pattern`.
inline bool report_reuse_and_pattern(const void* a, const void* b, std::size_t size, unsigned char pattern) {
  std::vector<unsigned char> back(size, 0);
  SIM_RT_OK(cudaMemcpy(back.data(), b, size, cudaMemcpyDeviceToHost));
  std::size_t damaged = 0;
  for (unsigned char c : back) damaged += c != pattern;
  std::printf("reused: %d\n", b == a ? 1 : 0);
  if (damaged != 0) {
    std::printf("pattern: %zu of %zu bytes overwritten\n", damaged, size);
    return false;
  }
  std::printf("pattern: intact\n");
  return true;
}
