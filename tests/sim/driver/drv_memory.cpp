// Device, managed, pitched, legacy 32-bit and pinned host allocations.
#include <sys/mman.h>

#include <climits>
#include <cstring>

#include "drv_graph.h"

namespace sim {
namespace {

// The legacy 32-bit memory ABIs (cuMemAlloc, cuMemAllocPitch, cuMemAllocHost,
// cuMemGetInfo, cuMemFree with CUdeviceptr_v1 or 32-bit sizes) are refused
// with CUDA_ERROR_INVALID_CONTEXT, in a current primary context, as driver
// 580.159.04 refuses them on an H100 (tests/apps/sim_driver_probe, run by
// scripts/gpu-check.sh). Programs get them only by asking for them (the
// exported unsuffixed symbols, or cuGetProcAddress with a version < 3020).
CUresult legacy_abi() {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  return CUDA_ERROR_INVALID_CONTEXT;
}

std::mutex& host_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<std::uintptr_t, PinnedHost>& host_allocs() {
  static auto* m = new std::map<std::uintptr_t, PinnedHost>;
  return *m;
}

bool round_up(std::size_t n, std::size_t a, std::size_t* out) {
  if (n > SIZE_MAX - (a - 1)) return false;
  *out = (n + a - 1) / a * a;
  return true;
}

Device* device_of(std::uintptr_t p) {
  for (Device* d : G().devices) {
    if (d->space.contains(p)) return d;
  }
  return nullptr;
}

void release_locked(Device* d, std::map<std::uintptr_t, Allocation>::iterator it) {
  const Allocation& a = it->second;
  if (a.kind == AllocKind::Ipc) {
    // Another process's memory: nothing of this device's capacity to return.
    ipc_unmap_import_locked(d, a);
    d->allocs.erase(it);
    return;
  }
  const bool own = DeviceSpace::own_pages(a.size) != 0;
  if (a.exported) {
    ipc_forget_export_locked(d, a);
    // The unit goes private again before its pages can be handed out; an
    // importer keeps the memfd (and the bytes) it mapped, as the real driver
    // keeps the physical memory of an exported allocation while it is open.
    if (own) ipc_unshare_unit_locked(d, a.base);
  }
  // An exported small allocation's bytes are not reused while its page
  // lives: the page is mapped by the importers.
  const std::size_t pages = d->space.release(a.base, a.size, a.exported && !own);
  d->used -= pages * kPageSize;
  if (!own && pages != 0 && !d->shared_units.empty()) {
    ipc_unshare_unit_locked(d, a.base & ~(kPageSize - 1));
  }
  // cuMemFree of stream-ordered memory frees it, but the pool goes on
  // counting it as used (cudaMemPoolAttrUsedMemCurrent): driver 580.159.04
  // on an H100 (tests/apps/sim_driver_probe).
  if (a.pool && a.free_pending) a.pool->used_current.fetch_sub(a.size);
  d->allocs.erase(it);
}

}  // namespace

CUresult alloc_device(Context* ctx, std::size_t size, AllocKind kind, Pool* pool,
                      std::uintptr_t* out) {
  std::size_t rounded = 0;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!round_up(size, kAllocAlign, &rounded)) return CUDA_ERROR_OUT_OF_MEMORY;
  Device* d = ctx->dev;
  std::lock_guard<std::mutex> lk(d->mu);
  DeviceSpace* space = &d->space;
  // Out of memory when the physical pages run out (or the 32-bit space).
  std::size_t pages = 0;
  std::uintptr_t p = space->alloc(rounded, d->free_pages(), &pages);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  d->used += pages * kPageSize;
  Allocation& a = d->allocs[p];
  a = Allocation{};
  a.base = p;
  a.size = rounded;
  a.requested = size;
  a.ctx = ctx;
  a.kind = kind;
  a.pool = pool;
  a.buffer_id = G().next_buffer_id.fetch_add(1, std::memory_order_relaxed);
  if (pool) {
    std::uint64_t now = pool->used_current.fetch_add(rounded) + rounded;
    std::uint64_t high = pool->used_high.load();
    while (now > high && !pool->used_high.compare_exchange_weak(high, now)) {
    }
  }
  *out = p;
  return CUDA_SUCCESS;
}

