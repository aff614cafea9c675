// Route: the driver API, linked directly to libcuda.so.1 (the toolkit's
// stub at build time), including the legacy unsuffixed 32-bit ABIs that
// binaries built before CUDA 3.2 reference and the driver still exports
// (and refuses, in a context of today's API).
//
//   route_driver MANIFEST
#include <cuda.h>

#include <utility>

#include "route_manifest.h"

using route::addr;
using route::check;

// The CUDA 2.0 ABIs under their real symbol names (cuda.h renames the plain
// names to the _v2 functions; an old binary references these).
extern "C" CUresult legacy_mem_alloc(unsigned int* dptr, unsigned int bytes) __asm__("cuMemAlloc");
extern "C" CUresult legacy_mem_free(unsigned int dptr) __asm__("cuMemFree");
extern "C" CUresult legacy_mem_alloc_pitch(unsigned int* dptr, unsigned int* pitch, unsigned int width,
                                           unsigned int height, unsigned int element)
    __asm__("cuMemAllocPitch");
extern "C" CUresult legacy_mem_alloc_host(void** pp, unsigned int bytes) __asm__("cuMemAllocHost");
extern "C" CUresult legacy_mem_get_info(unsigned int* free_b, unsigned int* total_b)
    __asm__("cuMemGetInfo");

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);

  check(cuInit(0) == CUDA_SUCCESS, "cuInit");
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS, "retain");
  check(cuCtxSetCurrent(ctx) == CUDA_SUCCESS, "set current");

  CUdeviceptr d = 0;
  check(cuMemAlloc(&d, 1 << 20) == CUDA_SUCCESS, "cuMemAlloc_v2");  // cuMemAlloc_v2 by cuda.h
  m.alloc("cuMemAlloc_v2", "device", 0, d, 1 << 20);

  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  check(cuMemAllocPitch(&p, &pitch, 1000, 5, 4) == CUDA_SUCCESS, "cuMemAllocPitch_v2");
  m.alloc("cuMemAllocPitch_v2", "device", 0, p, pitch * 5);

  // The legacy 32-bit ABIs reach the driver, which refuses them in a
  // context of today's API (CUDA_ERROR_INVALID_CONTEXT, driver 580 on an
  // H100: sim_driver_probe); nothing is recorded.
  unsigned int small = 0;
  CUresult rc = legacy_mem_alloc(&small, 4096);
  check(rc == CUDA_ERROR_INVALID_CONTEXT, "legacy cuMemAlloc", rc);
  unsigned int small_pitched = 0, small_pitch = 0;
  rc = legacy_mem_alloc_pitch(&small_pitched, &small_pitch, 100, 2, 4);
  check(rc == CUDA_ERROR_INVALID_CONTEXT, "legacy cuMemAllocPitch", rc);

  CUdeviceptr managed = 0;
  check(cuMemAllocManaged(&managed, 65536, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS, "cuMemAllocManaged");
  m.alloc("cuMemAllocManaged", "managed", 0, managed, 65536);

  void* host = nullptr;
  check(cuMemAllocHost(&host, 3000) == CUDA_SUCCESS, "cuMemAllocHost_v2");
  m.alloc("cuMemAllocHost_v2", "host_pinned", 0, addr(host), 3000);
  void* old_host = nullptr;
  rc = legacy_mem_alloc_host(&old_host, 512);
  check(rc == CUDA_ERROR_INVALID_CONTEXT, "legacy cuMemAllocHost", rc);
  void* portable = nullptr;
  check(cuMemHostAlloc(&portable, 7000, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS, "cuMemHostAlloc");
  m.alloc("cuMemHostAlloc", "host_pinned", 0, addr(portable), 7000);

  std::size_t f = 0, t = 0;
  check(cuMemGetInfo(&f, &t) == CUDA_SUCCESS && f <= t, "cuMemGetInfo_v2");
  check(t - f >= (1u << 20) + 65536, "used", static_cast<long>(t - f));
  unsigned int f32 = 0, t32 = 0;
  rc = legacy_mem_get_info(&f32, &t32);
  check(rc == CUDA_ERROR_INVALID_CONTEXT, "legacy cuMemGetInfo", rc);

  check(cuMemFree(d) == CUDA_SUCCESS, "cuMemFree_v2");
  m.free("cuMemFree_v2", "device", 0, d, 1 << 20);
  check(cuMemFree(managed) == CUDA_SUCCESS, "cuMemFree_v2 (managed)");
  m.free("cuMemFree_v2", "managed", 0, managed, 65536);
  for (auto [ptr, size] : {std::pair{host, 3000}, std::pair{portable, 7000}}) {
    check(cuMemFreeHost(ptr) == CUDA_SUCCESS, "cuMemFreeHost");
    m.free("cuMemFreeHost", "host_pinned", 0, addr(ptr), static_cast<std::size_t>(size));
  }
  // `p` is left allocated.
  return 0;
}
