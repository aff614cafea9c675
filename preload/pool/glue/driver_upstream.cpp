#include "pool/glue/driver_upstream.h"

#include <cuda.h>

#include <algorithm>

#include "text/diagnostics.h"
#include "hooks/real_cuda.h"
#include "pool/glue/device_order.h"
#include "pool/glue/mempool_view.h"

namespace cumemtrace::preload {
namespace {

using pool::DevicePtr;
using pool::UpstreamResult;

// The real driver functions, each resolved on first use (NextSymbol: the
// definition after ours, or the libcuda.so.1 a runtime opened privately).
// Explicit ABI names: cuda.h's macros map cuMemAlloc to cuMemAlloc_v2 etc.
#define CUMEMTRACE_DRIVER_FN(NAME, SYMBOL) NextSymbol<decltype(&::SYMBOL)> NAME{#SYMBOL}
struct Driver {
  CUMEMTRACE_DRIVER_FN(ctx_get_current, cuCtxGetCurrent);
  CUMEMTRACE_DRIVER_FN(ctx_get_device, cuCtxGetDevice);
  CUMEMTRACE_DRIVER_FN(ctx_push, cuCtxPushCurrent_v2);
  CUMEMTRACE_DRIVER_FN(ctx_pop, cuCtxPopCurrent_v2);
  CUMEMTRACE_DRIVER_FN(ctx_synchronize, cuCtxSynchronize);
  CUMEMTRACE_DRIVER_FN(device_get, cuDeviceGet);
  CUMEMTRACE_DRIVER_FN(device_get_attribute, cuDeviceGetAttribute);
  CUMEMTRACE_DRIVER_FN(device_get_count, cuDeviceGetCount);
  CUMEMTRACE_DRIVER_FN(device_can_access_peer, cuDeviceCanAccessPeer);
  CUMEMTRACE_DRIVER_FN(primary_retain, cuDevicePrimaryCtxRetain);
  CUMEMTRACE_DRIVER_FN(primary_release, cuDevicePrimaryCtxRelease_v2);
  CUMEMTRACE_DRIVER_FN(mem_alloc, cuMemAlloc_v2);
  CUMEMTRACE_DRIVER_FN(mem_free, cuMemFree_v2);
  CUMEMTRACE_DRIVER_FN(mem_get_info, cuMemGetInfo_v2);
  // Stream-ordered segments (optional: CUDA 11.2 and later).
  CUMEMTRACE_DRIVER_FN(mem_alloc_async, cuMemAllocAsync);
  CUMEMTRACE_DRIVER_FN(mem_free_async, cuMemFreeAsync);
  CUMEMTRACE_DRIVER_FN(event_create, cuEventCreate);
  CUMEMTRACE_DRIVER_FN(event_record, cuEventRecord);
  CUMEMTRACE_DRIVER_FN(event_query, cuEventQuery);
  CUMEMTRACE_DRIVER_FN(event_destroy, cuEventDestroy_v2);
  // Virtual memory, for expandable segments only.
  CUMEMTRACE_DRIVER_FN(granularity, cuMemGetAllocationGranularity);
  CUMEMTRACE_DRIVER_FN(address_reserve, cuMemAddressReserve);
  CUMEMTRACE_DRIVER_FN(address_free, cuMemAddressFree);
  CUMEMTRACE_DRIVER_FN(mem_create, cuMemCreate);
  CUMEMTRACE_DRIVER_FN(mem_release, cuMemRelease);
  CUMEMTRACE_DRIVER_FN(mem_map, cuMemMap);
  CUMEMTRACE_DRIVER_FN(mem_unmap, cuMemUnmap);
  CUMEMTRACE_DRIVER_FN(set_access, cuMemSetAccess);

