// Legacy CUDA IPC and the address-range queries on the simulated device
// (tests/sim/driver/drv_ipc.cpp, drv_memory.cpp): what cuIpcGetMemHandle
// refuses and with which code, that a handle names the whole allocation
// (interior pointers included) and a new allocation at a reused address gets
// a new one, that the exporting process cannot open its own handle,
// cuMemGetAddressRange and the pointer attributes (cuMemAlloc, VMM, pool,
// managed, host, imported memory; BUFFER_ID never reused), peer access,
// fork (a forked child does not share device memory), and — in a child
// started with exec — opening, reference counts, closing, and the importer's
// mapping living on after the exporter freed the allocation.
//
// Run with SIMCUDA_DEVICE_COUNT=2.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sim_test.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kPage = 2 * kMiB;

CUcontext g_ctx = nullptr;

std::size_t used() {
  std::size_t f = 0, t = 0;
  SIM_CU_OK(cuMemGetInfo(&f, &t));
  return t - f;
}

CUipcMemHandle handle_of(CUdeviceptr p) {
  CUipcMemHandle h{};
  SIM_CU_OK(cuIpcGetMemHandle(&h, p));
  return h;
}
bool same(const CUipcMemHandle& a, const CUipcMemHandle& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

template <typename T>
T attr(CUpointer_attribute a, CUdeviceptr p) {
  T v{};
  SIM_CU_OK(cuPointerGetAttribute(&v, a, p));
  return v;
}
unsigned long long buffer_id(CUdeviceptr p) { return attr<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, p); }
int ipc_capable(CUdeviceptr p) { return attr<int>(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p); }

// A byte pattern per tag; region [from, to) of a buffer holding `tag`.
unsigned char pat(int tag, std::size_t k) { return static_cast<unsigned char>(tag * 29 + k * 7 + (k >> 9)); }
void put(CUdeviceptr p, int tag, std::size_t from, std::size_t to) {
  std::vector<unsigned char> v(to - from);
  for (std::size_t k = from; k < to; ++k) v[k - from] = pat(tag, k);
  SIM_CU_OK(cuMemcpyHtoD(p + from, v.data(), v.size()));
}
bool holds(CUdeviceptr p, int tag, std::size_t from, std::size_t to) {
  std::vector<unsigned char> v(to - from);
  SIM_CU_OK(cuMemcpyDtoH(v.data(), p + from, v.size()));
  for (std::size_t k = from; k < to; ++k) {
    if (v[k - from] != pat(tag, k)) {
      std::fprintf(stderr, "byte %zu: %u, expected %u (tag %d)\n", k, v[k - from], pat(tag, k), tag);
      return false;
    }
  }
  return true;
}

std::string hex(const CUipcMemHandle& h) {
  std::string s;
  char b[3];
  for (unsigned char c : h.reserved) {
    std::snprintf(b, sizeof b, "%02x", c);
    s += b;
  }
  return s;
}
CUipcMemHandle unhex(const char* s) {
  CUipcMemHandle h{};
  SIM_CHECK(std::strlen(s) == 128);
  for (int i = 0; i < 64; ++i) {
    unsigned v = 0;
    SIM_CHECK(std::sscanf(s + 2 * i, "%2x", &v) == 1);
    h.reserved[i] = static_cast<char>(v);
  }
  return h;
}

void init_driver() {
  SIM_CU_OK(cuInit(0));
  char name[128];
  SIM_CU_OK(cuDeviceGetName(name, sizeof name, 0));
  simtest::require_sim_name(name);
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&g_ctx, 0));
  SIM_CU_OK(cuCtxSetCurrent(g_ctx));
}