CUresult free_device(std::uintptr_t p, bool async_pending_ok) {
  Device* d = device_of(p);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(d->mu);
  auto it = d->allocs.find(p);
  if (it == d->allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  // Imported memory is released with cuIpcCloseMemHandle, not freed.
  if (it->second.kind == AllocKind::Ipc || it->second.kind == AllocKind::Graph) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.free_pending && !async_pending_ok) return CUDA_ERROR_INVALID_VALUE;
  release_locked(d, it);
  return CUDA_SUCCESS;
}

CUresult mark_free_pending(std::uintptr_t p) {
  Device* d = device_of(p);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(d->mu);
  auto it = d->allocs.find(p);
  if (it == d->allocs.end() || it->second.free_pending || it->second.kind == AllocKind::Ipc ||
      it->second.kind == AllocKind::Module || it->second.kind == AllocKind::Graph) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  it->second.free_pending = true;
  return CUDA_SUCCESS;
}

void free_context_allocations(Context* ctx) {
  Device* d = ctx->dev;
  std::lock_guard<std::mutex> lk(d->mu);
  for (auto it = d->allocs.begin(); it != d->allocs.end();) {
    auto next = std::next(it);
    // Pool (stream-ordered) memory outlives its context, see destroy_context_resources.
    if (it->second.ctx == ctx && it->second.kind != AllocKind::Async) release_locked(d, it);
    it = next;
  }
}

PtrInfo pinned_host_info(std::uintptr_t base, const PinnedHost& pinned) {
  PtrInfo info;
  info.found = true;
  info.host = true;
  info.base = info.range_base = base;
  info.size = info.range_size = pinned.size;
  info.ctx = pinned.ctx;
  info.buffer_id = pinned.buffer_id;
  info.mapped = true;
  return info;
}

void free_context_host(Context* ctx) {
  drop_context_registrations(ctx);
  // Unmapping host memory a worker may be touching: see cuMemFreeHost.
  std::unique_lock<std::shared_mutex> remap(remap_lock());
  std::lock_guard<std::mutex> lk(host_mu());
  auto& m = host_allocs();
  for (auto it = m.begin(); it != m.end();) {
    if (it->second.ctx == ctx) {
      munmap(reinterpret_cast<void*>(it->first), it->second.size);
      it = m.erase(it);
    } else {
      ++it;
    }
  }
}

PtrInfo lookup_range(std::uintptr_t p, std::size_t len) {
  PtrInfo info;
  if (p == 0 || len > UINTPTR_MAX - p) return info;
  if (Device* d = device_of(p)) {
    std::lock_guard<std::mutex> lk(d->mu);
    auto it = d->allocs.upper_bound(p);
    if (it == d->allocs.begin()) return info;
    --it;
    const Allocation& a = it->second;
    if (p < a.base + a.requested && p + len <= a.base + a.requested) {
      info.found = true;
      info.device = d->ordinal;
      info.base = info.range_base = a.base;
      info.size = info.range_size = a.requested;
      info.ctx = a.ctx;
      info.managed = a.kind == AllocKind::Managed;
      info.kind = a.kind;
      info.pool = a.pool;
      info.buffer_id = a.buffer_id;
      info.mapped = true;
    }
    return info;
  }
  {
    std::lock_guard<std::mutex> lk(host_mu());
    auto& m = host_allocs();
    auto it = m.upper_bound(p);
    if (it != m.begin()) {
      --it;
      if (p < it->first + it->second.size && p + len <= it->first + it->second.size) {
        return pinned_host_info(it->first, it->second);
      }
    }
  }
  if (registered_lookup(p, len, &info)) return info;
  vmm_lookup(p, len, &info);
  return info;
}

