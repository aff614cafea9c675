// Several devices and resets: allocations are attributed to the device they
// were made on, a free is routed by its pointer (not by the current
// device), and cudaDeviceReset / cuDevicePrimaryCtxReset free what they
// destroy on their device only: device, managed and pinned host memory,
// but not stream-ordered memory (CUDA 13: it belongs to its pool). Run it
// with SIMCUDA_DEVICE_COUNT=2.
//
//   route_devices MANIFEST
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "route_manifest.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cudaGetDriverEntryPoint

using route::addr;
using route::check;

namespace {

struct Held {
  const char* api;
  const char* kind;
  int dev;
  std::uintptr_t ptr;
  std::size_t size;
};

// A reset frees what it destroys in address order.
void record_reset(route::Manifest& m, const char* api, std::vector<Held> held) {
  std::sort(held.begin(), held.end(), [](const Held& x, const Held& y) { return x.ptr < y.ptr; });
  for (const Held& h : held) m.free(api, h.kind, h.dev, h.ptr, h.size);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);
  int count = 0;
  check(cudaGetDeviceCount(&count) == cudaSuccess && count == 2, "two devices", count);

  check(cudaSetDevice(0) == cudaSuccess, "device 0");
  void* a0 = nullptr;
  check(cudaMalloc(&a0, 1000) == cudaSuccess, "a0");
  m.alloc("cudaMalloc", "device", 0, addr(a0), 1000);
  void* k0 = nullptr;
  check(cudaMalloc(&k0, 2000) == cudaSuccess, "k0");
  m.alloc("cudaMalloc", "device", 0, addr(k0), 2000);

  check(cudaSetDevice(1) == cudaSuccess, "device 1");
  void *a1 = nullptr, *m1 = nullptr, *h1 = nullptr, *x1 = nullptr;
  check(cudaMalloc(&a1, 3000) == cudaSuccess, "a1");
  m.alloc("cudaMalloc", "device", 1, addr(a1), 3000);
  check(cudaMallocManaged(&m1, 4096, cudaMemAttachGlobal) == cudaSuccess, "m1");
  m.alloc("cudaMallocManaged", "managed", 1, addr(m1), 4096);
  check(cudaMallocHost(&h1, 5000) == cudaSuccess, "h1");
  m.alloc("cudaMallocHost", "host_pinned", 1, addr(h1), 5000);
  check(cudaMallocAsync(&x1, 6000, nullptr) == cudaSuccess, "x1");
  m.alloc("cudaMallocAsync", "device", 1, addr(x1), 6000, 0);

  // Device 1 is current; a0 lives on device 0.
  check(cudaFree(a0) == cudaSuccess, "free a0 from device 1");
  m.free("cudaFree", "device", 0, addr(a0), 1000);

  check(cudaDeviceSynchronize() == cudaSuccess, "sync");
  check(cudaDeviceReset() == cudaSuccess, "reset device 1");
  record_reset(m, "cudaDeviceReset",
               {{"", "device", 1, addr(a1), 3000}, {"", "managed", 1, addr(m1), 4096},
                {"", "host_pinned", 1, addr(h1), 5000}});
  // The stream-ordered allocation survived the reset.
  check(cudaFreeAsync(x1, nullptr) == cudaSuccess, "free x1 after the reset");
  m.free("cudaFreeAsync", "device", 1, addr(x1), 6000, 0);
  check(cudaDeviceSynchronize() == cudaSuccess, "sync after reset");

  // Device 0 again, reset through the driver API (its primary context).
  check(cudaSetDevice(0) == cudaSuccess, "device 0 again");
  void* b0 = nullptr;
  check(cudaMalloc(&b0, 7000) == cudaSuccess, "b0");
  m.alloc("cudaMalloc", "device", 0, addr(b0), 7000);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  check(cudaGetDriverEntryPoint("cuDevicePrimaryCtxReset", &fn, cudaEnableDefault, &status) == cudaSuccess,
        "cuDevicePrimaryCtxReset");
  check(reinterpret_cast<CUresult (*)(CUdevice)>(fn)(0) == CUDA_SUCCESS, "reset device 0");
  record_reset(m, "cuDevicePrimaryCtxReset_v2",
               {{"", "device", 0, addr(k0), 2000}, {"", "device", 0, addr(b0), 7000}});

  // Both devices usable afterwards; one allocation left on device 1.
  void* c1 = nullptr;
  check(cudaSetDevice(1) == cudaSuccess && cudaMalloc(&c1, 8000) == cudaSuccess, "c1");
  m.alloc("cudaMalloc", "device", 1, addr(c1), 8000);
  return 0;
}