// ---- what cuIpcGetMemHandle refuses ------------------------------------------
void refusals() {
  CUipcMemHandle h{};
  // VMM memory: a reservation of three granules, one mapped in the middle.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle ph = 0, ph2 = 0;
  SIM_CU_OK(cuMemCreate(&ph, kPage, &prop, 0));
  SIM_CU_OK(cuMemCreate(&ph2, kPage, &prop, 0));
  CUdeviceptr res = 0;
  SIM_CU_OK(cuMemAddressReserve(&res, 3 * kPage, 0, 0, 0));
  SIM_CU_OK(cuMemMap(res + kPage, kPage, 0, ph, 0));
  SIM_CU_OK(cuMemMap(res + 2 * kPage, kPage, 0, ph2, 0));
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SIM_CU_OK(cuMemSetAccess(res + kPage, 2 * kPage, &acc, 1));
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, res + kPage), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(ipc_capable(res + kPage) == 0);
  // cuMemGetAddressRange: the mapping that holds the pointer.
  CUdeviceptr base = 0;
  std::size_t size = 0;
  SIM_CU_OK(cuMemGetAddressRange(&base, &size, res + 2 * kPage + 7));
  SIM_CHECK(base == res + 2 * kPage && size == kPage);
  // RANGE_START_ADDR / RANGE_SIZE: the reservation; MAPPED 1.
  SIM_CHECK(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, res + kPage + 5) == res);
  SIM_CHECK(attr<std::size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, res + kPage + 5) == 3 * kPage);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_MAPPED, res + kPage + 5) == 1);
  SIM_CHECK(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, res + 2 * kPage + 5) == res + 2 * kPage);
  SIM_CHECK(attr<std::size_t>(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, res + 2 * kPage + 5) == kPage);
  // The unmapped first granule: still its reservation, MAPPED 0.
  {
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                CU_POINTER_ATTRIBUTE_MAPPED, CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    CUdeviceptr start = 1;
    std::size_t rsize = 1;
    int mapped = 7;
    unsigned type = 7;
    void* data[] = {&start, &rsize, &mapped, &type};
    SIM_CU_OK(cuPointerGetAttributes(4, as, data, res + 100));
    SIM_CHECK(start == res && rsize == 3 * kPage && mapped == 0 && type == 0);
    SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_MAPPED, res + 100) == 0);
    unsigned t = 0;
    SIM_EXPECT_CU(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, res + 100), CUDA_ERROR_INVALID_VALUE);
    SIM_EXPECT_CU(cuMemGetAddressRange(&base, &size, res + 100), CUDA_ERROR_NOT_FOUND);
  }
  const unsigned long long vmm_id = buffer_id(res + kPage);

  // Stream-ordered (pool) memory.
  CUdeviceptr as = 0;
  SIM_CU_OK(cuMemAllocAsync(&as, 4096, nullptr));
  SIM_CU_OK(cuStreamSynchronize(nullptr));
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, as), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(ipc_capable(as) == 0);
  CUmemoryPool pool = nullptr;
  SIM_CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
  SIM_CHECK(attr<CUmemoryPool>(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, as) == pool);
  // Managed memory.
  CUdeviceptr m = 0;
  SIM_CU_OK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, m), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(ipc_capable(m) == 0);
  // Pinned host memory, a plain host pointer.
  void* pinned = nullptr;
  SIM_CU_OK(cuMemAllocHost(&pinned, 4096));
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, reinterpret_cast<CUdeviceptr>(pinned)), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(ipc_capable(reinterpret_cast<CUdeviceptr>(pinned)) == 0);
  int local = 0;
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, reinterpret_cast<CUdeviceptr>(&local)), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, 0), CUDA_ERROR_INVALID_VALUE);
  // A freed pointer; a pointer past the requested size; no handle to fill.
  CUdeviceptr d = 0;
  SIM_CU_OK(cuMemAlloc(&d, 1000));
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, d + 1000), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuIpcGetMemHandle(nullptr, d), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuMemFree(d));
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, d), CUDA_ERROR_INVALID_VALUE);
  // Pitched memory is cuMemAlloc memory.
  CUdeviceptr pitched = 0;
  std::size_t pitch = 0;
  SIM_CU_OK(cuMemAllocPitch(&pitched, &pitch, 1000, 10, 4));
  SIM_CU_OK(cuIpcGetMemHandle(&h, pitched));
  SIM_CHECK(ipc_capable(pitched) == 1);
  // No current context.
  std::thread([&] {
    SIM_EXPECT_CU(cuIpcGetMemHandle(&h, pitched), CUDA_ERROR_INVALID_CONTEXT);
    SIM_EXPECT_CU(cuIpcCloseMemHandle(pitched), CUDA_ERROR_INVALID_CONTEXT);
    CUdeviceptr o = 0;
    SIM_EXPECT_CU(cuIpcOpenMemHandle(&o, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  }).join();

  // BUFFER_ID: distinct across kinds.
  const unsigned long long ids[] = {vmm_id, buffer_id(as), buffer_id(m),
                                    buffer_id(reinterpret_cast<CUdeviceptr>(pinned)), buffer_id(pitched)};
  for (std::size_t i = 0; i < 5; ++i) {
    SIM_CHECK(ids[i] != 0);
    for (std::size_t j = 0; j < i; ++j) SIM_CHECK(ids[i] != ids[j]);
  }

  SIM_CU_OK(cuMemFree(pitched));
  SIM_CU_OK(cuMemFreeHost(pinned));
  SIM_CU_OK(cuMemFree(m));
  SIM_CU_OK(cuMemFreeAsync(as, nullptr));
  SIM_CU_OK(cuStreamSynchronize(nullptr));
  SIM_CU_OK(cuMemUnmap(res + kPage, 2 * kPage));
  SIM_CU_OK(cuMemAddressFree(res, 3 * kPage));
  SIM_CU_OK(cuMemRelease(ph));
  SIM_CU_OK(cuMemRelease(ph2));
}

// ---- handles name allocations; address ranges and attributes -----------------
void handles_and_attributes() {
  const std::size_t before = used();
  // An interior pointer gives its allocation's handle.
  CUdeviceptr big = 0;
  SIM_CU_OK(cuMemAlloc(&big, 4 * kMiB));
  const CUipcMemHandle hb = handle_of(big);
  SIM_CHECK(same(hb, handle_of(big)));
  SIM_CHECK(same(hb, handle_of(big + 12345)));
  SIM_CHECK(used() == before + 4 * kMiB);  // exporting takes no memory
  // The exporting process cannot open it.
  CUdeviceptr o = 0;
  SIM_EXPECT_CU(cuIpcOpenMemHandle(&o, hb, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  // Not a handle at all; bad flags.
  CUipcMemHandle junk{};
  SIM_EXPECT_CU(cuIpcOpenMemHandle(&o, junk, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
  std::memset(junk.reserved, 0x5a, sizeof junk.reserved);
  SIM_EXPECT_CU(cuIpcOpenMemHandle(&o, junk, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuIpcOpenMemHandle(&o, hb, 2), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuIpcOpenMemHandle(nullptr, hb, 1), CUDA_ERROR_INVALID_VALUE);
  // cuIpcCloseMemHandle of memory that was not opened.
  SIM_EXPECT_CU(cuIpcCloseMemHandle(big), CUDA_ERROR_INVALID_VALUE);

  // Attributes of an interior pointer.
  const CUdeviceptr in = big + 4096 + 3;
  SIM_CHECK(attr<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, in) == g_ctx);
  SIM_CHECK(attr<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, in) == CU_MEMORYTYPE_DEVICE);
  SIM_CHECK(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, in) == in);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, in) == 0);
  SIM_CHECK(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, in) == big);
  SIM_CHECK(attr<std::size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, in) == 4 * kMiB);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_MAPPED, in) == 1);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_IS_MANAGED, in) == 0);
  SIM_CHECK(ipc_capable(in) == 1);
  SIM_CHECK(attr<CUmemoryPool>(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, in) == nullptr);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  SIM_CU_OK(cuMemGetAddressRange(&base, &size, in));
  SIM_CHECK(base == big && size == 4 * kMiB);
  {
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_CONTEXT};
    CUdeviceptr start = 0;
    std::size_t rsize = 0;
    unsigned long long id = 0;
    int ordinal = -1, capable = -1;
    CUcontext c = nullptr;
    void* data[] = {&start, &rsize, &id, &ordinal, &capable, &c};
    SIM_CU_OK(cuPointerGetAttributes(6, as, data, in));
    SIM_CHECK(start == big && rsize == 4 * kMiB && id == buffer_id(big) && ordinal == 0 && capable == 1 &&
              c == g_ctx);
    // A pointer the driver does not know: success, NULL values.
    int local = 0;
    SIM_CU_OK(cuPointerGetAttributes(6, as, data, reinterpret_cast<CUdeviceptr>(&local)));
    SIM_CHECK(start == 0 && rsize == 0 && id == 0 && ordinal == 0 && capable == 0 && c == nullptr);
    // An attribute the sim does not answer.
    CUpointer_attribute p2p = CU_POINTER_ATTRIBUTE_P2P_TOKENS;
    CUDA_POINTER_ATTRIBUTE_P2P_TOKENS tokens{};
    void* tdata[] = {&tokens};
    SIM_EXPECT_CU(cuPointerGetAttributes(1, &p2p, tdata, in), CUDA_ERROR_INVALID_VALUE);
  }

  // Free and allocate again at the same address: a new buffer id and a new
  // handle ("cuIpcGetMemHandle will return a unique handle for the new memory").
  const unsigned long long old_id = buffer_id(big);
  SIM_CU_OK(cuMemFree(big));
  CUdeviceptr again = 0;
  SIM_CU_OK(cuMemAlloc(&again, 4 * kMiB));
  SIM_CHECK(again == big);
  SIM_CHECK(buffer_id(again) != old_id);
  SIM_CHECK(!same(handle_of(again), hb));
  SIM_CU_OK(cuMemFree(again));
  // The same for a small allocation that was never exported.
  CUdeviceptr s = 0, s2 = 0;
  SIM_CU_OK(cuMemAlloc(&s, 1000));
  const unsigned long long sid = buffer_id(s);
  SIM_CU_OK(cuMemFree(s));
  SIM_CU_OK(cuMemAlloc(&s2, 1000));
  SIM_CHECK(s2 == s && buffer_id(s2) != sid);
  SIM_CU_OK(cuMemGetAddressRange(&base, &size, s2 + 999));
  SIM_CHECK(base == s2 && size == 1000);
  // An exported small allocation's bytes are not handed out again while its
  // page lives (an importer may still map them); then the page goes.
  CUdeviceptr keep = 0, s3 = 0;
  SIM_CU_OK(cuMemAlloc(&keep, 1000));
  SIM_CHECK((keep & ~(kPage - 1)) == (s2 & ~(kPage - 1)));
  handle_of(s2);
  SIM_CU_OK(cuMemFree(s2));
  SIM_CU_OK(cuMemAlloc(&s3, 1000));
  SIM_CHECK(s3 != s2);
  SIM_CU_OK(cuMemFree(s3));
  SIM_CU_OK(cuMemFree(keep));
  SIM_CHECK(used() == before);

  // Device 1: its own ordinal.
  CUcontext c1 = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
  SIM_CU_OK(cuCtxPushCurrent(c1));
  CUdeviceptr d1 = 0;
  SIM_CU_OK(cuMemAlloc(&d1, 4096));
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d1 + 1) == 1);
  SIM_CHECK(attr<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, d1) == c1);
  handle_of(d1);
  SIM_CU_OK(cuMemFree(d1));
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
  SIM_CU_OK(cuDevicePrimaryCtxRelease(1));
}