PtrInfo describe_pointer(std::uintptr_t p) {
  PtrInfo info = lookup_range(p, 0);
  if (!info.found && p != 0) vmm_lookup(p, 0, &info, true);
  return info;
}

}  // namespace sim

using namespace sim;

namespace {

CUresult alloc_api(CUdeviceptr* dptr, std::size_t size, AllocKind kind) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  // "In the case of cudaMalloc, the operation is not enqueued asynchronously
  // to a stream, and is not observed by stream capture", so it is a
  // "potentially unsafe API call" (cuThreadExchangeStreamCaptureMode).
  if (CUresult r = capture_check_unsafe_call()) return r;
  // "If bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE."
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  simcfg::wait_us(simcfg::get().malloc_latency_us);  // no lock held
  std::uintptr_t p = 0;
  if (CUresult r = alloc_device(c, size, kind, nullptr, &p)) return r;
  *dptr = p;
  // No host wait: nothing in NVIDIA's documentation makes cuMemAlloc wait
  // for queued work (the Programming Guide's "a device memory allocation"
  // between two commands keeps them from running concurrently on the
  // device, vmm-costs.md section 2). It costs the host its table time.
  charge(Cost::Alloc, size);
  return CUDA_SUCCESS;
}

// Freeing needs no current context: "The driver resolves the allocation from
// the pointer via unified addressing and frees it in its owning context, with
// any context or none current" (an NVIDIA engineer, NVIDIA/cuda-python#2750,
// tested on 12.9 and 13.x; openucx/ucx#10643 says the same of
// cuMemHostUnregister). Numba's cuda.close() frees with none current. A
// destroyed context still current here is another matter: its error stands.
CUresult check_free_context() {
  Context* c = nullptr;
  CUresult r = current_ctx(&c);
  if (r == CUDA_ERROR_INVALID_CONTEXT && (ctx_stack().empty() || !ctx_stack().back())) {
    return CUDA_SUCCESS;
  }
  return r;
}

CUresult free_api(std::uintptr_t p) {
  if (CUresult r = check_free_context()) return r;
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  // cuMemFree is a "potentially unsafe API call" during capture
  // (cuThreadExchangeStreamCaptureMode).
  if (CUresult r = capture_check_unsafe_call()) return r;
  CUresult outside = CUDA_SUCCESS;
  if (graph_mem_free_outside(p, nullptr, &outside)) return outside;
  PtrInfo info = lookup_range(p, 0);
  // A module global (AllocKind::Module) is the driver's memory, freed by
  // cuModuleUnload, not by cuMemFree.
  if (!info.found || info.host || info.base != p || info.device < 0 || info.kind == AllocKind::Ipc ||
      info.kind == AllocKind::Module) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A faulted context's memory is not freed: its free, like every call on
  // that context, answers the fault (see current_ctx).
  if (CUresult f = info.ctx ? ctx_fault(info.ctx) : CUDA_SUCCESS) return f;
  simcfg::wait_us(simcfg::get().free_latency_us);
  // cuMemFree/cudaFree synchronise: outstanding work that may still use the
  // buffer completes before the memory can be handed out again. cuMemFree
  // "may perform implicit synchronization" for memory not from the
  // stream-ordered allocator (CUDA Driver API, cuMemFree); the Programming
  // Guide says cudaMalloc/cudaFree "causes the GPU to synchronize across all
  // executing CUDA streams" (stream-ordered memory allocation), and the
  // time cudaFree takes tracks the kernel still running
  // (Cytnx-dev/Cytnx#850). See vmm-costs.md, section 2.
  if (CUresult f = sync_context(info.ctx)) return f;
  if (CUresult r = free_device(p, false)) return r;
  charge(Cost::Free, info.size);
  return CUDA_SUCCESS;
}

