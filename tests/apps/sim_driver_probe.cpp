// Driver-API behaviour our hooks and route programs rely on, as facts a
// real GPU can be asked too: the legacy unsuffixed 32-bit entry points, a
// virtual-address reservation freed while still mapped, and what the
// stream-ordered pool counts as used after each way of freeing its memory.
// On the sim every fact must equal the sim's value (exit 1 otherwise); on a
// real GPU the program only reports, marking each difference, and ends with
// `differences from the sim: N` (exit 0), so scripts/gpu-check.sh shows
// whether the sim, the route programs or the preload need changing.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "sim_probe.h"

extern "C" CUresult legacy_mem_alloc(unsigned int* dptr, unsigned int bytes) __asm__("cuMemAlloc");
extern "C" CUresult legacy_mem_free(unsigned int dptr) __asm__("cuMemFree");
extern "C" CUresult legacy_mem_alloc_pitch(unsigned int* dptr, unsigned int* pitch, unsigned int width,
                                           unsigned int height, unsigned int elem) __asm__("cuMemAllocPitch");
extern "C" CUresult legacy_mem_alloc_host(void** pp, unsigned int bytes) __asm__("cuMemAllocHost");
extern "C" CUresult legacy_mem_get_info(unsigned int* free_b, unsigned int* total_b) __asm__("cuMemGetInfo");

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

simtest::Probe g_probe;
using simtest::mib_text;

std::string name_of(CUresult rc) {
  const char* name = nullptr;
  if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name) return "CUresult " + std::to_string(rc);
  return name;
}

cuuint64_t pool_used(CUmemoryPool pool) {
  cuuint64_t used = 0;
  SIM_CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  return used;
}

// The pool's used memory above `start` (negative when below), in MiB.
std::string used_above(CUmemoryPool pool, cuuint64_t start) {
  return mib_text(static_cast<double>(pool_used(pool)) - static_cast<double>(start));
}

void legacy_entry_points() {
  unsigned int small = 0;
  const CUresult alloc_rc = legacy_mem_alloc(&small, 4096);
  g_probe.fact("legacy cuMemAlloc(4096)", name_of(alloc_rc), "CUDA_ERROR_INVALID_CONTEXT");
  if (alloc_rc == CUDA_SUCCESS) {
    g_probe.fact("legacy cuMemFree of it", name_of(legacy_mem_free(small)), "CUDA_ERROR_INVALID_CONTEXT");
  }
  unsigned int pitched = 0, pitch = 0;
  const CUresult pitch_rc = legacy_mem_alloc_pitch(&pitched, &pitch, 100, 2, 4);
  g_probe.fact("legacy cuMemAllocPitch(100 x 2)", name_of(pitch_rc), "CUDA_ERROR_INVALID_CONTEXT");
  if (pitch_rc == CUDA_SUCCESS) legacy_mem_free(pitched);
  void* host = nullptr;
  const CUresult host_rc = legacy_mem_alloc_host(&host, 512);
  g_probe.fact("legacy cuMemAllocHost(512)", name_of(host_rc), "CUDA_ERROR_INVALID_CONTEXT");
  if (host_rc == CUDA_SUCCESS) cuMemFreeHost(host);
  unsigned int free32 = 0, total32 = 0;
  g_probe.fact("legacy cuMemGetInfo", name_of(legacy_mem_get_info(&free32, &total32)),
               "CUDA_ERROR_INVALID_CONTEXT");
}

void address_free_while_mapped() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  std::size_t gran = 0;
  SIM_CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUdeviceptr va = 0;
  SIM_CU_OK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
  CUmemGenericAllocationHandle h = 0;
  SIM_CU_OK(cuMemCreate(&h, gran, &prop, 0));
  SIM_CU_OK(cuMemMap(va, gran, 0, h, 0));
  const CUresult rc = cuMemAddressFree(va, 2 * gran);
  g_probe.fact("cuMemAddressFree of a reservation with a mapping in it", name_of(rc),
               "CUDA_ERROR_INVALID_VALUE");
  if (rc != CUDA_SUCCESS) {
    SIM_CU_OK(cuMemUnmap(va, gran));
    g_probe.fact("then, unmapped, cuMemAddressFree", name_of(cuMemAddressFree(va, 2 * gran)), "CUDA_SUCCESS");
  }
  SIM_CU_OK(cuMemRelease(h));
}

// The preload's caching pool takes stream-ordered segments with
// cuMemAllocAsync, and their stream can be gone when it gives them back:
// what does the driver's pool count as used after cuMemFree, after
// cuMemFreeAsync, and after what the pool does (preload/pool/glue/driver_upstream.cpp)?
void stream_ordered_accounting() {
  CUdevice dev = 0;
  SIM_CU_OK(cuDeviceGet(&dev, 0));
  CUmemoryPool pool = nullptr;
  SIM_CU_OK(cuDeviceGetDefaultMemPool(&pool, dev));
  CUstream stream = nullptr;
  SIM_CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const std::size_t size = 64 * kMiB;

  const cuuint64_t before = pool_used(pool);
  CUdeviceptr p = 0;
  SIM_CU_OK(cuMemAllocAsync(&p, size, stream));
  g_probe.fact("cuMemAllocAsync(64 MiB): the pool's used memory grows by", used_above(pool, before),
               mib_text(static_cast<double>(size)));
  SIM_CU_OK(cuStreamSynchronize(stream));
  SIM_CU_OK(cuMemFree(p));
  SIM_CU_OK(cuCtxSynchronize());
  g_probe.fact("then cuMemFree: used above the start", used_above(pool, before),
               mib_text(static_cast<double>(size)));

  // (Measured on the next allocation: used stays above the start for good.)
  const cuuint64_t again = pool_used(pool);
  SIM_CU_OK(cuMemAllocAsync(&p, size, stream));
  SIM_CU_OK(cuMemFreeAsync(p, stream));
  SIM_CU_OK(cuStreamSynchronize(stream));
  g_probe.fact("cuMemAllocAsync(64 MiB), cuMemFreeAsync, synchronised: used above the start",
               used_above(pool, again), mib_text(0));

  // What the preload does now: synchronise, then free on the legacy stream.
  const cuuint64_t third = pool_used(pool);
  SIM_CU_OK(cuMemAllocAsync(&p, size, stream));
  SIM_CU_OK(cuCtxSynchronize());
  SIM_CU_OK(cuMemFreeAsync(p, CU_STREAM_LEGACY));
  SIM_CU_OK(cuCtxSynchronize());
  g_probe.fact("cuMemAllocAsync(64 MiB), then cuMemFreeAsync on CU_STREAM_LEGACY: used above the start",
               used_above(pool, third), mib_text(0));
  SIM_CU_OK(cuStreamDestroy(stream));
}

}  // namespace

int main() {
  SIM_CU_OK(cuInit(0));
  CUdevice dev = 0;
  SIM_CU_OK(cuDeviceGet(&dev, 0));
  char name[256] = {};
  SIM_CU_OK(cuDeviceGetName(name, sizeof name, dev));
  g_probe.set_on_sim(std::strstr(name, "SimCUDA") != nullptr);
  std::printf("device: %s\n", name);
  CUcontext ctx = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
  SIM_CU_OK(cuCtxSetCurrent(ctx));

  legacy_entry_points();
  address_free_while_mapped();
  stream_ordered_accounting();

  return g_probe.finish();
}
