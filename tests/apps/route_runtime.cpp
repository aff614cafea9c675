// Route: the CUDA runtime, linked dynamically (as PyTorch wheels link it).
// Device, pitched, 3D, managed and pinned host memory; every call the sim's
// runtime makes to its driver (through cuGetProcAddress) must not show as a
// second event.
//
//   route_runtime MANIFEST
#include <cuda_runtime_api.h>

#include "route_manifest.h"

using route::addr;
using route::check;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);

  // Creates the context; frees nothing, records nothing.
  check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");
  // A 0-byte request succeeds with NULL: nothing to record.
  void* none = reinterpret_cast<void*>(0x1);
  check(cudaMalloc(&none, 0) == cudaSuccess && none == nullptr, "cudaMalloc(0)");

  void* a = nullptr;
  check(cudaMalloc(&a, 1'000'000) == cudaSuccess, "cudaMalloc");
  m.alloc("cudaMalloc", "device", 0, addr(a), 1'000'000);

  void* pitched = nullptr;
  std::size_t pitch = 0;
  check(cudaMallocPitch(&pitched, &pitch, 1000, 3) == cudaSuccess && pitch >= 1000, "cudaMallocPitch");
  m.alloc("cudaMallocPitch", "device", 0, addr(pitched), pitch * 3);

  cudaPitchedPtr cube{};
  check(cudaMalloc3D(&cube, cudaExtent{700, 4, 5}) == cudaSuccess && cube.pitch >= 700,
        "cudaMalloc3D");
  m.alloc("cudaMalloc3D", "device", 0, addr(cube.ptr), cube.pitch * 4 * 5);

  void* managed = nullptr;
  check(cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal) == cudaSuccess, "cudaMallocManaged");
  m.alloc("cudaMallocManaged", "managed", 0, addr(managed), 4096);

  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, 8192) == cudaSuccess, "cudaMallocHost");
  m.alloc("cudaMallocHost", "host_pinned", 0, addr(pinned), 8192);

  void* mapped = nullptr;
  check(cudaHostAlloc(&mapped, 100, cudaHostAllocMapped) == cudaSuccess, "cudaHostAlloc");
  m.alloc("cudaHostAlloc", "host_pinned", 0, addr(mapped), 100);

  // free ≤ total, and the device memory above is not free.
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess, "cudaMemGetInfo");
  check(free_bytes <= total_bytes, "free <= total");
  check(total_bytes - free_bytes >= 1'000'000 + pitch * 3 + 4096, "used memory", total_bytes - free_bytes);

  check(cudaFree(a) == cudaSuccess, "cudaFree(a)");
  m.free("cudaFree", "device", 0, addr(a), 1'000'000);
  check(cudaFree(cube.ptr) == cudaSuccess, "cudaFree(cube)");
  m.free("cudaFree", "device", 0, addr(cube.ptr), cube.pitch * 4 * 5);
  // cudaFree frees managed memory too.
  check(cudaFree(managed) == cudaSuccess, "cudaFree(managed)");
  m.free("cudaFree", "managed", 0, addr(managed), 4096);
  check(cudaFreeHost(pinned) == cudaSuccess, "cudaFreeHost(pinned)");
  m.free("cudaFreeHost", "host_pinned", 0, addr(pinned), 8192);
  check(cudaFreeHost(mapped) == cudaSuccess, "cudaFreeHost(mapped)");
  m.free("cudaFreeHost", "host_pinned", 0, addr(mapped), 100);
  // `pitched` is left allocated: the trace's end must count it.
  return 0;
}