CUresult get_info(std::size_t* free_b, std::size_t* total_b) {
  if (!free_b || !total_b) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard<std::mutex> lk(c->dev->mu);
  // Whole pages: a page holding any live allocation is not free
  // (pytorch/pytorch#17120, see kPageSize).
  *total_b = c->dev->capacity;
  *free_b = c->dev->capacity - c->dev->used;
  return CUDA_SUCCESS;
}

CUresult alloc_pitch(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width, std::size_t height,
                     unsigned elem, AllocKind kind) {
  if (!dptr || !pitch) return CUDA_ERROR_INVALID_VALUE;
  // "ElementSizeBytes ... may be 4, 8 or 16" (cuMemAllocPitch).
  if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
  if (width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  std::size_t p = 0;
  if (!round_up(width, kAllocAlign, &p) || height > SIZE_MAX / p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = alloc_api(dptr, p * height, kind);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

CUresult host_alloc(void** pp, std::size_t size, unsigned flags) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  const unsigned all = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                       CU_MEMHOSTALLOC_WRITECOMBINED;
  if (flags & ~all) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  // Pinned memory is host memory: it does not count against device capacity.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lk(host_mu());
  host_allocs()[reinterpret_cast<std::uintptr_t>(p)] =
      PinnedHost{size, flags, c, G().next_buffer_id.fetch_add(1, std::memory_order_relaxed)};
  *pp = p;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  count(Counter::mem_alloc);
  return alloc_api(dptr, bytesize, AllocKind::Device);
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1*, unsigned int) { return legacy_abi(); }

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  count(Counter::mem_free);
  return free_api(dptr);
}
CUresult CUDAAPI cuMemFree(CUdeviceptr_v1) { return legacy_abi(); }

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free_b, size_t* total_b) { return get_info(free_b, total_b); }

CUresult CUDAAPI cuMemGetInfo(unsigned int*, unsigned int*) { return legacy_abi(); }

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes) {
  count(Counter::mem_alloc);
  return alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, AllocKind::Pitch);
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1*, unsigned int*, unsigned int, unsigned int, unsigned int) {
  return legacy_abi();
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  count(Counter::mem_alloc);
  // "flags must be one of CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST."
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  // Managed memory lives on the device in this model, so it counts against
  // the device's capacity.
  return alloc_api(dptr, bytesize, AllocKind::Managed);
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) { return host_alloc(pp, bytesize, 0); }
CUresult CUDAAPI cuMemAllocHost(void**, unsigned int) { return legacy_abi(); }
CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return host_alloc(pp, bytesize, Flags);
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
  if (CUresult r = check_free_context()) return r;
  // The pages are unmapped: a copy queued on them must find them gone (a
  // device fault, drv_copy.cpp), never be caught between its check and its
  // touch, so no worker may be between the two (remap_lock).
  std::unique_lock<std::shared_mutex> remap(remap_lock());
  std::lock_guard<std::mutex> lk(host_mu());
  auto it = host_allocs().find(reinterpret_cast<std::uintptr_t>(p));
  if (it == host_allocs().end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second.size);
  host_allocs().erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  PtrInfo info = lookup_range(reinterpret_cast<std::uintptr_t>(p), 0);
  if (!info.found || !info.host) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: same value
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (!pFlags) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard<std::mutex> lk(host_mu());
  auto it = host_allocs().find(reinterpret_cast<std::uintptr_t>(p));
  if (it == host_allocs().end()) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = it->second.flags;
  return CUDA_SUCCESS;
}

