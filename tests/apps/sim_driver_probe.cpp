// Driver-API behaviour our hooks and route programs rely on, as facts a
// real GPU can be asked too: the legacy unsuffixed 32-bit entry points, a
// virtual-address reservation freed while still mapped, and what the
// stream-ordered pool counts as used after each way of freeing its memory,
// stream capture and graph memory (what a capture forbids, invalidation,
// graph memory reserved and trimmed, relaunch rules), and what contexts do
// where the documentation is silent (tests/apps/
// sim_contexts.cpp checks the rest on the sim).
// On the sim every fact must equal the sim's value (exit 1 otherwise); on a
// real GPU the program only reports, marking each difference, and ends with
// `differences from the sim: N` (exit 0), so scripts/gpu-check.sh shows
// whether the sim, the route programs or the preload need changing.
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "sim_probe.h"

// cuCtxGet/SetSharedMemConfig are deprecated in CUDA 13 but still exported.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

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

// A graph-memory figure above `start`, in MiB.
std::string mib_above(cuuint64_t now, cuuint64_t start) {
  return mib_text(static_cast<double>(now) - static_cast<double>(start));
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

// ---- stream capture and graphs (issue 31): what the preload's capture
// hooks (preload/hooks/capture.h) and the sim (tests/sim/driver/drv_capture.cpp,
// drv_graph.cpp) assume.

std::string status_text(CUstream s) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult rc = cuStreamIsCapturing(s, &st);
  if (rc != CUDA_SUCCESS) return name_of(rc);
  switch (st) {
    case CU_STREAM_CAPTURE_STATUS_NONE: return "none";
    case CU_STREAM_CAPTURE_STATUS_ACTIVE: return "active";
    case CU_STREAM_CAPTURE_STATUS_INVALIDATED: return "invalidated";
    default: return "status " + std::to_string(st);
  }
}

// Ends the capture on s: its result, and whether a graph came back
// (destroyed at once).
std::string end_text(CUstream s) {
  CUgraph g = nullptr;
  const CUresult rc = cuStreamEndCapture(s, &g);
  std::string text = name_of(rc) + (g ? ", a graph" : ", no graph");
  if (g) cuGraphDestroy(g);
  return text;
}

// cuMemAlloc on another thread whose capture mode is `theirs`.
std::string alloc_on_other_thread(CUcontext ctx, CUstreamCaptureMode theirs) {
  std::string result;
  std::thread other([&] {
    cuCtxSetCurrent(ctx);
    CUstreamCaptureMode m = theirs;
    cuThreadExchangeStreamCaptureMode(&m);
    CUdeviceptr p = 0;
    const CUresult rc = cuMemAlloc(&p, 4096);
    if (rc == CUDA_SUCCESS) cuMemFree(p);
    result = name_of(rc);
  });
  other.join();
  return result;
}

