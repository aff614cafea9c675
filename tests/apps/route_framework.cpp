// Route: a framework that links no CUDA library at all, dlopens
// libcudart.so.13 and libcuda.so.1 privately (RTLD_LOCAL, as Python
// extension modules are loaded) and dlsyms the functions it calls, as
// TensorFlow and JAX do. Lookups on those handles bypass symbol
// interposition; only a dlsym hook sees them.
//
//   route_framework MANIFEST
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "route_manifest.h"

using route::addr;
using route::check;

namespace {

template <typename Fn>
Fn lookup(void* handle, const char* name) {
  void* fn = dlsym(handle, name);
  if (!fn) route::fail(name, 0);
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  check(cudart && cuda, "dlopen the CUDA libraries");

  const auto cuda_malloc = lookup<decltype(&cudaMalloc)>(cudart, "cudaMalloc");
  const auto cuda_free = lookup<decltype(&cudaFree)>(cudart, "cudaFree");
  const auto malloc_async = lookup<decltype(&cudaMallocAsync)>(cudart, "cudaMallocAsync");
  const auto free_async = lookup<decltype(&cudaFreeAsync)>(cudart, "cudaFreeAsync");
  const auto stream_sync = lookup<decltype(&cudaStreamSynchronize)>(cudart, "cudaStreamSynchronize");
  const auto mem_alloc = lookup<decltype(&cuMemAlloc_v2)>(cuda, "cuMemAlloc_v2");
  const auto mem_free = lookup<decltype(&cuMemFree_v2)>(cuda, "cuMemFree_v2");
  const auto get_proc = lookup<decltype(&cuGetProcAddress_v2)>(cuda, "cuGetProcAddress_v2");
  m.resolve("cudaMalloc", reinterpret_cast<void*>(cuda_malloc));
  m.resolve("cudaStreamSynchronize", reinterpret_cast<void*>(stream_sync));
  m.resolve("cuMemAlloc_v2", reinterpret_cast<void*>(mem_alloc));
  m.resolve("cuGetProcAddress_v2", reinterpret_cast<void*>(get_proc));

  check(cuda_free(nullptr) == cudaSuccess, "cudaFree(NULL)");
  void* a = nullptr;
  check(cuda_malloc(&a, 1 << 20) == cudaSuccess, "cudaMalloc");
  m.alloc("cudaMalloc", "device", 0, addr(a), 1 << 20);

  // The runtime made its context current; the driver API allocates in it.
  CUdeviceptr d = 0;
  check(mem_alloc(&d, 2 << 20) == CUDA_SUCCESS, "cuMemAlloc_v2");
  m.alloc("cuMemAlloc_v2", "device", 0, d, 2 << 20);

  void* x = nullptr;
  check(malloc_async(&x, 4096, nullptr) == cudaSuccess, "cudaMallocAsync");
  m.alloc("cudaMallocAsync", "device", 0, addr(x), 4096, 0);
  check(free_async(x, nullptr) == cudaSuccess, "cudaFreeAsync");
  m.free("cudaFreeAsync", "device", 0, addr(x), 4096, 0);
  check(stream_sync(nullptr) == cudaSuccess, "cudaStreamSynchronize");

  // A driver function through the cuGetProcAddress the framework dlsym'd.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  check(get_proc("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS && fn,
        "cuGetProcAddress_v2(cuMemAlloc)");
  CUdeviceptr e = 0;
  check(reinterpret_cast<decltype(&cuMemAlloc_v2)>(fn)(&e, 3000) == CUDA_SUCCESS, "cuMemAlloc_v2 (proc)");
  m.alloc("cuMemAlloc_v2", "device", 0, e, 3000);

  // The global scope has no cudaMalloc of its own (the runtime is private);
  // under a preloaded interposer it has the interposer's, which must then
  // find the privately loaded runtime behind it, as for an extension module
  // whose library binds to the interposer.
  void* g = nullptr;
  if (const auto global_malloc =
          reinterpret_cast<decltype(&cudaMalloc)>(dlsym(RTLD_DEFAULT, "cudaMalloc"))) {
    check(global_malloc(&g, 512) == cudaSuccess, "cudaMalloc from RTLD_DEFAULT");
    m.alloc("cudaMalloc", "device", 0, addr(g), 512);
  }

  check(mem_free(d) == CUDA_SUCCESS, "cuMemFree_v2");
  m.free("cuMemFree_v2", "device", 0, d, 2 << 20);
  check(cuda_free(a) == cudaSuccess, "cudaFree");
  m.free("cudaFree", "device", 0, addr(a), 1 << 20);
  if (g) {
    check(cuda_free(g) == cudaSuccess, "cudaFree(g)");
    m.free("cudaFree", "device", 0, addr(g), 512);
  }
  check(mem_free(e) == CUDA_SUCCESS, "cuMemFree_v2(e)");
  m.free("cuMemFree_v2", "device", 0, e, 3000);
  return 0;
}
