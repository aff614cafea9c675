// Memory the pool caches must never make a route outside the pool fail
// (issue 18): 45 x 20 MiB obtained with cudaMalloc and freed, then one
// cuMemCreate of 800 MiB (the route NCCL and PyTorch's expandable segments
// use) on a 1 GiB device. Bare, the driver has the memory back and the
// cuMemCreate succeeds; a pool that kept the freed segments would make it
// fail. Also a request no device of that size can hold, which must fail as
// it does bare.
//
//   pool_other_routes main|library [VMM_MIB]
//     main:    cudaMalloc/cudaFree called from this program
//     library: called from fake_torch/libc10_cuda.so, a stand-in for
//              PyTorch's caching allocator (tests/apps/fake_caching_allocator)
//
// Prints one line per step: the cudaMemGetInfo figures after the frees, the
// cuMemCreate result, and the result of a 2 GiB cuMemCreate.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <vector>

extern "C" cudaError_t fake_cache_malloc(void** ptr, size_t size);
extern "C" cudaError_t fake_cache_free(void* ptr);

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

const char* driver_error_name(CUresult rc) {
  const char* name = nullptr;
  return cuGetErrorName(rc, &name) == CUDA_SUCCESS && name ? name : "?";
}

CUresult create_and_release(std::size_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  const CUresult rc = cuMemCreate(&handle, bytes, &prop, 0);
  if (rc == CUDA_SUCCESS) cuMemRelease(handle);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const bool via_library = argc > 1 && std::strcmp(argv[1], "library") == 0;
  const std::size_t vmm_mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 800;
  auto do_malloc = via_library ? fake_cache_malloc : [](void** p, size_t n) { return cudaMalloc(p, n); };
  auto do_free = via_library ? fake_cache_free : [](void* p) { return cudaFree(p); };

  std::vector<void*> blocks;
  for (int i = 0; i < 45; ++i) {
    void* p = nullptr;
    if (do_malloc(&p, 20 * kMiB) != cudaSuccess) {
      std::printf("cudaMalloc %d failed\n", i);
      return 2;
    }
    blocks.push_back(p);
  }
  for (void* p : blocks) {
    if (do_free(p) != cudaSuccess) return 2;
  }
  std::size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("after the frees: free %zu MiB of %zu MiB\n", free_bytes / kMiB, total / kMiB);
  std::printf("cuMemCreate(%zu MiB): %s\n", vmm_mib, driver_error_name(create_and_release(vmm_mib * kMiB)));
  std::printf("cuMemCreate(2048 MiB): %s\n", driver_error_name(create_and_release(2048 * kMiB)));
  std::printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