void capture_rules(CUstream s) {
  CUcontext ctx = nullptr;
  SIM_CU_OK(cuCtxGetCurrent(&ctx));
  CUdeviceptr p = 0;
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  g_probe.fact("cuMemAlloc in a global capture of this thread", name_of(cuMemAlloc(&p, 4096)),
               "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  g_probe.fact("  the capture after it", status_text(s), "invalidated");
  g_probe.fact("  cuStreamEndCapture", end_text(s), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, no graph");
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  g_probe.fact("cuMemAlloc in a thread-local capture of this thread", name_of(cuMemAlloc(&p, 4096)),
               "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  end_text(s);
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  g_probe.fact("cuMemAlloc on another (global-mode) thread during a thread-local capture",
               alloc_on_other_thread(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL), "CUDA_SUCCESS");
  g_probe.fact("  then cuStreamEndCapture", end_text(s), "CUDA_SUCCESS, a graph");
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  g_probe.fact("cuMemAlloc on another (global-mode) thread during a global capture",
               alloc_on_other_thread(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  g_probe.fact("  then cuStreamEndCapture", end_text(s), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, no graph");
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  g_probe.fact("cuMemAlloc on another (relaxed) thread during a global capture",
               alloc_on_other_thread(ctx, CU_STREAM_CAPTURE_MODE_RELAXED), "CUDA_SUCCESS");
  end_text(s);
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  const CUresult relaxed = cuMemAlloc(&p, 4096);
  g_probe.fact("cuMemAlloc in a relaxed capture of this thread", name_of(relaxed), "CUDA_SUCCESS");
  g_probe.fact("  then cuStreamEndCapture", end_text(s), "CUDA_SUCCESS, a graph");
  if (relaxed == CUDA_SUCCESS) cuMemFree(p);

  // A stream joined through an event: the preload asks cuStreamIsCapturing
  // of a stream-ordered request's stream.
  CUstream joined = nullptr;
  CUevent fork = nullptr;
  SIM_CU_OK(cuStreamCreate(&joined, CU_STREAM_NON_BLOCKING));
  SIM_CU_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  SIM_CU_OK(cuEventRecord(fork, s));
  SIM_CU_OK(cuStreamWaitEvent(joined, fork, 0));
  g_probe.fact("cuStreamIsCapturing of a stream that waited for an event recorded in a capture", status_text(joined),
               "active");
  CUdeviceptr node_mem = 0;
  SIM_CU_OK(cuMemAllocAsync(&node_mem, kMiB, joined));
  SIM_CU_OK(cuMemFreeAsync(node_mem, joined));
  SIM_CU_OK(cuEventRecord(fork, joined));
  SIM_CU_OK(cuStreamWaitEvent(s, fork, 0));
  g_probe.fact("  an allocation and its free on it, joined back: cuStreamEndCapture", end_text(s),
               "CUDA_SUCCESS, a graph");
  g_probe.fact("  and the stream after the end", status_text(joined), "none");
  SIM_CU_OK(cuEventDestroy(fork));
  SIM_CU_OK(cuStreamDestroy(joined));

  // A captured free of memory allocated before the capture (the caching
  // pool's blocks are such memory).
  CUdeviceptr earlier = 0;
  SIM_CU_OK(cuMemAllocAsync(&earlier, kMiB, s));
  SIM_CU_OK(cuStreamSynchronize(s));
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  g_probe.fact("cuMemFreeAsync in a capture of memory cuMemAllocAsync gave before it",
               name_of(cuMemFreeAsync(earlier, s)), "CUDA_ERROR_INVALID_VALUE");
  g_probe.fact("  the capture after it", status_text(s), "invalidated");
  end_text(s);
  g_probe.fact("  then, outside the capture, cuMemFreeAsync of it", name_of(cuMemFreeAsync(earlier, s)),
               "CUDA_SUCCESS");
  SIM_CU_OK(cuStreamSynchronize(s));
}

cuuint64_t graph_mem(CUdevice dev, CUgraphMem_attribute attr) {
  cuuint64_t v = 0;
  SIM_CU_OK(cuDeviceGetGraphMemAttribute(dev, attr, &v));
  return v;
}

// A captured graph with one 1 MiB allocation node and no free node.
CUgraph unfreed_allocation_graph(CUstream s) {
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p = 0;
  SIM_CU_OK(cuMemAllocAsync(&p, kMiB, s));
  CUgraph g = nullptr;
  SIM_CU_OK(cuStreamEndCapture(s, &g));
  return g;
}

void graph_memory(CUdevice dev, CUstream s) {
  SIM_CU_OK(cuDeviceGraphMemTrim(dev));
  const cuuint64_t start = graph_mem(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
  SIM_CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p = 0;
  SIM_CU_OK(cuMemAllocAsync(&p, kMiB, s));
  SIM_CU_OK(cuMemsetD8Async(p, 1, kMiB, s));
  SIM_CU_OK(cuMemFreeAsync(p, s));
  CUgraph g = nullptr;
  SIM_CU_OK(cuStreamEndCapture(s, &g));
  CUgraphExec x = nullptr;
  SIM_CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
  g_probe.fact("graph memory reserved after instantiating a graph that allocates and frees 1 MiB",
               mib_above(graph_mem(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), start), mib_text(0));
  SIM_CU_OK(cuGraphLaunch(x, s));
  SIM_CU_OK(cuStreamSynchronize(s));
  g_probe.fact("  reserved after its launch", mib_above(graph_mem(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), start),
               mib_text(2.0 * kMiB));
  g_probe.fact("  used after its launch", mib_text(static_cast<double>(graph_mem(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT))),
               mib_text(0));
  SIM_CU_OK(cuDeviceGraphMemTrim(dev));
  g_probe.fact("  reserved after cuDeviceGraphMemTrim, the executable graph idle",
               mib_above(graph_mem(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), start), mib_text(0));
  SIM_CU_OK(cuGraphLaunch(x, s));
  SIM_CU_OK(cuStreamSynchronize(s));
  SIM_CU_OK(cuGraphExecDestroy(x));
  SIM_CU_OK(cuGraphDestroy(g));
  g_probe.fact("  reserved after relaunch and cuGraphExecDestroy",
               mib_above(graph_mem(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), start),
               mib_text(2.0 * kMiB));
  SIM_CU_OK(cuDeviceGraphMemTrim(dev));
  g_probe.fact("  reserved after cuDeviceGraphMemTrim",
               mib_above(graph_mem(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), start), mib_text(0));

  // Relaunch rules of an allocation the graph does not free (cuGraphLaunch).
  g = unfreed_allocation_graph(s);
  SIM_CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
  SIM_CU_OK(cuGraphLaunch(x, s));
  g_probe.fact("relaunch while its allocation is unfreed", name_of(cuGraphLaunch(x, s)), "CUDA_ERROR_INVALID_VALUE");
  CUgraphNode node = nullptr;
  std::size_t n = 1;
  SIM_CU_OK(cuGraphGetNodes(g, &node, &n));
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  SIM_CU_OK(cuGraphMemAllocNodeGetParams(node, &params));
  g_probe.fact("  cuMemFreeAsync of the allocation", name_of(cuMemFreeAsync(params.dptr, s)), "CUDA_SUCCESS");
  g_probe.fact("  then the relaunch", name_of(cuGraphLaunch(x, s)), "CUDA_SUCCESS");
  SIM_CU_OK(cuStreamSynchronize(s));
  SIM_CU_OK(cuGraphExecDestroy(x));
  SIM_CU_OK(cuGraphDestroy(g));
  g_probe.fact("  cuMemFree of it, the graph and its executable destroyed first", name_of(cuMemFree(params.dptr)),
               "CUDA_SUCCESS");
  g = unfreed_allocation_graph(s);
  SIM_CU_OK(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  SIM_CU_OK(cuGraphLaunch(x, s));
  g_probe.fact("relaunch with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH", name_of(cuGraphLaunch(x, s)),
               "CUDA_SUCCESS");
  SIM_CU_OK(cuStreamSynchronize(s));
  SIM_CU_OK(cuGraphGetNodes(g, &node, &n));
  SIM_CU_OK(cuGraphMemAllocNodeGetParams(node, &params));
  SIM_CU_OK(cuMemFree(params.dptr));
  SIM_CU_OK(cuGraphExecDestroy(x));
  SIM_CU_OK(cuGraphDestroy(g));
  SIM_CU_OK(cuDeviceGraphMemTrim(dev));
}

std::string limit_text(CUlimit limit) {
  std::size_t value = 0;
  const CUresult rc = cuCtxGetLimit(&value, limit);
  return rc == CUDA_SUCCESS ? std::to_string(value) : name_of(rc);
}

std::string set_then_get(CUlimit limit, std::size_t value) {
  const std::string set = name_of(cuCtxSetLimit(limit, value));
  return set + ", " + limit_text(limit);
}

// Context queries, on the current (primary) context of device 0.
void context_queries() {
  unsigned version = 0;
  SIM_CU_OK(cuCtxGetApiVersion(nullptr, &version));
  g_probe.fact("cuCtxGetApiVersion of the primary context", std::to_string(version), "3020");
  unsigned flags = 0;
  SIM_CU_OK(cuCtxGetFlags(&flags));
  g_probe.fact("cuCtxGetFlags of the primary context (flags never set)", std::to_string(flags), "0");
  int least = 7, greatest = 7;
  SIM_CU_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
  g_probe.fact("cuCtxGetStreamPriorityRange", std::to_string(least) + " .. " + std::to_string(greatest), "0 .. -5");
  g_probe.fact("CU_LIMIT_STACK_SIZE", limit_text(CU_LIMIT_STACK_SIZE), "1024");
  g_probe.fact("CU_LIMIT_PRINTF_FIFO_SIZE", limit_text(CU_LIMIT_PRINTF_FIFO_SIZE), "1048576");
  g_probe.fact("CU_LIMIT_MALLOC_HEAP_SIZE", limit_text(CU_LIMIT_MALLOC_HEAP_SIZE), "8388608");
  g_probe.fact("CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH", limit_text(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH),
               "CUDA_ERROR_UNSUPPORTED_LIMIT");
  g_probe.fact("CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT", limit_text(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT),
               "2048");
  g_probe.fact("CU_LIMIT_MAX_L2_FETCH_GRANULARITY", limit_text(CU_LIMIT_MAX_L2_FETCH_GRANULARITY), "64");
  g_probe.fact("CU_LIMIT_PERSISTING_L2_CACHE_SIZE", limit_text(CU_LIMIT_PERSISTING_L2_CACHE_SIZE), "0");
  g_probe.fact("CU_LIMIT_SHMEM_SIZE (not a CIG context)", limit_text(CU_LIMIT_SHMEM_SIZE),
               "CUDA_ERROR_UNSUPPORTED_LIMIT");
  g_probe.fact("CU_LIMIT_CIG_ENABLED", limit_text(CU_LIMIT_CIG_ENABLED), "0");
  g_probe.fact("CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED", limit_text(CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED),
               "CUDA_ERROR_UNSUPPORTED_LIMIT");
  g_probe.fact("cuCtxGetLimit(CU_LIMIT_MAX)", limit_text(CU_LIMIT_MAX), "CUDA_ERROR_UNSUPPORTED_LIMIT");
  g_probe.fact("cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4)",
               name_of(cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4)), "CUDA_ERROR_UNSUPPORTED_LIMIT");
  g_probe.fact("cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1)", name_of(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1)),
               "CUDA_ERROR_UNSUPPORTED_LIMIT");
  g_probe.fact("CU_LIMIT_STACK_SIZE set to 4096, then read", set_then_get(CU_LIMIT_STACK_SIZE, 4096),
               "CUDA_SUCCESS, 4096");
  g_probe.fact("CU_LIMIT_MAX_L2_FETCH_GRANULARITY set to 1000, then read",
               set_then_get(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 1000), "CUDA_SUCCESS, 128");
  cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024);
  cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 64);
  CUfunc_cache cache = CU_FUNC_CACHE_PREFER_EQUAL;
  SIM_CU_OK(cuCtxGetCacheConfig(&cache));
  g_probe.fact("cuCtxGetCacheConfig (never set)", std::to_string(cache), "0");
  SIM_CU_OK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
  SIM_CU_OK(cuCtxGetCacheConfig(&cache));
  g_probe.fact("cuCtxGetCacheConfig after setting CU_FUNC_CACHE_PREFER_L1 (2)", std::to_string(cache), "2");
  SIM_CU_OK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));
  CUsharedconfig banks = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
  SIM_CU_OK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));
  SIM_CU_OK(cuCtxGetSharedMemConfig(&banks));
  g_probe.fact("cuCtxGetSharedMemConfig after setting eight-byte banks (1: four-byte banks)",
               std::to_string(banks), "1");
}

