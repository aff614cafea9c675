// Route: virtual memory management, as PyTorch's expandable segments and
// NCCL use it. cuMemCreate is an alloc of kind vmm (ptr = the handle),
// cuMemRelease of the last reference its free; each cuMemMap is a
// segment_alloc of the mapped range and each unmap a segment_free.
//
//   route_vmm MANIFEST
#include <cuda.h>

#include "route_manifest.h"

using route::check;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);
  check(cuInit(0) == CUDA_SUCCESS, "cuInit");
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS,
        "context");

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  std::size_t gran = 0;
  check(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS,
        "granularity");
  const std::size_t chunk = 2 * gran;

  CUdeviceptr va = 0;
  check(cuMemAddressReserve(&va, 4 * chunk, 0, 0, 0) == CUDA_SUCCESS, "reserve");
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  check(cuMemCreate(&h1, chunk, &prop, 0) == CUDA_SUCCESS, "create h1");
  m.alloc("cuMemCreate", "vmm", 0, h1, chunk);
  check(cuMemCreate(&h2, chunk, &prop, 0) == CUDA_SUCCESS, "create h2");
  m.alloc("cuMemCreate", "vmm", 0, h2, chunk);

  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(cuMemMap(va, chunk, 0, h1, 0) == CUDA_SUCCESS, "map h1");
  m.map(0, va, chunk);
  check(cuMemMap(va + chunk, chunk, 0, h2, 0) == CUDA_SUCCESS, "map h2");
  m.map(0, va + chunk, chunk);
  check(cuMemSetAccess(va, 2 * chunk, &access, 1) == CUDA_SUCCESS, "access");
  check(cuMemsetD8(va, 0x5a, 2 * chunk) == CUDA_SUCCESS, "write");

  // A partial unmap is refused by the driver and changes nothing.
  check(cuMemUnmap(va, gran) == CUDA_ERROR_INVALID_VALUE, "partial unmap");
  check(cuMemUnmap(va, chunk) == CUDA_SUCCESS, "unmap h1");
  m.unmap(0, va, chunk);
  check(cuMemMap(va + 2 * chunk, chunk, 0, h1, 0) == CUDA_SUCCESS, "remap h1");
  m.map(0, va + 2 * chunk, chunk);

  // A second reference: the first release gives nothing back yet.
  CUmemGenericAllocationHandle again = 0;
  check(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + 2 * chunk)) == CUDA_SUCCESS &&
            again == h1,
        "retain");
  check(cuMemRelease(h1) == CUDA_SUCCESS, "release h1 (1 of 2)");
  check(cuMemRelease(again) == CUDA_SUCCESS, "release h1 (2 of 2)");
  m.free("cuMemRelease", "vmm", 0, h1, chunk);
  // Released while mapped: still usable (reserved) until unmapped.
  check(cuMemUnmap(va + 2 * chunk, chunk) == CUDA_SUCCESS, "unmap h1 again");
  m.unmap(0, va + 2 * chunk, chunk);

  check(cuMemRelease(h2) == CUDA_SUCCESS, "release h2");
  m.free("cuMemRelease", "vmm", 0, h2, chunk);
  check(cuMemRelease(h2) == CUDA_ERROR_INVALID_VALUE, "release h2 twice");
  m.error("cuMemRelease", h2, "double_free");
  // A reservation with a mapping left in it (h2) is refused, and stays as
  // it was: no segment_free (driver 580 on an H100, sim_driver_probe).
  check(cuMemAddressFree(va, 4 * chunk) == CUDA_ERROR_INVALID_VALUE, "address free while mapped");
  check(cuMemUnmap(va + chunk, chunk) == CUDA_SUCCESS, "unmap h2");
  m.unmap(0, va + chunk, chunk);
  check(cuMemAddressFree(va, 4 * chunk) == CUDA_SUCCESS, "address free");

  // One handle kept to the end, mapped nowhere.
  CUmemGenericAllocationHandle kept = 0;
  check(cuMemCreate(&kept, chunk, &prop, 0) == CUDA_SUCCESS, "create kept");
  m.alloc("cuMemCreate", "vmm", 0, kept, chunk);
  return 0;
}
