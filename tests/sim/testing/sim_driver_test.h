// Helpers of the sim's driver-API test programs (tests/apps/sim_*.cpp built
// with DRIVER): header-only, beside sim_test.h.
#pragma once

#include <cuda.h>

#include <string>

#include "sim_test.h"

namespace simtest {

// cuInit, then device 0's primary context retained and made current, as a
// driver-API program starts; the device's name in *name.
inline CUdevice primary_context_current(std::string* name) {
  SIM_CU_OK(cuInit(0));
  CUdevice dev = 0;
  SIM_CU_OK(cuDeviceGet(&dev, 0));
  char text[256] = {};
  SIM_CU_OK(cuDeviceGetName(text, sizeof text, dev));
  *name = text;
  CUcontext ctx = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
  SIM_CU_OK(cuCtxSetCurrent(ctx));
  return dev;
}

// Properties of pinned VMM memory on device `dev` (cuMemCreate).
inline CUmemAllocationProp vmm_prop(CUdevice dev = 0) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

// Access of device `dev` to VMM memory (cuMemSetAccess), read-write by default.
inline CUmemAccessDesc vmm_access(CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                                  CUdevice dev = 0) {
  CUmemAccessDesc d{};
  d.location = vmm_prop(dev).location;
  d.flags = flags;
  return d;
}

}  // namespace simtest
