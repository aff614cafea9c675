// Route: a CUDA runtime linked statically into the program, which is what
// nvcc does by default (-cudart static) and what CuPy and cuda-python ship.
// The runtime's own functions are then inside the program, out of reach of
// symbol interposition: cumemtrace sees this program only because the
// runtime dlsyms cuGetProcAddress_v2 from libcuda.so.1 and gets every
// driver function through it. So the trace names the driver functions.
// Linked to the sim's runtime built as a static archive (NVIDIA's
// libcudart_static.a needs driver internals the sim does not have; see
// route_real_runtime.cpp).
//
//   route_static_runtime MANIFEST
#include <cuda_runtime_api.h>

#include "route_manifest.h"

using route::addr;
using route::check;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);
  check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");

  void* a = nullptr;
  check(cudaMalloc(&a, 250'000) == cudaSuccess, "cudaMalloc");
  m.alloc("cuMemAlloc_v2", "device", 0, addr(a), 250'000);
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s) == cudaSuccess, "stream");
  void* x = nullptr;
  check(cudaMallocAsync(&x, 4096, s) == cudaSuccess, "cudaMallocAsync");
  m.alloc("cuMemAllocAsync", "device", 0, addr(x), 4096, addr(s));
  void* h = nullptr;
  check(cudaMallocHost(&h, 10'000) == cudaSuccess, "cudaMallocHost");
  m.alloc("cuMemAllocHost_v2", "host_pinned", 0, addr(h), 10'000);
  void* managed = nullptr;
  check(cudaMallocManaged(&managed, 512, cudaMemAttachGlobal) == cudaSuccess, "cudaMallocManaged");
  m.alloc("cuMemAllocManaged", "managed", 0, addr(managed), 512);

  std::size_t f = 0, t = 0;
  check(cudaMemGetInfo(&f, &t) == cudaSuccess && f <= t, "cudaMemGetInfo");

  check(cudaFreeAsync(x, s) == cudaSuccess, "cudaFreeAsync");
  m.free("cuMemFreeAsync", "device", 0, addr(x), 4096, addr(s));
  check(cudaStreamSynchronize(s) == cudaSuccess, "sync");
  check(cudaFreeHost(h) == cudaSuccess, "cudaFreeHost");
  m.free("cuMemFreeHost", "host_pinned", 0, addr(h), 10'000);
  check(cudaFree(a) == cudaSuccess, "cudaFree");
  m.free("cuMemFree_v2", "device", 0, addr(a), 250'000);
  // `managed` is left allocated.
  return 0;
}
