// Route: stream-ordered allocation, runtime and driver, the default and
// the per-thread-default-stream (_ptsz) entry points, from the device's
// default pool and from an explicit pool. The stream is recorded; in a
// _ptsz function stream 0 is the per-thread stream (recorded as 0x2).
//
//   route_stream_ordered MANIFEST
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "route_manifest.h"

using route::addr;
using route::check;

// The _ptsz entry points, which code built with per-thread default streams
// (nvcc --default-stream per-thread) calls; declared by the headers only
// for such builds.
extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream stream);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  const auto sh = addr(s);
  const auto per_thread = addr(cudaStreamPerThread);
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess, "default pool");

  // Runtime.
  void *a = nullptr, *b = nullptr, *c = nullptr, *e = nullptr;
  check(cudaMallocAsync(&a, 1000, s) == cudaSuccess, "cudaMallocAsync");
  m.alloc("cudaMallocAsync", "device", 0, addr(a), 1000, sh);
  check(cudaMallocAsync_ptsz(&b, 2000, nullptr) == cudaSuccess, "cudaMallocAsync_ptsz");
  m.alloc("cudaMallocAsync_ptsz", "device", 0, addr(b), 2000, per_thread);
  check(cudaMallocFromPoolAsync(&c, 3000, pool, s) == cudaSuccess, "cudaMallocFromPoolAsync");
  m.alloc("cudaMallocFromPoolAsync", "device", 0, addr(c), 3000, sh);
  check(cudaMallocFromPoolAsync_ptsz(&e, 4000, pool, s) == cudaSuccess, "cudaMallocFromPoolAsync_ptsz");
  m.alloc("cudaMallocFromPoolAsync_ptsz", "device", 0, addr(e), 4000, sh);
  check(cudaFreeAsync(a, s) == cudaSuccess, "cudaFreeAsync");
  m.free("cudaFreeAsync", "device", 0, addr(a), 1000, sh);
  check(cudaFreeAsync_ptsz(b, nullptr) == cudaSuccess, "cudaFreeAsync_ptsz");
  m.free("cudaFreeAsync_ptsz", "device", 0, addr(b), 2000, per_thread);
  check(cudaFreeAsync_ptsz(c, s) == cudaSuccess, "cudaFreeAsync_ptsz(s)");
  m.free("cudaFreeAsync_ptsz", "device", 0, addr(c), 3000, sh);
  // cudaFree takes stream-ordered memory too (it synchronises first).
  check(cudaFree(e) == cudaSuccess, "cudaFree of pool memory");
  m.free("cudaFree", "device", 0, addr(e), 4000);

  // Driver, in the runtime's context.
  const auto cs = reinterpret_cast<CUstream>(s);
  const auto cpool = reinterpret_cast<CUmemoryPool>(pool);
  CUdeviceptr d1 = 0, d2 = 0, d3 = 0, d4 = 0;
  check(cuMemAllocAsync(&d1, 5000, cs) == CUDA_SUCCESS, "cuMemAllocAsync");
  m.alloc("cuMemAllocAsync", "device", 0, d1, 5000, sh);
  check(cuMemAllocAsync_ptsz(&d2, 6000, nullptr) == CUDA_SUCCESS, "cuMemAllocAsync_ptsz");
  m.alloc("cuMemAllocAsync_ptsz", "device", 0, d2, 6000, per_thread);
  check(cuMemAllocFromPoolAsync(&d3, 7000, cpool, cs) == CUDA_SUCCESS, "cuMemAllocFromPoolAsync");
  m.alloc("cuMemAllocFromPoolAsync", "device", 0, d3, 7000, sh);
  check(cuMemAllocFromPoolAsync_ptsz(&d4, 8000, cpool, nullptr) == CUDA_SUCCESS,
        "cuMemAllocFromPoolAsync_ptsz");
  m.alloc("cuMemAllocFromPoolAsync_ptsz", "device", 0, d4, 8000, per_thread);
  check(cuMemFreeAsync(d1, cs) == CUDA_SUCCESS, "cuMemFreeAsync");
  m.free("cuMemFreeAsync", "device", 0, d1, 5000, sh);
  check(cuMemFreeAsync_ptsz(d2, nullptr) == CUDA_SUCCESS, "cuMemFreeAsync_ptsz");
  m.free("cuMemFreeAsync_ptsz", "device", 0, d2, 6000, per_thread);
  check(cuMemFreeAsync(d3, nullptr) == CUDA_SUCCESS, "cuMemFreeAsync(legacy stream)");
  m.free("cuMemFreeAsync", "device", 0, d3, 7000, 0);
  // d4 is left allocated.
  check(cudaStreamSynchronize(s) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess, "sync");
  check(cudaStreamDestroy(s) == cudaSuccess, "destroy");
  return 0;
}
