// The dlsym hook must leave dlsym exactly as glibc's for everyone:
//  - RTLD_NEXT resolves relative to the object that called dlsym
//    (probe_a asks for the probe_value after its own and must get probe_b's);
//  - RTLD_DEFAULT searches the caller's scope (a library loaded with
//    RTLD_LOCAL finds its own dependency);
//  - every name glibc resolves on a handle is resolved, to the same
//    function unless it is a CUDA memory function;
//  - the GLIBC_2.2.5 version of dlsym (old binaries, NVIDIA's libraries) is
//    hooked too: a driver function looked up through it is traced.
// Prints "dlsym: ok" and exits 0, or says what differed and exits 1.
//
//   route_dlsym MANIFEST PROBE_LOCAL_LIBRARY
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

#include "route_manifest.h"

extern "C" int probe_value();
extern "C" int probe_next_value();
extern "C" void* probe_old_dlsym(void* handle, const char* name);

using route::check;

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "route_dlsym: %s\n", what);
  ++failures;
}

bool memory_function(const char* name) {
  for (const char* m : {"cuMemAlloc_v2", "cuGetProcAddress_v2", "cudaMalloc", "cudaFree"}) {
    if (std::strcmp(m, name) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  route::Manifest m(argv[1]);
  check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");

  expect(probe_value() == 'A', "probe_a comes first");
  expect(probe_next_value() == 'B', "RTLD_NEXT from probe_a must find probe_b's probe_value");
  const auto next_from_here = reinterpret_cast<int (*)()>(dlsym(RTLD_NEXT, "probe_value"));
  expect(next_from_here && next_from_here() == 'A', "RTLD_NEXT from the program must find probe_a's");

  void* local = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  check(local != nullptr, "dlopen the RTLD_LOCAL probe");
  const auto lookup = reinterpret_cast<int (*)()>(dlsym(local, "probe_default_lookup"));
  expect(lookup && lookup() == 1, "RTLD_DEFAULT from a RTLD_LOCAL library must see its dependency");
  expect(dlsym(RTLD_DEFAULT, "probe_local_only") == nullptr, "the program's scope does not have it");

  // glibc's own dlsym, found on libc's handle, which no interposer can change.
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  check(libc != nullptr, "libc.so.6 is loaded");
  const auto glibc_dlsym = reinterpret_cast<void* (*)(void*, const char*)>(dlvsym(libc, "dlsym", "GLIBC_2.34"));
  check(glibc_dlsym != nullptr, "glibc's dlsym");
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  check(cudart && cuda, "the CUDA libraries are loaded");
  for (void* handle : {libc, cudart, cuda}) {
    for (const char* name : {"malloc", "printf", "no_such_symbol", "cuInit", "cuStreamSynchronize",
                             "cuMemAlloc_v2", "cuGetProcAddress_v2", "cudaMalloc", "cudaFree",
                             "cudaStreamCreate", "cudaGetDeviceCount"}) {
      void* ours = dlsym(handle, name);
      void* theirs = glibc_dlsym(handle, name);
      expect((ours != nullptr) == (theirs != nullptr), name);
      if (!memory_function(name)) expect(ours == theirs, name);
    }
  }

  // dlsym@GLIBC_2.2.5, from a library built against an old glibc.
  const auto old_alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(probe_old_dlsym(cuda, "cuMemAlloc_v2"));
  const auto old_free = reinterpret_cast<decltype(&cuMemFree_v2)>(probe_old_dlsym(cuda, "cuMemFree_v2"));
  check(old_alloc && old_free, "dlsym@GLIBC_2.2.5");
  m.resolve("cuMemAlloc_v2@GLIBC_2.2.5", reinterpret_cast<void*>(old_alloc));
  CUdeviceptr d = 0;
  check(old_alloc(&d, 65536) == CUDA_SUCCESS, "cuMemAlloc_v2 via dlsym@GLIBC_2.2.5");
  m.alloc("cuMemAlloc_v2", "device", 0, d, 65536);
  check(old_free(d) == CUDA_SUCCESS, "cuMemFree_v2 via dlsym@GLIBC_2.2.5");
  m.free("cuMemFree_v2", "device", 0, d, 65536);

  if (failures == 0) std::puts("dlsym: ok");
  return failures == 0 ? 0 : 1;
}