// The context stack's edges, destroyed contexts and the primary's retain count.
void context_lifetimes() {
  CUdevice dev = 0;
  SIM_CU_OK(cuDeviceGet(&dev, 0));
  CUcontext primary = nullptr;
  SIM_CU_OK(cuCtxGetCurrent(&primary));
  CUdeviceptr orphan = 0;
  void* orphan_host = nullptr;
  SIM_CU_OK(cuMemAlloc(&orphan, 4096));
  SIM_CU_OK(cuMemAllocHost(&orphan_host, 4096));
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
  // Freeing resolves the allocation from the pointer (NVIDIA/cuda-python#2750).
  g_probe.fact("cuMemFree with no current context", name_of(cuMemFree(orphan)), "CUDA_SUCCESS");
  g_probe.fact("cuMemFreeHost with no current context", name_of(cuMemFreeHost(orphan_host)),
               "CUDA_SUCCESS");
  CUcontext popped = nullptr;
  g_probe.fact("cuCtxPopCurrent on an empty stack", name_of(cuCtxPopCurrent(&popped)), "CUDA_ERROR_INVALID_CONTEXT");
  g_probe.fact("cuCtxPushCurrent(NULL)", name_of(cuCtxPushCurrent(nullptr)), "CUDA_ERROR_INVALID_CONTEXT");
  CUdevice got = -1;
  g_probe.fact("cuCtxGetDevice with no current context", name_of(cuCtxGetDevice(&got)), "CUDA_ERROR_INVALID_CONTEXT");
  int least = 0, greatest = 0;
  g_probe.fact("cuCtxGetStreamPriorityRange with no current context",
               name_of(cuCtxGetStreamPriorityRange(&least, &greatest)), "CUDA_ERROR_INVALID_CONTEXT");
  CUcontext created = nullptr;
  g_probe.fact("cuCtxCreate with two scheduling flags",
               name_of(cuCtxCreate(&created, nullptr, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, dev)),
               "CUDA_ERROR_INVALID_VALUE");
  SIM_CU_OK(cuCtxPushCurrent(primary));

  // Destroyed while current on another thread (documented:
  // CUDA_ERROR_CONTEXT_IS_DESTROYED there), then its stale handle here.
  std::string there, still_current, pop_there;
  std::atomic<int> step{0};
  SIM_CU_OK(cuCtxCreate(&created, nullptr, 0, dev));
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
  std::thread holder([&] {
    SIM_CU_OK(cuCtxPushCurrent(created));
    step = 1;
    while (step != 2) std::this_thread::yield();
    CUdevice d = -1;
    there = name_of(cuCtxGetDevice(&d));
    CUcontext cur = nullptr;
    SIM_CU_OK(cuCtxGetCurrent(&cur));
    still_current = cur == created ? "yes" : "no";
    pop_there = name_of(cuCtxPopCurrent(nullptr));
  });
  while (step != 1) std::this_thread::yield();
  SIM_CU_OK(cuCtxDestroy(created));
  step = 2;
  holder.join();
  g_probe.fact("destroyed while current on another thread: cuCtxGetDevice there", there,
               "CUDA_ERROR_CONTEXT_IS_DESTROYED");
  g_probe.fact("  and cuCtxGetCurrent there still returns it", still_current, "yes");
  g_probe.fact("  and cuCtxPopCurrent there", pop_there, "CUDA_SUCCESS");
  unsigned version = 0;
  g_probe.fact("cuCtxGetApiVersion of a destroyed context", name_of(cuCtxGetApiVersion(created, &version)),
               "CUDA_ERROR_INVALID_CONTEXT");
  unsigned long long id = 0;
  g_probe.fact("cuCtxGetId of a destroyed context", name_of(cuCtxGetId(created, &id)), "CUDA_ERROR_INVALID_CONTEXT");
  g_probe.fact("cuCtxPushCurrent of a destroyed context", name_of(cuCtxPushCurrent(created)),
               "CUDA_ERROR_INVALID_CONTEXT");

  // The primary: a reset gives a new id; the last release leaves the handle
  // current but unusable; retaining again gives the same handle.
  unsigned long long before = 0, after = 0;
  SIM_CU_OK(cuCtxGetId(primary, &before));
  SIM_CU_OK(cuDevicePrimaryCtxReset(dev));
  SIM_CU_OK(cuCtxGetId(primary, &after));
  g_probe.fact("cuCtxGetId after cuDevicePrimaryCtxReset", after != before ? "new" : "unchanged", "new");
  SIM_CU_OK(cuDevicePrimaryCtxRelease(dev));  // main's retain: the last
  CUcontext cur = nullptr;
  SIM_CU_OK(cuCtxGetCurrent(&cur));
  g_probe.fact("primary released while current: cuCtxGetCurrent returns it", cur == primary ? "yes" : "no", "yes");
  g_probe.fact("  cuCtxGetDevice", name_of(cuCtxGetDevice(&got)), "CUDA_ERROR_INVALID_CONTEXT");
  g_probe.fact("  cuCtxPushCurrent of its handle", name_of(cuCtxPushCurrent(primary)), "CUDA_ERROR_INVALID_CONTEXT");
  g_probe.fact("  cuDevicePrimaryCtxRelease again", name_of(cuDevicePrimaryCtxRelease(dev)),
               "CUDA_ERROR_INVALID_CONTEXT");
  CUcontext again = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&again, dev));
  g_probe.fact("  retained again: the same handle", again == primary ? "yes" : "no", "yes");
  SIM_CU_OK(cuCtxGetId(again, &id));
  g_probe.fact("  with a new cuCtxGetId", id != after ? "yes" : "no", "yes");
  g_probe.fact("  and cuCtxGetDevice works again", name_of(cuCtxGetDevice(&got)), "CUDA_SUCCESS");
  // Last: should a driver destroy it, nothing after depends on it.
  g_probe.fact("cuCtxDestroy of the primary context", name_of(cuCtxDestroy(primary)), "CUDA_ERROR_INVALID_CONTEXT");
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
  CUstream capturing = nullptr;
  SIM_CU_OK(cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  capture_rules(capturing);
  graph_memory(dev, capturing);
  SIM_CU_OK(cuStreamDestroy(capturing));
  context_queries();
  context_lifetimes();

  return g_probe.finish();
}