// "Returns the base address ... and size ... of the allocation by
// cuMemAlloc() or cuMemAllocPitch() that contains the input pointer" (cuda.h).
// For VMM memory it is the mapping (one cuMemCreate handle's extent) that
// contains the pointer, not the reservation: "For CUDA VMM allocations with
// multiple physical segments mapped into a contiguous VA range,
// cuMemGetAddressRange() only returns the size of the individual segment"
// (ofiwg/libfabric#12473; the same in openucx/ucx#11461). For memory opened
// with cuIpcOpenMemHandle, the opened range: the pointer it returned and the
// exported allocation's size. Pinned host memory (cuMemAllocHost,
// cuMemHostAlloc) and registered host memory are device-visible allocations
// too, whose device pointer is their host address: Numba's own driver test
// (test_host_alloc_mapped, run on GPUs by its CI) sizes a cuMemHostAlloc
// DEVICEMAP buffer with cuMemGetAddressRange. Pageable memory and unmapped
// addresses are CUDA_ERROR_NOT_FOUND.
CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  PtrInfo info = describe_pointer(dptr);
  if (!info.found) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = info.base;
  if (psize) *psize = info.size;
  return CUDA_SUCCESS;
}

// The 32-bit ABI of CUDA < 3.2, refused like the other legacy memory ABIs.
CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr_v1*, unsigned int*, CUdeviceptr_v1) {
  return legacy_abi();
}

namespace {

enum class Answer { Ok, NoValue, Unknown };

// Bytes an attribute's value takes (0: an attribute the sim does not answer).
// Types as cuda.h documents them ("data must point to an unsigned long long",
// "must be CUdeviceptr *", ...); the booleans are ints, as NVIDIA's own
// cuda-python binding (_HelperCUpointer_attribute: bint) reads them.
std::size_t attribute_size(CUpointer_attribute a) {
  switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void*);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return sizeof(std::size_t);
    case CU_POINTER_ATTRIBUTE_MAPPED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(std::size_t);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: return sizeof(int);
    // A bitmask of CUmemAllocationHandleType values; NVIDIA's cuda-python
    // (_HelperCUpointer_attribute) reads it as an unsigned int.
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return sizeof(CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS);
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return sizeof(int);
    default: return 0;
  }
}

// Buffers cuPointerSetAttribute(SYNC_MEMOPS) set to 1, by buffer id (never
// reused, so a freed buffer's entry is merely dead).
std::mutex& sync_memops_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::set<std::uint64_t>& sync_memops() {
  static auto* s = new std::set<std::uint64_t>;
  return *s;
}

template <typename T>
Answer put(void* data, T value) {
  std::memcpy(data, &value, sizeof value);
  return Answer::Ok;
}

