// CUDA_VISIBLE_DEVICES on the sim: which simulated devices a process sees,
// in which order (CUDA C++ Programming Guide, "CUDA Environment Variables").
// Usage: sim_visible_devices EXPECTED, where EXPECTED lists the physical
// indices the visible devices must have, in order ("2,0"), or "none" when
// cuInit must find no device. The ctest sets SIMCUDA_DEVICE_COUNT and
// CUDA_VISIBLE_DEVICES. The variable is set here, after the driver is loaded
// and before cuInit, when the ctest passes it as SET_CUDA_VISIBLE_DEVICES:
// the driver reads it at cuInit (numba#6149 relies on that).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "sim_test.h"

int main(int argc, char** argv) {
  if (argc != 2) SIM_FAIL("usage: sim_visible_devices EXPECTED");
  if (!dlopen("libcuda.so.1", RTLD_NOW) || !simtest::mapped("sim/libcuda.so.1")) {
    SIM_FAIL("not on the sim's libcuda.so.1: run with LD_LIBRARY_PATH=<build>/sim");
  }
  if (const char* late = std::getenv("SET_CUDA_VISIBLE_DEVICES")) {
    setenv("CUDA_VISIBLE_DEVICES", late, 1);
  }
  const std::string expected = argv[1];
  if (expected == "none") {
    SIM_EXPECT_CU(cuInit(0), CUDA_ERROR_NO_DEVICE);
    std::printf("sim_visible_devices: no device, as expected\n");
    return 0;
  }
  SIM_CU_OK(cuInit(0));
  std::string seen;
  int count = 0;
  SIM_CU_OK(cuDeviceGetCount(&count));
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    SIM_CU_OK(cuDeviceGet(&dev, i));
    CUuuid uuid{};
    SIM_CU_OK(cuDeviceGetUuid(&uuid, dev));
    int bus = -1;
    SIM_CU_OK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev));
    const int physical = uuid.bytes[15];
    // The UUID and the PCI bus id name the same simulated device.
    SIM_CHECK(bus == 0x10 + physical);
    seen += (seen.empty() ? "" : ",") + std::to_string(physical);
  }
  if (seen != expected) SIM_FAIL("visible devices %s, expected %s", seen.c_str(), expected.c_str());
  // Device memory works on each visible device.
  for (int i = 0; i < count; ++i) {
    CUcontext ctx = nullptr;
    SIM_CU_OK(cuDevicePrimaryCtxRetain(&ctx, i));
    SIM_CU_OK(cuCtxPushCurrent(ctx));
    CUdeviceptr p = 0;
    SIM_CU_OK(cuMemAlloc(&p, 4096));
    SIM_CU_OK(cuMemFree(p));
    SIM_CU_OK(cuCtxPopCurrent(nullptr));
    SIM_CU_OK(cuDevicePrimaryCtxRelease(i));
  }
  std::printf("sim_visible_devices: %s\n", seen.c_str());
  return 0;
}
