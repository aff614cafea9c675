// NVIDIA's own runtime, statically (libcudart_static.a, nvcc's default) or
// dynamically linked, run against the sim's driver. It gets as far as its
// first use of the driver's private export tables (cuGetExportTable, which
// the sim does not have), so its calls fail; but before that it dlopens
// libcuda.so.1, dlsyms cuGetProcAddress_v2 and looks up some 440 driver
// functions at many versions and flags, including "" at version 0. Under
// cumemtrace every one of those goes through our dlsym and cuGetProcAddress
// hooks, and the program must print exactly what it prints without them.
#include <cuda_runtime_api.h>

#include <cstdio>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cudaGetDriverEntryPoint

int main() {
  int runtime = 0, driver = 0, count = -1;
  std::printf("cudaRuntimeGetVersion: %d %d\n", cudaRuntimeGetVersion(&runtime), runtime);
  std::printf("cudaDriverGetVersion: %d %d\n", cudaDriverGetVersion(&driver), driver);
  std::printf("cudaGetDeviceCount: %d %d\n", cudaGetDeviceCount(&count), count);
  void* p = nullptr;
  std::printf("cudaMalloc: %d %s\n", cudaMalloc(&p, 1 << 20), p ? "set" : "NULL");
  std::printf("cudaFree: %d\n", cudaFree(p));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  std::printf("cudaGetDriverEntryPoint: %d %d %s\n",
              cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &status), status,
              fn ? "set" : "NULL");
  std::printf("cudaGetLastError: %d\n", cudaGetLastError());
  return 0;
}
