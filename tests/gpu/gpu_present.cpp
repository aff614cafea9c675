// Is there a real NVIDIA GPU? Asks the driver itself: dlopens libcuda.so.1
// (whichever the loader finds, as a CUDA program would), cuInit(0), then
// cuDeviceGetCount. Exit 0 and one line naming the device when there is one;
// exit 77 (ctest's SKIP_RETURN_CODE for tests/gpu) with the reason when not.
//
// The toolkit's stub libcuda.so (toolkit/lib64/stubs) answers every call
// with CUDA_ERROR_STUB_LIBRARY, and the simulated device (tests/sim) names
// itself "SimCUDA Device (simulated)": neither counts as a GPU.
//
//   gpu_present [--allow-sim]
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace {

constexpr int kNoGpu = 77;

template <typename Fn>
Fn lookup(void* driver, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(driver, name));
}

}  // namespace

int main(int argc, char** argv) {
  const bool allow_sim = argc == 2 && std::strcmp(argv[1], "--allow-sim") == 0;
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::printf("no GPU: no CUDA driver (%s)\n", ::dlerror());
    return kNoGpu;
  }
  const auto init = lookup<decltype(&cuInit)>(driver, "cuInit");
  const auto count = lookup<decltype(&cuDeviceGetCount)>(driver, "cuDeviceGetCount");
  const auto get = lookup<decltype(&cuDeviceGet)>(driver, "cuDeviceGet");
  const auto name = lookup<decltype(&cuDeviceGetName)>(driver, "cuDeviceGetName");
  const auto version = lookup<decltype(&cuDriverGetVersion)>(driver, "cuDriverGetVersion");
  if (!init || !count || !get || !name || !version) {
    std::printf("no GPU: libcuda.so.1 lacks the driver API\n");
    return kNoGpu;
  }
  const CUresult r = init(0);
  if (r == CUDA_ERROR_STUB_LIBRARY) {
    std::printf("no GPU: libcuda.so.1 is the toolkit's stub library\n");
    return kNoGpu;
  }
  if (r != CUDA_SUCCESS) {
    std::printf("no GPU: cuInit failed with CUresult %d\n", static_cast<int>(r));
    return kNoGpu;
  }
  int devices = 0;
  if (count(&devices) != CUDA_SUCCESS || devices < 1) {
    std::printf("no GPU: the driver reports no device\n");
    return kNoGpu;
  }
  CUdevice dev = 0;
  char device_name[256] = {};
  int driver_version = 0;
  if (get(&dev, 0) != CUDA_SUCCESS || name(device_name, sizeof device_name - 1, dev) != CUDA_SUCCESS) {
    std::printf("no GPU: device 0 cannot be queried\n");
    return kNoGpu;
  }
  version(&driver_version);
  if (std::strstr(device_name, "SimCUDA") != nullptr && !allow_sim) {
    std::printf("no GPU: only the simulated device (%s)\n", device_name);
    return kNoGpu;
  }
  std::printf("GPU: %s, %d device(s), driver API %d.%d\n", device_name, devices, driver_version / 1000,
              (driver_version % 1000) / 10);
  return 0;
}