Answer pointer_attribute(const PtrInfo& i, CUpointer_attribute attribute, CUdeviceptr ptr,
                         void* data) {
  if (attribute_size(attribute) == 0) return Answer::Unknown;
  // A reserved VMM range with nothing mapped at ptr still has its range:
  // RANGE_START_ADDR and RANGE_SIZE are "the mappable address range ptr
  // references (e.g. from cuMemAddressReserve)" and MAPPED is 0 (cuda.h;
  // NVIDIA DALI's cu_vm_test.cc checks exactly this on a real GPU).
  if (!i.found) {
    if (!i.vmm) return Answer::NoValue;
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return put<CUdeviceptr>(data, i.range_base);
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return put<std::size_t>(data, i.range_size);
      case CU_POINTER_ATTRIBUTE_MAPPED: return put<int>(data, 0);
      default: return Answer::NoValue;
    }
  }
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      return put<CUcontext>(data, reinterpret_cast<CUcontext>(i.ctx));
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      return put<unsigned int>(data, i.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      return put<CUdeviceptr>(data, ptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!i.host && !i.managed) return Answer::NoValue;
      return put<void*>(data, reinterpret_cast<void*>(ptr));
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      return put<unsigned long long>(data, i.buffer_id);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      return put<int>(data, i.managed ? 1 : 0);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      return put<int>(data, i.host ? (i.ctx ? i.ctx->dev->ordinal : 0) : i.device);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: {
      // "1 if this pointer maps to an allocation that is suitable for
      // cudaIpcGetMemHandle": what cuIpcGetMemHandle accepts (drv_ipc.cpp).
      const bool capable = !i.host && !i.vmm &&
                           (i.kind == AllocKind::Device || i.kind == AllocKind::Pitch);
      return put<int>(data, capable ? 1 : 0);
    }
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      return put<CUdeviceptr>(data, i.range_base);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      return put<std::size_t>(data, i.range_size);
    case CU_POINTER_ATTRIBUTE_MAPPED:
      return put<int>(data, i.mapped ? 1 : 0);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      // "the mempool handle for the allocation if it was allocated from a
      // mempool. Otherwise returns NULL."
      return put<CUmemoryPool>(data, reinterpret_cast<CUmemoryPool>(i.pool));
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      return put<CUdeviceptr>(data, i.base);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      return put<std::size_t>(data, i.size);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: {
      // Set only by cuPointerSetAttribute. Every synchronous copy of the sim
      // already completes before it returns, so the flag changes nothing else.
      std::lock_guard<std::mutex> lk(sync_memops_mu());
      return put<int>(data, sync_memops().count(i.buffer_id) ? 1 : 0);
    }
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      // "the allowed handle types for an allocation that may be passed to
      // cuMemExportToShareableHandle": the sim exports none.
      return put<unsigned int>(data, 0u);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      // The device reports CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 0.
      return put<int>(data, 0);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
      // "the access flags the device associated with the current context has
      // on the corresponding memory": for VMM what cuMemSetAccess granted it;
      // all other memory the sim keeps is readable and writable everywhere.
      auto flags = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      Context* c = nullptr;
      if (i.vmm && current_ctx(&c) == CUDA_SUCCESS) {
        CUmemLocation loc{};
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
        loc.id = c->dev->ordinal;
        unsigned long long granted = 0;
        if (cuMemGetAccess(&granted, &loc, ptr) != CUDA_SUCCESS) granted = 0;
        flags = static_cast<CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS>(granted);
      }
      return put<CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS>(data, flags);
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      // "unique id corresponding to the physical allocation": one per
      // allocation here, its buffer id.
      return put<unsigned long long>(data, i.buffer_id);
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      return put<int>(data, 0);
    default:
      return Answer::Unknown;
  }
}

}  // namespace

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  // Memory the driver knows nothing about (pageable host memory, garbage),
  // an attribute without a value for it, or one the sim does not model.
  const PtrInfo i = describe_pointer(ptr);
  return pointer_attribute(i, attribute, ptr, data) == Answer::Ok ? CUDA_SUCCESS
                                                                   : CUDA_ERROR_INVALID_VALUE;
}

// "Set attributes on a previously allocated memory region": only
// CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, whose value is an unsigned int (cuda.h).
// Memory the driver does not know, or any other attribute, is
// CUDA_ERROR_INVALID_VALUE.
CUresult CUDAAPI cuPointerSetAttribute(const void* value, CUpointer_attribute attribute,
                                       CUdeviceptr ptr) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  const PtrInfo i = lookup_range(ptr, 0);
  if (!i.found) return CUDA_ERROR_INVALID_VALUE;
  unsigned int v = 0;
  std::memcpy(&v, value, sizeof v);
  std::lock_guard<std::mutex> lk(sync_memops_mu());
  if (v) {
    sync_memops().insert(i.buffer_id);
  } else {
    sync_memops().erase(i.buffer_id);
  }
  return CUDA_SUCCESS;
}

// "Unlike cuPointerGetAttribute, this function will not return an error when
// the ptr encountered is not a valid CUDA pointer. Instead, the attributes
// are assigned default NULL values and CUDA_SUCCESS is returned" (cuda.h).
CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                        void** data, CUdeviceptr ptr) {
  if (numAttributes == 0 || !attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  for (unsigned int k = 0; k < numAttributes; ++k) {
    if (!data[k] || attribute_size(attributes[k]) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  const PtrInfo i = describe_pointer(ptr);
  for (unsigned int k = 0; k < numAttributes; ++k) {
    if (pointer_attribute(i, attributes[k], ptr, data[k]) != Answer::Ok) {
      std::memset(data[k], 0, attribute_size(attributes[k]));
    }
  }
  return CUDA_SUCCESS;
}
