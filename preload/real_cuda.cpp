#include "real_cuda.h"

#include <dlfcn.h>

#include <cuda.h>

namespace cumemtrace::preload {
namespace {

template <typename Fn>
void resolve_next(Fn& slot, const char* name) {
  slot = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

struct DriverQueries {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*device_total_mem)(size_t*, CUdevice) = nullptr;
};

DriverQueries load_driver_queries() {
  DriverQueries q;
  // RTLD_NOLOAD: only a driver the runtime already loaded; we never load one.
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!driver) return q;
  q.device_get = reinterpret_cast<decltype(q.device_get)>(::dlsym(driver, "cuDeviceGet"));
  q.device_get_name = reinterpret_cast<decltype(q.device_get_name)>(::dlsym(driver, "cuDeviceGetName"));
  q.device_total_mem =
      reinterpret_cast<decltype(q.device_total_mem)>(::dlsym(driver, "cuDeviceTotalMem_v2"));
  ::dlclose(driver);  // drops only the reference NOLOAD took
  return q;
}

}  // namespace

const RealRuntime& real_runtime() {
  static const RealRuntime resolved = [] {
    RealRuntime r;
    resolve_next(r.malloc, "cudaMalloc");
    resolve_next(r.free, "cudaFree");
    resolve_next(r.get_device, "cudaGetDevice");
    return r;
  }();
  return resolved;
}

bool query_device_from_driver(int ordinal, DeviceDescription& out) {
  static const DriverQueries q = load_driver_queries();
  if (!q.device_get || !q.device_get_name || !q.device_total_mem) return false;
  CUdevice dev{};
  if (q.device_get(&dev, ordinal) != CUDA_SUCCESS) return false;
  char name[256] = {};
  if (q.device_get_name(name, sizeof name - 1, dev) != CUDA_SUCCESS) return false;
  size_t total = 0;
  if (q.device_total_mem(&total, dev) != CUDA_SUCCESS) return false;
  out.name = name;
  out.total_bytes = total;
  return true;
}

}  // namespace cumemtrace::preload