// ---- cuGetProcAddress, peers, the runtime -------------------------------------
void entry_points_peers_runtime() {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st{};
  auto sym = [](const char* name) {
    void* p = dlsym(RTLD_DEFAULT, name);
    if (!p) SIM_FAIL("libcuda.so.1 does not export %s", name);
    return p;
  };
  SIM_CU_OK(cuGetProcAddress("cuIpcOpenMemHandle", &fn, CUDA_VERSION, 0, &st));
  SIM_CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == sym("cuIpcOpenMemHandle_v2"));
  SIM_CU_OK(cuGetProcAddress("cuIpcOpenMemHandle", &fn, 10020, 0, &st));
  SIM_CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == sym("cuIpcOpenMemHandle"));
  SIM_CU_OK(cuGetProcAddress("cuIpcOpenMemHandle", &fn, 4000, 0, &st));
  SIM_CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == nullptr);
  for (const char* name : {"cuIpcGetMemHandle", "cuIpcCloseMemHandle", "cuPointerGetAttributes",
                           "cuDeviceCanAccessPeer"}) {
    SIM_CU_OK(cuGetProcAddress(name, &fn, CUDA_VERSION, 0, &st));
    SIM_CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == sym(name));
  }
  SIM_CU_OK(cuGetProcAddress("cuMemGetAddressRange", &fn, CUDA_VERSION, 0, &st));
  SIM_CHECK(fn == sym("cuMemGetAddressRange_v2"));
  // The 32-bit ABI of CUDA < 3.2: refused, as the other legacy memory ABIs.
  SIM_CU_OK(cuGetProcAddress("cuMemGetAddressRange", &fn, 3010, 0, &st));
  SIM_CHECK(fn == sym("cuMemGetAddressRange"));
  unsigned int b32 = 0, s32 = 0;
  SIM_EXPECT_CU(reinterpret_cast<CUresult (*)(unsigned int*, unsigned int*, unsigned int)>(fn)(&b32, &s32, 0),
                CUDA_ERROR_INVALID_CONTEXT);

  int can = -1;
  SIM_CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
  SIM_CHECK(can == 1);
  SIM_CU_OK(cuDeviceCanAccessPeer(&can, 1, 1));
  SIM_CHECK(can == 0);
  SIM_RT_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
  SIM_CHECK(can == 1);
  SIM_EXPECT_RT(cudaDeviceCanAccessPeer(&can, 0, 2), cudaErrorInvalidDevice);
  SIM_EXPECT_RT(cudaGetLastError(), cudaErrorInvalidDevice);
  SIM_RT_OK(cudaGetLastError());

  // The runtime: a refusal is the last error once; same-process open is
  // cudaErrorDeviceUninitialized ("invalid device context").
  void* a = nullptr;
  SIM_RT_OK(cudaMallocAsync(&a, 4096, nullptr));
  cudaIpcMemHandle_t rh{};
  SIM_EXPECT_RT(cudaIpcGetMemHandle(&rh, a), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaGetLastError(), cudaErrorInvalidValue);
  SIM_RT_OK(cudaGetLastError());
  SIM_RT_OK(cudaFreeAsync(a, nullptr));
  void* d = nullptr;
  SIM_RT_OK(cudaMalloc(&d, 3 * kMiB));
  SIM_RT_OK(cudaIpcGetMemHandle(&rh, static_cast<char*>(d) + 10));
  CUipcMemHandle as_driver{};
  std::memcpy(&as_driver, &rh, sizeof as_driver);
  SIM_CHECK(same(as_driver, handle_of(reinterpret_cast<CUdeviceptr>(d))));
  void* o = nullptr;
  SIM_EXPECT_RT(cudaIpcOpenMemHandle(&o, rh, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized);
  SIM_EXPECT_RT(cudaGetLastError(), cudaErrorDeviceUninitialized);
  SIM_RT_OK(cudaGetLastError());
  SIM_EXPECT_RT(cudaIpcCloseMemHandle(d), cudaErrorInvalidValue);
  SIM_EXPECT_RT(cudaGetLastError(), cudaErrorInvalidValue);
  cudaPointerAttributes pa{};
  SIM_RT_OK(cudaPointerGetAttributes(&pa, static_cast<char*>(d) + 100));
  SIM_CHECK(pa.type == cudaMemoryTypeDevice && pa.device == 0 && pa.devicePointer == static_cast<char*>(d) + 100);
  SIM_RT_OK(cudaFree(d));
}

