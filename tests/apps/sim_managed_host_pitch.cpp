// cudaMallocManaged, pinned host memory (cudaMallocHost / cudaHostAlloc /
// cudaFreeHost / cudaHostGetDevicePointer) and cudaMallocPitch + cudaMemset2D.
#include <cuda_runtime_api.h>

#include <vector>

#include "sim_test.h"

int main() {
  simtest::require_runtime_on_sim();

  // Managed: host and device views are the same memory.
  int* m = nullptr;
  SIM_RT_OK(cudaMallocManaged(reinterpret_cast<void**>(&m), 1024 * sizeof(int), cudaMemAttachGlobal));
  for (int i = 0; i < 1024; ++i) m[i] = i;
  SIM_RT_OK(cudaMemset(m, 0, 16 * sizeof(int)));
  SIM_RT_OK(cudaDeviceSynchronize());
  SIM_CHECK(m[0] == 0 && m[15] == 0 && m[16] == 16 && m[1023] == 1023);
  void* bad = nullptr;
  SIM_EXPECT_RT(cudaMallocManaged(&bad, 64, 0), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaMallocManaged(&bad, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
  cudaGetLastError();
  SIM_RT_OK(cudaFree(m));

  // Pinned host memory; copies between it and the device.
  unsigned char* h = nullptr;
  SIM_RT_OK(cudaMallocHost(reinterpret_cast<void**>(&h), 4096));
  unsigned char* hm = nullptr;
  SIM_RT_OK(cudaHostAlloc(reinterpret_cast<void**>(&hm), 4096, cudaHostAllocMapped | cudaHostAllocPortable));
  unsigned int fl = 0;
  SIM_RT_OK(cudaHostGetFlags(&fl, hm));
  SIM_CHECK(fl == (cudaHostAllocMapped | cudaHostAllocPortable));
  void* dview = nullptr;
  SIM_RT_OK(cudaHostGetDevicePointer(&dview, hm, 0));
  SIM_CHECK(dview == hm);  // unified addressing
  void* d = nullptr;
  SIM_RT_OK(cudaMalloc(&d, 4096));
  for (int i = 0; i < 4096; ++i) h[i] = static_cast<unsigned char>(i);
  cudaStream_t s;
  SIM_RT_OK(cudaStreamCreate(&s));
  SIM_RT_OK(cudaMemcpyAsync(d, h, 4096, cudaMemcpyHostToDevice, s));
  SIM_RT_OK(cudaMemcpyAsync(hm, d, 4096, cudaMemcpyDeviceToHost, s));
  SIM_RT_OK(cudaStreamSynchronize(s));
  for (int i = 0; i < 4096; ++i) SIM_CHECK(hm[i] == static_cast<unsigned char>(i));
  SIM_EXPECT_RT(cudaFree(h), cudaErrorInvalidValue);      // host pointer to cudaFree
  SIM_EXPECT_RT(cudaFreeHost(d), cudaErrorInvalidValue);  // device pointer to cudaFreeHost
  cudaGetLastError();
  SIM_RT_OK(cudaFreeHost(h));
  SIM_RT_OK(cudaFreeHost(hm));
  SIM_RT_OK(cudaFreeHost(nullptr));

  // Pitched 2D allocation.
  void* p = nullptr;
  std::size_t pitch = 0;
  SIM_RT_OK(cudaMallocPitch(&p, &pitch, 1000, 64));
  SIM_CHECK(pitch >= 1000 && pitch % 512 == 0);
  std::size_t f = 0, t = 0;
  SIM_RT_OK(cudaMemGetInfo(&f, &t));
  // p (64 rows of 1 KiB) and d (4 KiB) are packed into one 2 MiB page.
  SIM_CHECK(pitch * 64 + 4096 <= (2u << 20) && t - f == (2u << 20));
  SIM_RT_OK(cudaMemset(p, 0, pitch * 64));
  SIM_RT_OK(cudaMemset2D(p, pitch, 0x7f, 1000, 64));
  std::vector<unsigned char> back(pitch * 64);
  SIM_RT_OK(cudaMemcpy(back.data(), p, back.size(), cudaMemcpyDeviceToHost));
  for (std::size_t y = 0; y < 64; ++y) {
    SIM_CHECK(back[y * pitch] == 0x7f && back[y * pitch + 999] == 0x7f);
    SIM_CHECK(back[y * pitch + 1000] == 0);  // padding untouched
  }

  // cudaPointerGetAttributes tells the kinds apart.
  cudaPointerAttributes at{};
  SIM_RT_OK(cudaPointerGetAttributes(&at, static_cast<char*>(p) + 100));
  SIM_CHECK(at.type == cudaMemoryTypeDevice && at.device == 0 && at.hostPointer == nullptr);
  int local = 0;
  SIM_RT_OK(cudaPointerGetAttributes(&at, &local));
  SIM_CHECK(at.type == cudaMemoryTypeUnregistered);
  SIM_RT_OK(cudaMallocManaged(reinterpret_cast<void**>(&m), 64, cudaMemAttachHost));
  SIM_RT_OK(cudaPointerGetAttributes(&at, m));
  SIM_CHECK(at.type == cudaMemoryTypeManaged && at.hostPointer == m);
  SIM_RT_OK(cudaFree(m));
  SIM_RT_OK(cudaMallocHost(reinterpret_cast<void**>(&h), 64));
  SIM_RT_OK(cudaPointerGetAttributes(&at, h));
  SIM_CHECK(at.type == cudaMemoryTypeHost && at.hostPointer == h);
  SIM_RT_OK(cudaFreeHost(h));

  SIM_RT_OK(cudaFree(p));
  SIM_RT_OK(cudaFree(d));
  SIM_RT_OK(cudaStreamDestroy(s));
  std::printf("sim_managed_host_pitch: OK\n");
  return 0;
}
