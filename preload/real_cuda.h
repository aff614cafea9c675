// The real CUDA functions behind our hooks, found at run time: the preload
// has no NEEDED entry on libcudart or libcuda (DESIGN.md), so a program that
// never uses CUDA starts as if cumemtrace were absent.
#pragma once

#include <cuda_runtime_api.h>

#include "recorder.h"

namespace cumemtrace::preload {

struct RealRuntime {
  cudaError_t (*malloc)(void** ptr, size_t size) = nullptr;
  cudaError_t (*free)(void* ptr) = nullptr;
  cudaError_t (*get_device)(int* device) = nullptr;
};

// Resolved once, with dlsym(RTLD_NEXT): the next definition after ours in the
// lookup order, i.e. the libcudart.so the program linked.
const RealRuntime& real_runtime();

// Name and memory size of a device, from the driver the runtime has loaded.
bool query_device_from_driver(int ordinal, DeviceDescription& out);

}  // namespace cumemtrace::preload