// ---- fork: a forked child does not share device memory ----------------------
int fork_and(void (*fn)(CUdeviceptr), CUdeviceptr p) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // A fault is an answer, not a crash report (sanitizers included).
    struct sigaction sa{};
    sa.sa_handler = [](int) { _exit(77); };
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    alarm(10);
    fn(p);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  SIM_CHECK(WIFEXITED(status));
  return WEXITSTATUS(status);
}

void forks() {
  CUdeviceptr priv = 0, shared = 0;
  SIM_CU_OK(cuMemAlloc(&priv, 4 * kMiB));
  SIM_CU_OK(cuMemAlloc(&shared, 4 * kMiB));
  put(priv, 1, 0, 4096);
  put(shared, 2, 0, 4096);
  handle_of(shared);  // now a shared memfd mapping in this process
  // Plain device memory: the child's copy is its own (copy on write).
  SIM_CHECK(fork_and([](CUdeviceptr p) { std::memset(reinterpret_cast<void*>(p), 0xee, 4096); }, priv) == 0);
  SIM_CHECK(holds(priv, 1, 0, 4096));
  // Exported memory is not in the child at all: touching it faults, so the
  // child can never write into the parent's (or an importer's) memory.
  SIM_CHECK(fork_and([](CUdeviceptr p) { std::memset(reinterpret_cast<void*>(p), 0xee, 4096); }, shared) == 77);
  SIM_CHECK(holds(shared, 2, 0, 4096));
  // The child's CUDA calls fail (drv_state.cpp), IPC ones included.
  SIM_CHECK(fork_and([](CUdeviceptr p) {
              CUipcMemHandle h{};
              if (cuIpcGetMemHandle(&h, p) != CUDA_ERROR_NOT_INITIALIZED) _exit(1);
            }, shared) == 0);
  SIM_CU_OK(cuMemFree(priv));
  SIM_CU_OK(cuMemFree(shared));
}