  bool core_loaded() {
    return ctx_get_current.get() && ctx_get_device.get() && ctx_push.get() && ctx_pop.get() &&
           ctx_synchronize.get() && device_get.get() && primary_retain.get() && primary_release.get() &&
           mem_alloc.get() && mem_free.get() && mem_get_info.get() && event_create.get() &&
           event_record.get() && event_query.get() && event_destroy.get();
  }
  bool vmm_loaded() {
    return device_get_attribute.get() && granularity.get() && address_reserve.get() && address_free.get() &&
           mem_create.get() && mem_release.get() && mem_map.get() && mem_unmap.get() && set_access.get();
  }
};
#undef CUMEMTRACE_DRIVER_FN

Driver& driver() {
  static Driver d;  // constant-initialised: usable from any hook at any time
  return d;
}

// Runs the calls in its scope in `ctx`: pushed unless it is current already.
class InContext {
 public:
  explicit InContext(void* ctx) {
    Driver& d = driver();
    CUcontext current = nullptr;
    if (d.ctx_get_current.get()(&current) == CUDA_SUCCESS && current == ctx) return;
    pushed_ = d.ctx_push.get()(static_cast<CUcontext>(ctx)) == CUDA_SUCCESS;
  }
  ~InContext() {
    if (!pushed_) return;
    CUcontext popped = nullptr;
    driver().ctx_pop.get()(&popped);
  }
  InContext(const InContext&) = delete;
  InContext& operator=(const InContext&) = delete;

