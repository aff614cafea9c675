// Host registration, peer access between two simulated devices, profiler
// start/stop, managed-memory hints, 2D copies and pointer attributes, through
// the driver and then the runtime (tests/sim/driver/drv_host_peer.cpp,
// drv_copy.cpp, drv_memory.cpp, tests/sim/runtime/rt_misc.cpp). Run with
// SIMCUDA_DEVICE_COUNT=2.
#include <cuda.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>
#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "sim_test.h"

namespace {

std::size_t used() {
  std::size_t f = 0, t = 0;
  SIM_CU_OK(cuMemGetInfo(&f, &t));
  return t - f;
}

template <typename T>
T attr(CUpointer_attribute a, CUdeviceptr p) {
  T v{};
  SIM_CU_OK(cuPointerGetAttribute(&v, a, p));
  return v;
}

CUdeviceptr dp(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// An address that is no stream.
void* by_hand() {
  static int not_a_stream;
  return &not_a_stream;
}

void host_registration(CUcontext ctx0) {
  const std::size_t n = simtest::mib(3);
  std::vector<unsigned char> buf(n, 0x11);
  void* h = buf.data();
  // No current context.
  SIM_CU_OK(cuCtxSetCurrent(nullptr));
  SIM_EXPECT_CU(cuMemHostRegister(h, n, 0), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CU_OK(cuCtxSetCurrent(ctx0));
  // Pageable memory is not device-visible before registration.
  SIM_EXPECT_CU(cuMemsetD8(dp(h), 0x22, 16), CUDA_ERROR_INVALID_VALUE);
  unsigned int type = 0;
  SIM_EXPECT_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp(h)),
                CUDA_ERROR_INVALID_VALUE);

  SIM_EXPECT_CU(cuMemHostRegister(h, n, 0x10), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemHostRegister(nullptr, n, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemHostRegister(h, 0, 0), CUDA_ERROR_INVALID_VALUE);
  // CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED is 0.
  SIM_EXPECT_CU(cuMemHostRegister(h, n, CU_MEMHOSTREGISTER_READ_ONLY), CUDA_ERROR_NOT_SUPPORTED);
  // Unmapped host memory cannot be registered.
  void* gone = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  SIM_CHECK(gone != MAP_FAILED);
  munmap(gone, 1 << 16);
  SIM_EXPECT_CU(cuMemHostRegister(gone, 1 << 16, 0), CUDA_ERROR_INVALID_VALUE);

  const std::size_t before = used();
  SIM_CU_OK(cuMemHostRegister(h, n, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  SIM_CHECK(used() == before);  // host memory: no device capacity
  SIM_EXPECT_CU(cuMemHostRegister(h, n, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  SIM_EXPECT_CU(cuMemHostRegister(buf.data() + 4096, 4096, 0),
                CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  // A range around a registration (both ends outside it) overlaps it too.
  std::vector<unsigned char> outer(3 * 4096);
  SIM_CU_OK(cuMemHostRegister(outer.data() + 4096, 4096, 0));
  SIM_EXPECT_CU(cuMemHostRegister(outer.data(), outer.size(), 0),
                CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  SIM_CU_OK(cuMemHostUnregister(outer.data() + 4096));
  void* pinned = nullptr;
  SIM_CU_OK(cuMemHostAlloc(&pinned, 4096, 0));
  SIM_EXPECT_CU(cuMemHostRegister(pinned, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CUdeviceptr d = 0;
  SIM_CU_OK(cuMemAlloc(&d, n));
  SIM_EXPECT_CU(cuMemHostRegister(reinterpret_cast<void*>(d), 4096, 0), CUDA_ERROR_INVALID_VALUE);

  // Device-visible: the device pointer is the host pointer (unified
  // addressing), sets and copies reach the program's bytes.
  CUdeviceptr hd = 0;
  SIM_CU_OK(cuMemHostGetDevicePointer(&hd, buf.data() + 100, 0));
  SIM_CHECK(hd == dp(buf.data() + 100));
  SIM_CU_OK(cuMemsetD8(hd, 0x5a, 1000));
  SIM_CHECK(buf[99] == 0x11 && buf[100] == 0x5a && buf[1099] == 0x5a && buf[1100] == 0x11);
  SIM_CU_OK(cuMemcpyDtoD(d, dp(h), n));
  std::vector<unsigned char> back(n);
  SIM_CU_OK(cuMemcpyDtoH(back.data(), d, n));
  SIM_CHECK(back == buf);
  SIM_CU_OK(cuMemsetD8(d, 0x77, n));
  SIM_CU_OK(cuMemcpy(dp(h), d, n));
  SIM_CHECK(buf[0] == 0x77 && buf[n - 1] == 0x77);

  SIM_CHECK(attr<unsigned int>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp(h) + 10) == CU_MEMORYTYPE_HOST);
  SIM_CHECK(attr<void*>(CU_POINTER_ATTRIBUTE_HOST_POINTER, dp(h) + 10) == buf.data() + 10);
  SIM_CHECK(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dp(h) + 10) == dp(h));
  SIM_CHECK(attr<std::size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, dp(h) + 10) == n);
  SIM_CHECK(attr<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, dp(h)) == ctx0);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, dp(h)) == 0);
  SIM_CHECK(attr<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, dp(h)) != 0);
  // The registration is the address range holding its pointers; so is a
  // pinned allocation (Numba sizes mapped arrays so).
  CUdeviceptr rb = 0;
  std::size_t rs = 0;
  SIM_CU_OK(cuMemGetAddressRange(&rb, &rs, dp(h) + 4097));
  SIM_CHECK(rb == dp(h) && rs == n);
  SIM_CU_OK(cuMemGetAddressRange(&rb, &rs, dp(pinned) + 5));
  SIM_CHECK(rb == dp(pinned) && rs == 4096);
  SIM_EXPECT_CU(cuMemGetAddressRange(&rb, &rs, dp(&rs)), CUDA_ERROR_NOT_FOUND);
  // cuMemHostGetFlags answers only for cuMemAllocHost/cuMemHostAlloc memory.
  unsigned int flags = 0;
  SIM_EXPECT_CU(cuMemHostGetFlags(&flags, h), CUDA_ERROR_INVALID_VALUE);
  // A range past the registration is not device-visible.
  SIM_EXPECT_CU(cuMemsetD8(dp(h) + n - 8, 0, 16), CUDA_ERROR_INVALID_VALUE);

  SIM_EXPECT_CU(cuMemHostUnregister(buf.data() + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  SIM_EXPECT_CU(cuMemHostUnregister(nullptr), CUDA_ERROR_INVALID_VALUE);
  // Unregistering needs no current context (nor does freeing pinned memory).
  SIM_CU_OK(cuCtxSetCurrent(nullptr));
  SIM_CU_OK(cuMemHostUnregister(h));
  SIM_CU_OK(cuMemFreeHost(pinned));
  SIM_CU_OK(cuCtxSetCurrent(ctx0));
  SIM_EXPECT_CU(cuMemHostUnregister(h), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  SIM_EXPECT_CU(cuMemsetD8(dp(h), 0x22, 16), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemHostGetDevicePointer(&hd, h, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(buf[0] == 0x77);  // still the program's memory

  // A reset of the registering context drops its registrations.
  SIM_CU_OK(cuMemHostRegister(h, n, 0));
  SIM_CU_OK(cuMemFree(d));
  SIM_CU_OK(cuDevicePrimaryCtxReset(0));
  SIM_EXPECT_CU(cuMemsetD8(dp(h), 0x22, 16), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemHostUnregister(h), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

void peer_access(CUcontext ctx0, CUcontext ctx1) {
  int can = -1;
  SIM_CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
  SIM_CHECK(can == 1);
  SIM_CU_OK(cuDeviceCanAccessPeer(&can, 0, 0));
  SIM_CHECK(can == 0);

  SIM_CU_OK(cuCtxSetCurrent(nullptr));
  SIM_EXPECT_CU(cuCtxEnablePeerAccess(ctx1, 0), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CU_OK(cuCtxSetCurrent(ctx0));
  SIM_EXPECT_CU(cuCtxEnablePeerAccess(ctx0, 0), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxEnablePeerAccess(reinterpret_cast<CUcontext>(&can), 0),
                CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxEnablePeerAccess(ctx1, 1), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuCtxDisablePeerAccess(ctx1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  SIM_CU_OK(cuCtxEnablePeerAccess(ctx1, 0));
  SIM_EXPECT_CU(cuCtxEnablePeerAccess(ctx1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  // One-way.
  SIM_CU_OK(cuCtxSetCurrent(ctx1));
  SIM_EXPECT_CU(cuCtxDisablePeerAccess(ctx0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  SIM_CU_OK(cuCtxEnablePeerAccess(ctx0, 0));
  SIM_CU_OK(cuCtxDisablePeerAccess(ctx0));
  SIM_CU_OK(cuCtxSetCurrent(ctx0));
  SIM_CU_OK(cuCtxDisablePeerAccess(ctx1));
  SIM_EXPECT_CU(cuCtxDisablePeerAccess(ctx1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  // Another context of the same device: cuDeviceCanAccessPeer(0, 0) is 0.
  CUcontext other = nullptr;
  SIM_CU_OK(cuCtxCreate(&other, nullptr, 0, 0));  // pushed
  CUcontext popped = nullptr;
  SIM_CU_OK(cuCtxPopCurrent(&popped));
  SIM_CHECK(popped == other);
  SIM_EXPECT_CU(cuCtxEnablePeerAccess(other, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  SIM_CU_OK(cuCtxDestroy(other));
  // A reset of the peer takes its mappings, and the enabled access, along.
  SIM_CU_OK(cuCtxEnablePeerAccess(ctx1, 0));
  SIM_CU_OK(cuDevicePrimaryCtxReset(1));
  SIM_CU_OK(cuCtxEnablePeerAccess(ctx1, 0));
  SIM_CU_OK(cuCtxDisablePeerAccess(ctx1));

  int v = -1;
  SIM_CU_OK(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
  SIM_CHECK(v == 1);
  SIM_CU_OK(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, 1, 0));
  SIM_CHECK(v == 0);
  SIM_EXPECT_CU(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0),
                CUDA_ERROR_INVALID_DEVICE);
  SIM_EXPECT_CU(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 2),
                CUDA_ERROR_INVALID_DEVICE);
  SIM_EXPECT_CU(cuDeviceGetP2PAttribute(&v, static_cast<CUdevice_P2PAttribute>(99), 0, 1),
                CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuDeviceGetP2PAttribute(nullptr, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1),
                CUDA_ERROR_INVALID_VALUE);

  // Peer copies work with or without peer access.
  CUdeviceptr a = 0, b = 0;
  SIM_CU_OK(cuMemAlloc(&a, 4096));
  SIM_CU_OK(cuCtxSetCurrent(ctx1));
  SIM_CU_OK(cuMemAlloc(&b, 4096));
  SIM_CU_OK(cuMemsetD8(b, 0x3c, 4096));
  SIM_CU_OK(cuMemcpyPeer(a, ctx0, b, ctx1, 4096));
  // A legacy IPC handle cannot be opened in the process that exported it,
  // not even by another of its devices (drv_ipc.cpp).
  CUipcMemHandle ipc;
  SIM_CU_OK(cuIpcGetMemHandle(&ipc, b));
  SIM_CU_OK(cuCtxSetCurrent(ctx0));
  CUdeviceptr opened = 0;
  SIM_EXPECT_CU(cuIpcOpenMemHandle(&opened, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                CUDA_ERROR_INVALID_CONTEXT);
  SIM_CU_OK(cuCtxSetCurrent(ctx1));
  unsigned char byte = 0;
  SIM_CU_OK(cuMemcpyDtoH(&byte, a + 4095, 1));
  SIM_CHECK(byte == 0x3c);
  SIM_CU_OK(cuMemFree(b));
  SIM_CU_OK(cuCtxSetCurrent(ctx0));
  SIM_CU_OK(cuMemFree(a));
}

void profiler() {
  CUcontext cur = nullptr;
  SIM_CU_OK(cuCtxGetCurrent(&cur));
  SIM_CU_OK(cuCtxSetCurrent(nullptr));
  SIM_EXPECT_CU(cuProfilerStart(), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuProfilerStop(), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CU_OK(cuCtxSetCurrent(cur));
  SIM_CU_OK(cuProfilerStart());
  SIM_CU_OK(cuProfilerStop());
}

void managed_hints() {
  const std::size_t n = 1 << 20;
  CUdeviceptr m = 0, d = 0;
  SIM_CU_OK(cuMemAllocManaged(&m, n, CU_MEM_ATTACH_GLOBAL));
  SIM_CU_OK(cuMemAlloc(&d, n));
  CUmemLocation dev1{CU_MEM_LOCATION_TYPE_DEVICE, 1}, host{CU_MEM_LOCATION_TYPE_HOST, 0};
  CUmemLocation bad_dev{CU_MEM_LOCATION_TYPE_DEVICE, 7};
  SIM_CU_OK(cuMemAdvise(m, n, CU_MEM_ADVISE_SET_READ_MOSTLY, bad_dev));  // location ignored
  SIM_CU_OK(cuMemAdvise(m + 4096, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev1));
  SIM_CU_OK(cuMemAdvise(m, n, CU_MEM_ADVISE_SET_ACCESSED_BY, host));
  SIM_EXPECT_CU(cuMemAdvise(m, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, bad_dev),
                CUDA_ERROR_INVALID_DEVICE);
  SIM_EXPECT_CU(cuMemAdvise(m, n, static_cast<CUmem_advise>(99), host), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemAdvise(d, n, CU_MEM_ADVISE_SET_READ_MOSTLY, host), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemAdvise(m, n + 1, CU_MEM_ADVISE_SET_READ_MOSTLY, host), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemAdvise(m, 0, CU_MEM_ADVISE_SET_READ_MOSTLY, host), CUDA_ERROR_INVALID_VALUE);
  // The CUDA 8.0 ABI, a CUdevice (CU_DEVICE_CPU for the host).
  using AdviseV1 = CUresult (*)(CUdeviceptr, size_t, CUmem_advise, CUdevice);
  auto advise_v1 = reinterpret_cast<AdviseV1>(dlsym(RTLD_DEFAULT, "cuMemAdvise"));
  SIM_CHECK(advise_v1 != nullptr);
  SIM_CU_OK(advise_v1(m, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU));
  SIM_EXPECT_CU(advise_v1(m, n, CU_MEM_ADVISE_SET_ACCESSED_BY, 9), CUDA_ERROR_INVALID_DEVICE);

  CUstream s = nullptr;
  SIM_CU_OK(cuStreamCreate(&s, 0));
  SIM_CU_OK(cuMemPrefetchAsync(m, n, dev1, 0, s));
  SIM_CU_OK(cuMemPrefetchAsync(m, n, host, 0, nullptr));
  SIM_EXPECT_CU(cuMemPrefetchAsync(m, n, dev1, 1, s), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemPrefetchAsync(m, n, bad_dev, 0, s), CUDA_ERROR_INVALID_DEVICE);
  SIM_EXPECT_CU(cuMemPrefetchAsync(d, n, dev1, 0, s), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemPrefetchAsync(m, n, dev1, 0, reinterpret_cast<CUstream>(by_hand())),
                CUDA_ERROR_INVALID_HANDLE);
  SIM_CU_OK(cuStreamSynchronize(s));
  SIM_CU_OK(cuStreamDestroy(s));

  // No advice is recorded: a range reports none.
  int rm = -1;
  SIM_CU_OK(cuMemRangeGetAttribute(&rm, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, n));
  SIM_CHECK(rm == 0);
  SIM_EXPECT_CU(cuMemRangeGetAttribute(&rm, 8, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, n),
                CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemRangeGetAttribute(&rm, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, d, n),
                CUDA_ERROR_INVALID_VALUE);
  int by[3] = {5, 5, 5};
  SIM_CU_OK(cuMemRangeGetAttribute(by, sizeof by, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m, n));
  SIM_CHECK(by[0] == CU_DEVICE_INVALID && by[2] == CU_DEVICE_INVALID);
  int pref = 5;
  CUmemLocationType pref_type = CU_MEM_LOCATION_TYPE_HOST;
  void* data[] = {&pref, &pref_type};
  size_t sizes[] = {sizeof pref, sizeof pref_type};
  CUmem_range_attribute which[] = {CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                   CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE};
  SIM_CU_OK(cuMemRangeGetAttributes(data, sizes, which, 2, m, n));
  SIM_CHECK(pref == CU_DEVICE_INVALID && pref_type == CU_MEM_LOCATION_TYPE_INVALID);
  SIM_CU_OK(cuMemFree(m));
  SIM_CU_OK(cuMemFree(d));
}

void pointer_attributes() {
  CUdeviceptr d = 0;
  SIM_CU_OK(cuMemAlloc(&d, 4096));
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d) == 0);
  const unsigned int one = 1, zero = 0;
  SIM_CU_OK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d + 100));
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d) == 1);
  SIM_CU_OK(cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d) == 0);
  SIM_EXPECT_CU(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_BUFFER_ID, d), CUDA_ERROR_INVALID_VALUE);
  int local = 0;
  SIM_EXPECT_CU(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, dp(&local)),
                CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(attr<CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS>(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, d) ==
            CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
  SIM_CHECK(attr<unsigned long long>(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, d) ==
            attr<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
  SIM_CHECK(attr<unsigned int>(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, d) == 0);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, d) == 0);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, d) == 0);
  // Every attribute of CUDA 13's cuda.h but the retired P2P_TOKENS (5) is
  // answered for device memory (HOST_POINTER only for host-visible memory).
  for (int a = CU_POINTER_ATTRIBUTE_CONTEXT; a <= CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE; ++a) {
    if (a == 5) continue;
    unsigned char value[16] = {};
    const CUresult want = a == CU_POINTER_ATTRIBUTE_HOST_POINTER ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    SIM_EXPECT_CU(cuPointerGetAttribute(value, static_cast<CUpointer_attribute>(a), d), want);
  }
  unsigned char value[16];
  SIM_EXPECT_CU(cuPointerGetAttribute(value, static_cast<CUpointer_attribute>(5), d),
                CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuMemFree(d));
}

void copies_2d() {
  const std::size_t w = 100, rows = 7, hp = 160;
  CUdeviceptr d = 0;
  std::size_t pitch = 0;
  SIM_CU_OK(cuMemAllocPitch(&d, &pitch, w + 20, rows + 2, 4));
  SIM_CHECK(pitch == 512);
  std::vector<unsigned char> host(hp * (rows + 3)), back(hp * (rows + 3), 0xee);
  for (std::size_t k = 0; k < host.size(); ++k) host[k] = static_cast<unsigned char>(k * 7 + 1);
  SIM_CU_OK(cuMemsetD8(d, 0, pitch * (rows + 2)));

  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = host.data();
  c.srcXInBytes = 3;
  c.srcY = 2;
  c.srcPitch = hp;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = d;
  c.dstXInBytes = 10;
  c.dstY = 1;
  c.dstPitch = pitch;
  c.WidthInBytes = w;
  c.Height = rows;
  SIM_CU_OK(cuMemcpy2D(&c));
  std::vector<unsigned char> dev(pitch * (rows + 2));
  SIM_CU_OK(cuMemcpyDtoH(dev.data(), d, dev.size()));
  for (std::size_t y = 0; y < rows; ++y) {
    SIM_CHECK(std::memcmp(&dev[(y + 1) * pitch + 10], &host[(y + 2) * hp + 3], w) == 0);
    SIM_CHECK(dev[(y + 1) * pitch + 9] == 0 && dev[(y + 1) * pitch + 10 + w] == 0);
  }
  SIM_CHECK(dev[0] == 0 && dev[(rows + 1) * pitch + 10] == 0);

  // Back, asynchronously, to pageable memory (complete on return), then unified.
  CUDA_MEMCPY2D r{};
  r.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  r.srcDevice = d;
  r.srcXInBytes = 10;
  r.srcY = 1;
  r.srcPitch = pitch;
  r.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  r.dstDevice = dp(back.data());
  r.dstPitch = w;
  r.WidthInBytes = w;
  r.Height = rows;
  SIM_CU_OK(cuMemcpy2DAsync(&r, nullptr));
  for (std::size_t y = 0; y < rows; ++y) {
    SIM_CHECK(std::memcmp(&back[y * w], &host[(y + 2) * hp + 3], w) == 0);
  }
  SIM_CHECK(back[rows * w] == 0xee);
  SIM_CU_OK(cuMemcpy2DUnaligned(&r));

  CUDA_MEMCPY2D bad = c;
  bad.dstPitch = w + 9;  // < WidthInBytes + dstXInBytes
  SIM_EXPECT_CU(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = c;
  bad.dstY = rows + 2;  // past the allocation
  SIM_EXPECT_CU(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = c;
  bad.dstMemoryType = CU_MEMORYTYPE_ARRAY;  // no CUDA arrays in the sim
  SIM_EXPECT_CU(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemcpy2D(nullptr), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuMemFree(d));
}

// ---- runtime -----------------------------------------------------------------------------

void runtime_checks() {
  SIM_RT_OK(cudaSetDevice(0));
  std::vector<char> buf(1 << 16, 1);
  SIM_RT_OK(cudaHostRegister(buf.data(), buf.size(), cudaHostRegisterMapped));
  SIM_EXPECT_RT(cudaHostRegister(buf.data(), 16, 0), cudaErrorHostMemoryAlreadyRegistered);
  SIM_CHECK(cudaGetLastError() == cudaErrorHostMemoryAlreadyRegistered);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
  void* dev = nullptr;
  SIM_RT_OK(cudaHostGetDevicePointer(&dev, buf.data(), 0));
  SIM_CHECK(dev == buf.data());
  SIM_RT_OK(cudaMemset(dev, 9, 10));
  SIM_CHECK(buf[9] == 9 && buf[10] == 1);
  cudaPointerAttributes pa{};
  SIM_RT_OK(cudaPointerGetAttributes(&pa, buf.data() + 5));
  SIM_CHECK(pa.type == cudaMemoryTypeHost && pa.hostPointer == buf.data() + 5 && pa.device == 0);
  unsigned int flags = 0;
  SIM_EXPECT_RT(cudaHostGetFlags(&flags, buf.data()), cudaErrorInvalidValue);
  SIM_RT_OK(cudaHostUnregister(buf.data()));
  SIM_EXPECT_RT(cudaHostUnregister(buf.data()), cudaErrorHostMemoryNotRegistered);
  SIM_RT_OK(cudaPointerGetAttributes(&pa, buf.data()));
  SIM_CHECK(pa.type == cudaMemoryTypeUnregistered);

  // cudaPointerGetAttributes on every kind of memory.
  void *d = nullptr, *m = nullptr, *ph = nullptr, *pool = nullptr;
  SIM_RT_OK(cudaMalloc(&d, 64));
  SIM_RT_OK(cudaMallocManaged(&m, 64));
  SIM_RT_OK(cudaMallocHost(&ph, 64));
  SIM_RT_OK(cudaMallocAsync(&pool, 64, nullptr));
  SIM_RT_OK(cudaStreamSynchronize(nullptr));
  SIM_RT_OK(cudaPointerGetAttributes(&pa, d));
  SIM_CHECK(pa.type == cudaMemoryTypeDevice && pa.devicePointer == d && pa.hostPointer == nullptr);
  SIM_RT_OK(cudaPointerGetAttributes(&pa, m));
  SIM_CHECK(pa.type == cudaMemoryTypeManaged && pa.devicePointer == m && pa.hostPointer == m);
  SIM_RT_OK(cudaPointerGetAttributes(&pa, ph));
  SIM_CHECK(pa.type == cudaMemoryTypeHost && pa.hostPointer == ph);
  SIM_RT_OK(cudaPointerGetAttributes(&pa, pool));
  SIM_CHECK(pa.type == cudaMemoryTypeDevice && pa.devicePointer == pool);

  // Peer access from device 0 to device 1.
  int can = 0;
  SIM_RT_OK(cudaDeviceCanAccessPeer(&can, 0, 1));
  SIM_CHECK(can == 1);
  SIM_EXPECT_RT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  SIM_EXPECT_RT(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
  SIM_EXPECT_RT(cudaDeviceEnablePeerAccess(2, 0), cudaErrorInvalidDevice);
  SIM_RT_OK(cudaDeviceEnablePeerAccess(1, 0));
  SIM_EXPECT_RT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  int cur = -1;
  SIM_RT_OK(cudaGetDevice(&cur));
  SIM_CHECK(cur == 0);  // enabling did not move the thread to the peer
  SIM_RT_OK(cudaDeviceDisablePeerAccess(1));
  SIM_EXPECT_RT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  int v = 0;
  SIM_RT_OK(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 1, 0));
  SIM_CHECK(v == 1);
  SIM_EXPECT_RT(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 1, 1),
                cudaErrorInvalidDevice);

  void* d1 = nullptr;
  SIM_RT_OK(cudaSetDevice(1));
  SIM_RT_OK(cudaMalloc(&d1, 64));
  SIM_RT_OK(cudaMemset(d1, 0x42, 64));
  SIM_RT_OK(cudaSetDevice(0));
  SIM_RT_OK(cudaMemcpyPeer(d, 0, d1, 1, 64));
  unsigned char byte = 0;
  SIM_RT_OK(cudaMemcpy(&byte, static_cast<char*>(d) + 63, 1, cudaMemcpyDeviceToHost));
  SIM_CHECK(byte == 0x42);
  SIM_RT_OK(cudaMemset(d, 0, 64));
  SIM_RT_OK(cudaMemcpyPeerAsync(d, 0, d1, 1, 64, nullptr));
  SIM_RT_OK(cudaStreamSynchronize(nullptr));
  SIM_RT_OK(cudaMemcpy(&byte, d, 1, cudaMemcpyDeviceToHost));
  SIM_CHECK(byte == 0x42);
  SIM_EXPECT_RT(cudaMemcpyPeer(d, 0, d1, 3, 64), cudaErrorInvalidDevice);

  SIM_RT_OK(cudaProfilerStart());
  SIM_RT_OK(cudaProfilerStop());

  cudaMemLocation loc{cudaMemLocationTypeDevice, 0};
  SIM_RT_OK(cudaMemAdvise(m, 64, cudaMemAdviseSetPreferredLocation, loc));
  SIM_EXPECT_RT(cudaMemAdvise(d, 64, cudaMemAdviseSetPreferredLocation, loc), cudaErrorInvalidValue);
  SIM_RT_OK(cudaMemPrefetchAsync(m, 64, loc, 0, nullptr));
  loc.id = 5;
  SIM_EXPECT_RT(cudaMemPrefetchAsync(m, 64, loc, 0, nullptr), cudaErrorInvalidDevice);
  int rm = -1;
  SIM_RT_OK(cudaMemRangeGetAttribute(&rm, 4, cudaMemRangeAttributeReadMostly, m, 64));
  SIM_CHECK(rm == 0);

  // 2D copies.
  char h2[4][32], o2[4][32];
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 32; ++x) h2[y][x] = static_cast<char>(y * 32 + x);
  }
  void* p2 = nullptr;
  std::size_t pitch = 0;
  SIM_RT_OK(cudaMallocPitch(&p2, &pitch, 24, 4));
  SIM_RT_OK(cudaMemcpy2D(p2, pitch, h2, 32, 24, 4, cudaMemcpyHostToDevice));
  std::memset(o2, 0, sizeof o2);
  SIM_RT_OK(cudaMemcpy2DAsync(o2, 32, p2, pitch, 24, 4, cudaMemcpyDefault, nullptr));
  SIM_RT_OK(cudaStreamSynchronize(nullptr));
  for (int y = 0; y < 4; ++y) {
    SIM_CHECK(std::memcmp(o2[y], h2[y], 24) == 0 && o2[y][24] == 0);
  }
  SIM_EXPECT_RT(cudaMemcpy2D(p2, 16, h2, 32, 24, 4, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  SIM_EXPECT_RT(cudaMemcpy2D(p2, pitch, h2, 32, 24, 4, static_cast<cudaMemcpyKind>(9)),
                cudaErrorInvalidMemcpyDirection);
  SIM_RT_OK(cudaFree(p2));
  SIM_RT_OK(cudaFree(d));
  SIM_RT_OK(cudaFree(m));
  SIM_RT_OK(cudaFreeHost(ph));
  SIM_RT_OK(cudaFreeAsync(pool, nullptr));
  SIM_RT_OK(cudaSetDevice(1));
  SIM_RT_OK(cudaFree(d1));
}

}  // namespace

int main() {
  SIM_CU_OK(cuInit(0));
  int count = 0;
  SIM_CU_OK(cuDeviceGetCount(&count));
  if (count != 2) SIM_FAIL("needs SIMCUDA_DEVICE_COUNT=2, found %d devices", count);
  char name[256];
  SIM_CU_OK(cuDeviceGetName(name, sizeof name, 0));
  simtest::require_sim_name(name);
  CUcontext ctx0 = nullptr, ctx1 = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&ctx0, 0));
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&ctx1, 1));
  SIM_CU_OK(cuCtxSetCurrent(ctx0));

  host_registration(ctx0);
  SIM_CU_OK(cuCtxSetCurrent(ctx0));
  peer_access(ctx0, ctx1);
  profiler();
  managed_hints();
  pointer_attributes();
  copies_2d();
  runtime_checks();
  std::printf("sim_host_peer: ok\n");
  return 0;
}