// ---- two processes ------------------------------------------------------------
// Steps are one byte over two pipes.
void send(int fd, char c) { SIM_CHECK(write(fd, &c, 1) == 1); }
void expect(int fd, char want) {
  char c = 0;
  SIM_CHECK(read(fd, &c, 1) == 1);
  if (c != want) SIM_FAIL("step '%c', expected '%c'", c, want);
}

// sim_ipc --child IN OUT A B D E
int child_main(char** argv) {
  alarm(30);
  const int in = std::atoi(argv[2]), out = std::atoi(argv[3]);
  const CUipcMemHandle ha = unhex(argv[4]), hb = unhex(argv[5]), hd = unhex(argv[6]), he = unhex(argv[7]);
  init_driver();
  const unsigned flag = CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS;
  const std::size_t before = used();
  CUdeviceptr x = 0;
  // A freed allocation's handle (its page lives on) and a freed unit's.
  SIM_EXPECT_CU(cuIpcOpenMemHandle(&x, hd, flag), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuIpcOpenMemHandle(&x, he, flag), CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr a = 0, a2 = 0, b = 0;
  SIM_CU_OK(cuIpcOpenMemHandle(&a, ha, flag));
  SIM_CHECK(holds(a, 'A', 0, 3 * kMiB));  // the exporter's bytes, at the base
  SIM_CU_OK(cuIpcOpenMemHandle(&a2, ha, 0));  // counted, same pointer
  SIM_CHECK(a2 == a);
  SIM_CHECK(used() == before);  // an import takes no device memory
  CUdeviceptr base = 0;
  std::size_t size = 0;
  SIM_CU_OK(cuMemGetAddressRange(&base, &size, a + 5));
  SIM_CHECK(base == a && size == 3 * kMiB);
  SIM_CHECK(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 5) == a);
  SIM_CHECK(attr<std::size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 5) == 3 * kMiB);
  SIM_CHECK(attr<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, a + 5) == g_ctx);
  SIM_CHECK(attr<int>(CU_POINTER_ATTRIBUTE_MAPPED, a + 5) == 1);
  SIM_CHECK(attr<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) == CU_MEMORYTYPE_DEVICE);
  SIM_CHECK(ipc_capable(a) == 0);
  SIM_CHECK(buffer_id(a) != 0);
  CUipcMemHandle h{};
  SIM_EXPECT_CU(cuIpcGetMemHandle(&h, a), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuIpcCloseMemHandle(a + 512), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemcpyDtoH(&h, a + 3 * kMiB - 8, 16), CUDA_ERROR_INVALID_VALUE);  // past its end

  // A child forked by the importer does not share the imported memory.
  SIM_CHECK(fork_and([](CUdeviceptr p) { std::memset(reinterpret_cast<void*>(p), 0xee, 4096); }, a) == 77);
  SIM_CHECK(holds(a, 'A', 0, 4096));

  SIM_CU_OK(cuIpcOpenMemHandle(&b, hb, flag));
  SIM_CHECK(b % 512 == 0);
  SIM_CHECK(holds(b, 'B', 0, 4096));
  // Only the allocation is usable, not its neighbours in the shared page.
  SIM_EXPECT_CU(cuMemcpyDtoH(&h, b + 4096, 1), CUDA_ERROR_INVALID_VALUE);
  put(a, 'x', 0, 4096);
  put(b, 'x', 0, 4096);
  send(out, '1');

  expect(in, '2');  // the exporter freed A and B, and made new allocations
  // The mapping lives on: the bytes as they were when the exporter freed them.
  SIM_CHECK(holds(a, 'x', 0, 4096));
  SIM_CHECK(holds(a, 'P', 8192, 12288));
  SIM_CHECK(holds(a, 'A', 12288, 3 * kMiB));
  SIM_CHECK(holds(b, 'x', 0, 4096));
  // Writing into it reaches none of the exporter's new allocations.
  put(a, 'y', 0, 3 * kMiB);
  put(b, 'y', 0, 4096);
  // Two opens, two closes.
  SIM_CU_OK(cuIpcCloseMemHandle(a));
  SIM_CHECK(holds(a, 'y', 0, 4096));
  SIM_CU_OK(cuIpcCloseMemHandle(a));
  SIM_EXPECT_CU(cuMemcpyDtoH(&h, a, 8), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuMemGetAddressRange(&base, &size, a), CUDA_ERROR_NOT_FOUND);
  SIM_EXPECT_CU(cuIpcCloseMemHandle(a), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuIpcCloseMemHandle(b));
  SIM_CHECK(used() == before);
  send(out, '3');
  return 0;
}