 private:
  bool pushed_ = false;
};

UpstreamResult result_of(CUresult rc) {
  if (rc == CUDA_SUCCESS) return UpstreamResult::success();
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return UpstreamResult::out_of_memory(rc);
  return UpstreamResult::failure(rc);
}

thread_local const char* last_segment_api_ = "cuMemAlloc_v2";
// The pool's handle for the calling thread's per-thread default stream: odd,
// so never a real stream (a pointer), and never the same for two threads.
// Not the address of a thread-local variable, as it was: a thread started
// after another exited gets the same thread-local storage, and the pool
// then took the new thread's stream for the old one's and handed it a block
// the old thread's queued work still wrote (tests/apps/pool_thread_streams:
// every byte overwritten).
std::atomic<std::uintptr_t> next_thread_serial{1};
thread_local std::uintptr_t per_thread_stream_handle_ = 0;

// The driver's stream for a pool stream handle. Our per-thread handle is the
// calling thread's own per-thread default stream (the pool calls the
// upstream from the thread that allocates or frees on it); false for
// another thread's handle.
bool driver_stream(pool::StreamHandle stream, CUstream* out) {
  if (stream & 1u) {
    if (stream != per_thread_stream_handle()) return false;
    *out = CU_STREAM_PER_THREAD;
    return true;
  }
  *out = reinterpret_cast<CUstream>(stream);
  return true;
}

CUmemAllocationProp device_allocation(int cu_device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = cu_device;
  return prop;
}

}  // namespace

bool current_context_device(int* dev) {
  const auto get_device = driver().ctx_get_device.get();
  CUdevice d = 0;
  // Fails with CUDA_ERROR_INVALID_CONTEXT when none is current.
  if (!get_device || get_device(&d) != CUDA_SUCCESS) return false;
  *dev = d;
  return true;
}

void* current_context() {
  const auto get_current = driver().ctx_get_current.get();
  CUcontext c = nullptr;
  if (!get_current || get_current(&c) != CUDA_SUCCESS) return nullptr;
  return c;
}

std::uintptr_t per_thread_stream_handle() {
  if (per_thread_stream_handle_ == 0) [[unlikely]]
    per_thread_stream_handle_ = (next_thread_serial.fetch_add(1, std::memory_order_relaxed) << 1) | 1u;
  return per_thread_stream_handle_;
}

std::unique_ptr<DriverUpstream> DriverUpstream::create(int dev, bool vmm, std::size_t page_size) {
  Driver& d = driver();
  if (!d.core_loaded()) return nullptr;
  CUdevice cu = 0;
  CUcontext primary = nullptr;
  if (d.device_get.get()(&cu, dev) != CUDA_SUCCESS) return nullptr;
  if (d.primary_retain.get()(&primary, cu) != CUDA_SUCCESS) return nullptr;
  std::unique_ptr<DriverUpstream> up(new DriverUpstream(dev, cu, primary));
  note_pool_device(dev);
  if (vmm && d.vmm_loaded()) {
    InContext in(primary);
    up->alignment_ = up->usable_vm_granularity();
    if (up->alignment_ != 0) {
      up->granularity_ = std::max(up->alignment_, (page_size + up->alignment_ - 1) / up->alignment_ * up->alignment_);
      up->find_peers();
    }
  }
  return up;
}

// The recommended granularity when the device supports virtual memory
// management and one page can really be reserved, created, mapped, made
// accessible and given back; else 0 (ordinary segments). The attribute is
// what cuMemCreate's documentation tells callers to check
// (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED); the probe
// catches a device or an interposer (vGPU, HAMi-core) that advertises it
// but refuses the calls. Once per device, at the pool's creation.
std::size_t DriverUpstream::usable_vm_granularity() {
  Driver& d = driver();
  int supported = 0;
  if (d.device_get_attribute.get()(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                   cu_device_) != CUDA_SUCCESS ||
      supported == 0)
    return 0;
  const CUmemAllocationProp prop = device_allocation(cu_device_);
  size_t g = 0;
  if (d.granularity.get()(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || g == 0) return 0;
  CUdeviceptr probe = 0;
  if (d.address_reserve.get()(&probe, g, g, 0, 0) != CUDA_SUCCESS) return 0;
  granularity_ = g;
  refusal_reported_.store(true);  // the warning below says it once
  const bool mapped = map(static_cast<DevicePtr>(probe), g).ok();
  if (mapped) unmap_pages(static_cast<DevicePtr>(probe), g, Unmapped::release);
  d.address_free.get()(probe, g);
  granularity_ = 0;
  refusal_reported_.store(false);
  if (!mapped) {
    contract::warn("the driver refused virtual memory on device %d (cuMemCreate/cuMemMap); the pool uses ordinary "
         "segments there, which hold more memory than is live when sizes vary",
         dev_);
    return 0;
  }
  return g;
}

// Devices that can access this one's memory (cuDeviceCanAccessPeer). A
// program written for cudaMalloc expects its peers to reach any of its
// memory once it enabled peer access; memory from cuMemCreate is reachable
// only from the devices cuMemSetAccess names, whatever peer access says
// ("Programming Guide", Virtual Memory Management: "Controlling Access
// Rights"). So every page is mapped for all of them up front.
void DriverUpstream::find_peers() {
  Driver& d = driver();
  int count = 0;
  if (!d.device_get_count.get() || !d.device_can_access_peer.get() ||
      d.device_get_count.get()(&count) != CUDA_SUCCESS)
    return;
  for (int other = 0; other < count && peer_count_ < kMaxPeers; ++other) {
    CUdevice peer = 0;
    int can = 0;
    if (other == dev_ || d.device_get.get()(&peer, other) != CUDA_SUCCESS) continue;
    if (d.device_can_access_peer.get()(&can, peer, cu_device_) == CUDA_SUCCESS && can) peers_[peer_count_++] = peer;
  }
}

// The retained primary context is not released: the pool is destroyed only
// at exit (or never), when calling the driver is unsafe.
DriverUpstream::~DriverUpstream() = default;

const char* DriverUpstream::last_segment_api() { return last_segment_api_; }

UpstreamResult DriverUpstream::allocate(std::size_t size, DevicePtr* ptr) {
  InContext in(primary_);
  CUdeviceptr p = 0;
  const CUresult rc = driver().mem_alloc.get()(&p, size);
  if (rc == CUDA_SUCCESS) {
    *ptr = static_cast<DevicePtr>(p);
    last_segment_api_ = "cuMemAlloc_v2";
  }
  return result_of(rc);
}

UpstreamResult DriverUpstream::release(DevicePtr ptr, std::size_t) {
  // cuMemFree synchronises the context before it frees (CUDA runtime API,
  // "API synchronization behavior"), as the pool's safety rule requires.
  InContext in(primary_);
  return result_of(driver().mem_free.get()(static_cast<CUdeviceptr>(ptr)));
}

bool DriverUpstream::has_stream_ordered_segments() { return driver().mem_alloc_async.get() != nullptr; }

UpstreamResult DriverUpstream::allocate_stream_ordered(std::size_t size, pool::StreamHandle stream,
                                                       DevicePtr* ptr) {
  CUstream s = nullptr;
  if (!driver_stream(stream, &s)) return UpstreamResult::failure(CUDA_ERROR_INVALID_HANDLE);
  InContext in(primary_);
  CUdeviceptr p = 0;
  // From the pool current to the stream's device, as the application's own
  // cudaMallocAsync / cuMemAllocAsync would have been.
  const CUresult rc = driver().mem_alloc_async.get()(&p, size, s);
  if (rc == CUDA_SUCCESS) {
    *ptr = static_cast<DevicePtr>(p);
    last_segment_api_ = "cuMemAllocAsync";
    note_driver_pool_segment(dev_, static_cast<std::ptrdiff_t>(size));
  }
  return result_of(rc);
}

UpstreamResult DriverUpstream::release_stream_ordered(DevicePtr ptr, std::size_t size) {
  note_driver_pool_segment(dev_, -static_cast<std::ptrdiff_t>(size));
  // Wait for earlier work first, as release() promises, then free on the
  // legacy stream: the segment's own stream may be gone (destroyed, reset).
  // Not cuMemFree: it takes stream-ordered memory, but on driver 580 the
  // pool then goes on counting it as used (cudaMemPoolAttrUsedMemCurrent,
  // which is PyTorch's memory_allocated() under backend:cudaMallocAsync):
  // tests/apps/sim_driver_probe, run on an H100 by scripts/gpu-check.sh.
  // The memory goes back to the driver's pool, which keeps what its release
  // threshold lets it keep, exactly as it would have kept the application's
  // own cudaFreeAsync'd memory.
  Driver& d = driver();
  InContext in(primary_);
  if (const CUresult rc = d.ctx_synchronize.get()(); rc != CUDA_SUCCESS) return result_of(rc);
  if (auto free_async = d.mem_free_async.get()) {
    return result_of(free_async(static_cast<CUdeviceptr>(ptr), CU_STREAM_LEGACY));
  }
  return result_of(d.mem_free.get()(static_cast<CUdeviceptr>(ptr)));
}

UpstreamResult DriverUpstream::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  InContext in(primary_);
  size_t f = 0, t = 0;
  const CUresult rc = driver().mem_get_info.get()(&f, &t);
  if (rc == CUDA_SUCCESS) {
    *free_bytes = f;
    *total_bytes = t;
  }
  return result_of(rc);
}

UpstreamResult DriverUpstream::synchronize() {
  InContext in(primary_);
  return result_of(driver().ctx_synchronize.get()());
}

UpstreamResult DriverUpstream::record_fence(pool::StreamHandle stream, pool::FenceHandle* fence) {
  CUstream s = nullptr;
  if (!driver_stream(stream, &s)) return UpstreamResult::failure(CUDA_ERROR_INVALID_HANDLE);
  InContext in(primary_);
  void* event = nullptr;
  if (const UpstreamResult r = new_fence_event(&event); !r.ok()) return r;
  const CUresult rc = driver().event_record.get()(static_cast<CUevent>(event), s);
  if (rc != CUDA_SUCCESS) {
    destroy_fence(reinterpret_cast<pool::FenceHandle>(event));
    return result_of(rc);
  }
  *fence = reinterpret_cast<pool::FenceHandle>(event);
  return UpstreamResult::success();
}

UpstreamResult DriverUpstream::new_fence_event(void** event) {
  if (!spare_events_.empty()) {
    *event = spare_events_.back();
    spare_events_.pop_back();
    return UpstreamResult::success();
  }
  CUevent e = nullptr;
  // No timing: the cheapest event to record and query (cuEventCreate).
  const CUresult rc = driver().event_create.get()(&e, CU_EVENT_DISABLE_TIMING);
  if (rc == CUDA_SUCCESS) *event = e;
  return result_of(rc);
}

UpstreamResult DriverUpstream::order_device(pool::FenceHandle* fence) {
  InContext in(primary_);
  void* event = nullptr;
  if (const UpstreamResult r = new_fence_event(&event); !r.ok()) return r;
  if (!order_device_work(dev_, primary_, event)) {
    destroy_fence(reinterpret_cast<pool::FenceHandle>(event));
    return UpstreamResult::failure(CUDA_ERROR_NOT_SUPPORTED);
  }
  *fence = reinterpret_cast<pool::FenceHandle>(event);
  return UpstreamResult::success();
}

pool::FenceState DriverUpstream::query_fence(pool::FenceHandle fence) {
  // cuEventQuery needs no current context.
  switch (driver().event_query.get()(reinterpret_cast<CUevent>(fence))) {
    case CUDA_SUCCESS: return pool::FenceState::complete;
    case CUDA_ERROR_NOT_READY: return pool::FenceState::pending;
    default: return pool::FenceState::error;
  }
}

void DriverUpstream::destroy_fence(pool::FenceHandle fence) {
  // Kept for the next fence: recording an event again replaces its state
  // (cuEventRecord), and nobody waits on a fence but the pool's queries.
  constexpr std::size_t kSpareEvents = 64;
  if (spare_events_.size() < kSpareEvents) {
    try {
      spare_events_.push_back(reinterpret_cast<void*>(fence));
      return;
    } catch (...) {
    }
  }
  driver().event_destroy.get()(reinterpret_cast<CUevent>(fence));
}

// ---- virtual memory (expandable segments) ------------------------------------

UpstreamResult DriverUpstream::reserve_range(std::size_t size, DevicePtr* base) {
  InContext in(primary_);
  CUdeviceptr p = 0;
  const CUresult rc = driver().address_reserve.get()(&p, size, alignment_, 0, 0);
  if (rc == CUDA_SUCCESS) *base = static_cast<DevicePtr>(p);
  return result_of(rc);
}

UpstreamResult DriverUpstream::release_range(DevicePtr base, std::size_t size) {
  InContext in(primary_);
  return result_of(driver().address_free.get()(static_cast<CUdeviceptr>(base), size));
}

// One physical allocation per page: the pool unmaps any granularity-aligned
// part of what it mapped, and cuMemUnmap takes only whole mappings. A page's
// memory is held (handles_) until it is unmapped for good; memory that
// unmap_keep() kept serves the next pages mapped before any cuMemCreate.
// Access is granted once for the whole range (one cuMemSetAccess per call,
// as PyTorch's expandable segments do: it costs per call, tens of µs, not
// per byte; ../shared/research/vmm-costs.md).
UpstreamResult DriverUpstream::map(DevicePtr addr, std::size_t size) {
  Driver& d = driver();
  InContext in(primary_);
  const CUmemAllocationProp prop = device_allocation(cu_device_);
  CUmemAccessDesc access[1 + kMaxPeers]{};
  access[0].location = prop.location;
  access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int i = 0; i < peer_count_; ++i) {
    access[1 + i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[1 + i].location.id = peers_[i];
    access[1 + i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  const std::size_t descriptors = 1 + static_cast<std::size_t>(peer_count_);
  CUresult rc = CUDA_SUCCESS;
  std::size_t done = 0;
  for (; done < size; done += granularity_) {
    const CUdeviceptr page = static_cast<CUdeviceptr>(addr + done);
    CUmemGenericAllocationHandle handle = 0;
    const bool reused = !kept_.empty();
    if (reused) {
      handle = kept_.back();
      kept_.pop_back();
    } else {
      rc = d.mem_create.get()(&handle, granularity_, &prop, 0);
      if (rc != CUDA_SUCCESS) break;
    }
    rc = d.mem_map.get()(page, granularity_, 0, handle, 0);
    if (rc == CUDA_SUCCESS) {
      try {
        handles_.emplace(static_cast<DevicePtr>(page), handle);
      } catch (...) {
        d.mem_unmap.get()(page, granularity_);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
    if (rc != CUDA_SUCCESS) {
      if (reused) kept_.push_back(handle);
      else d.mem_release.get()(handle);
      break;
    }
  }
  if (rc == CUDA_SUCCESS) {
    rc = d.set_access.get()(static_cast<CUdeviceptr>(addr), size, access, descriptors);
  }
  if (rc != CUDA_SUCCESS) {
    // Leave nothing half-made: the pool knows only whole successes. What
    // was mapped goes back to the kept memory (the pool drops it).
    if (done != 0) unmap_pages(addr, done, Unmapped::keep);
    if (rc != CUDA_ERROR_OUT_OF_MEMORY && !refusal_reported_.exchange(true)) {
      // The pool stops growing expandable ranges (DevicePool's
      // vmm_refused_); say why its memory use changes.
      contract::warn("the driver refused to map device memory on device %d (error %d); the pool uses ordinary "
           "segments there from now on",
           dev_, static_cast<int>(rc));
    }
    return result_of(rc);
  }
  last_segment_api_ = "cuMemMap";
  return UpstreamResult::success();
}

// The pool unmaps only pages whose last use completed (upstream.h): no
// synchronisation here, which would stop the host from running ahead.
UpstreamResult DriverUpstream::unmap(DevicePtr addr, std::size_t size) {
  InContext in(primary_);
  return unmap_pages(addr, size, Unmapped::release);
}

UpstreamResult DriverUpstream::unmap_keep(DevicePtr addr, std::size_t size) {
  InContext in(primary_);
  return unmap_pages(addr, size, Unmapped::keep);
}

void DriverUpstream::drop_kept() {
  if (kept_.empty()) return;
  InContext in(primary_);
  for (CUmemGenericAllocationHandle handle : kept_) {
    // Still mapped at its old address for queued work: released when that
    // mapping goes (a release now would leave the memory to the driver's
    // own "freed when all mappings are unmapped", but unmap_alias() must
    // then not release it).
    const bool aliased = std::any_of(aliases_.begin(), aliases_.end(),
                                     [handle](const auto& entry) { return entry.second == handle; });
    if (!aliased) {
      driver().mem_release.get()(handle);
      continue;
    }
    try {
      release_at_unmap_.push_back(handle);
    } catch (...) {
      driver().mem_release.get()(handle);  // the driver frees it with the old mapping
    }
  }
  kept_.clear();
}

// The page's handle joins kept_ (the next map() takes it); its mapping here
// stays until unmap_alias(). No driver call: a handle may be mapped at
// several addresses at once (cuMemMap: "multiple mappings of the same
// handle" are allowed, as GMLake's stitching relies on).
UpstreamResult DriverUpstream::alias_keep(DevicePtr addr, std::size_t size) {
  for (std::size_t done = 0; done < size; done += granularity_)
    if (handles_.find(addr + done) == handles_.end()) return result_of(CUDA_ERROR_INVALID_VALUE);
  try {
    kept_.reserve(kept_.size() + size / granularity_);
    aliases_.reserve(aliases_.size() + size / granularity_);
  } catch (...) {
    return result_of(CUDA_ERROR_OUT_OF_MEMORY);
  }
  for (std::size_t done = 0; done < size; done += granularity_) {
    const auto it = handles_.find(addr + done);
    kept_.push_back(it->second);
    aliases_.emplace(it->first, it->second);
    handles_.erase(it);
  }
  return UpstreamResult::success();
}

UpstreamResult DriverUpstream::unmap_alias(DevicePtr addr, std::size_t size) {
  InContext in(primary_);
  return unmap_pages(addr, size, Unmapped::alias);
}

UpstreamResult DriverUpstream::unmap_pages(DevicePtr addr, std::size_t size, Unmapped what) {
  Driver& d = driver();
  UpstreamResult first = UpstreamResult::success();
  auto& mappings = what == Unmapped::alias ? aliases_ : handles_;
  for (std::size_t done = 0; done < size; done += granularity_) {
    const DevicePtr page = addr + done;
    const CUresult rc = d.mem_unmap.get()(static_cast<CUdeviceptr>(page), granularity_);
    if (rc != CUDA_SUCCESS && first.ok()) first = result_of(rc);
    const auto it = mappings.find(page);
    if (it == mappings.end()) continue;
    const CUmemGenericAllocationHandle handle = it->second;
    mappings.erase(it);
    if (what == Unmapped::alias) {
      // The memory stays with its new mapping, unless it was dropped there.
      const auto pending = std::find(release_at_unmap_.begin(), release_at_unmap_.end(), handle);
      if (pending == release_at_unmap_.end()) continue;
      release_at_unmap_.erase(pending);
    } else if (rc == CUDA_SUCCESS && what == Unmapped::keep) {
      try {
        kept_.push_back(handle);
        continue;
      } catch (...) {
      }
    }
    d.mem_release.get()(handle);
  }
  return first;
}

}  // namespace cumemtrace::preload