void two_processes(const char* self) {
  const std::size_t before = used();
  CUdeviceptr A = 0, B = 0, C = 0, D = 0, E = 0;
  SIM_CU_OK(cuMemAlloc(&A, 3 * kMiB));  // pages of its own
  SIM_CU_OK(cuMemAlloc(&C, 4096));      // C, B, D share a page; B is not at its start
  SIM_CU_OK(cuMemAlloc(&B, 4096));
  SIM_CU_OK(cuMemAlloc(&D, 64 * 1024));
  SIM_CU_OK(cuMemAlloc(&E, 4 * kMiB));
  SIM_CHECK((B & ~(kPage - 1)) == (C & ~(kPage - 1)) && (D & ~(kPage - 1)) == (B & ~(kPage - 1)));
  SIM_CHECK(B % kPage != 0);
  put(A, 'A', 0, 3 * kMiB);
  put(B, 'B', 0, 4096);
  put(C, 'C', 0, 4096);
  const CUipcMemHandle ha = handle_of(A + 100), hb = handle_of(B), hd = handle_of(D), he = handle_of(E);
  SIM_CU_OK(cuMemFree(D));
  SIM_CU_OK(cuMemFree(E));

  int to_child[2], from_child[2];
  SIM_CHECK(pipe(to_child) == 0 && pipe(from_child) == 0);
  std::string args[] = {self, "--child", std::to_string(to_child[0]), std::to_string(from_child[1]),
                        hex(ha), hex(hb), hex(hd), hex(he)};
  char* argv[9];
  for (int i = 0; i < 8; ++i) argv[i] = args[i].data();
  argv[8] = nullptr;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(self, argv);
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  expect(from_child[0], '1');
  // The child's writes, at the allocation's base; the neighbour untouched.
  SIM_CHECK(holds(A, 'x', 0, 4096) && holds(A, 'A', 4096, 3 * kMiB));
  SIM_CHECK(holds(B, 'x', 0, 4096));
  SIM_CHECK(holds(C, 'C', 0, 4096));
  put(A, 'P', 8192, 12288);
  const unsigned long long a_id = buffer_id(A);
  // Free while the child has them open (undefined for CUDA; the real driver
  // keeps the memory until the importer closes it, and so does the sim).
  SIM_CU_OK(cuMemFree(A));
  SIM_CU_OK(cuMemFree(B));
  CUdeviceptr F = 0, G = 0;
  SIM_CU_OK(cuMemAlloc(&F, 4096));
  SIM_CHECK(F != B);  // B's bytes stay out of use while its page lives
  SIM_CU_OK(cuMemAlloc(&G, 3 * kMiB));
  SIM_CHECK(G == A && buffer_id(G) != a_id);  // the address is reused, the memory is not
  put(F, 'F', 0, 4096);
  put(G, 'G', 0, 3 * kMiB);
  send(to_child[1], '2');
  expect(from_child[0], '3');
  int status = 0;
  waitpid(pid, &status, 0);
  SIM_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  SIM_CHECK(holds(F, 'F', 0, 4096));
  SIM_CHECK(holds(G, 'G', 0, 3 * kMiB));
  SIM_CHECK(holds(C, 'C', 0, 4096));
  SIM_CU_OK(cuMemFree(F));
  SIM_CU_OK(cuMemFree(G));
  SIM_CU_OK(cuMemFree(C));
  SIM_CHECK(used() == before);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 8 && std::strcmp(argv[1], "--child") == 0) return child_main(argv);
  init_driver();
  refusals();
  handles_and_attributes();
  entry_points_peers_runtime();
  forks();
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  SIM_CHECK(n > 0);
  self[n] = 0;
  two_processes(self);
  std::printf("sim_ipc: OK\n");
  return 0;
}
