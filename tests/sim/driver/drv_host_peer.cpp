// Host registration (cuMemHostRegister), peer access between simulated
// devices, profiler start/stop and the managed-memory hints (cuMemAdvise,
// cuMemPrefetchAsync, cuMemRangeGetAttribute[s]).
//
// Registered memory is the program's own host memory made device-visible:
// it takes nothing of any device's capacity, lookup_range finds it (so copies
// from and to it, pointer attributes and cuMemHostGetDevicePointer work), and
// unregistering it leaves the memory to the program. Peer access is recorded
// per (context, peer context) and checked as cuda.h documents; copies between
// devices work with or without it, as cuMemcpyPeer does on a real GPU. The
// hints are validated and do nothing: the sim's managed memory has one
// location, so a range reports no advice and no prefetch location.
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <vector>

#include "drv_internal.h"

namespace sim {
namespace {

std::mutex& reg_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<std::uintptr_t, PinnedHost>& regs() {
  static auto* m = new std::map<std::uintptr_t, PinnedHost>;
  return *m;
}

// The registration overlapping [p, p+n), or end(). Caller holds reg_mu().
std::map<std::uintptr_t, PinnedHost>::iterator overlapping(std::uintptr_t p, std::size_t n) {
  auto& m = regs();
  auto it = m.lower_bound(p + n);
  if (it == m.begin()) return m.end();
  --it;
  return it->first + it->second.size > p ? it : m.end();
}

// Whether every page of [p, p+n) is mapped in this process: mincore(2)
// fails with ENOMEM for an unmapped page.
bool host_range_mapped(std::uintptr_t p, std::size_t n) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t start = p & ~(page - 1);
  const std::size_t len = (p + n - start + page - 1) & ~(page - 1);
  std::vector<unsigned char> vec(len / page);
  return mincore(reinterpret_cast<void*>(start), len, vec.data()) == 0;
}

CUresult host_register(void* ptr, std::size_t bytesize, unsigned flags) {
  const unsigned all = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                       CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (flags & ~all) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  if (p == 0 || bytesize == 0 || bytesize > UINTPTR_MAX - p) return CUDA_ERROR_INVALID_VALUE;
  // "Using this flag with a current context associated with a device that
  // does not have [CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED]
  // set will cause cuMemHostRegister to error with CUDA_ERROR_NOT_SUPPORTED"
  // (cuda.h); the simulated device reports it as 0.
  if (flags & CU_MEMHOSTREGISTER_READ_ONLY) {
    int ro = 0;
    if (cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
                             c->dev->ordinal) != CUDA_SUCCESS || ro == 0) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  // Memory the driver already page-locked (cuMemHostAlloc, an earlier
  // registration) is CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED; device,
  // managed and VMM addresses are no host memory to register.
  for (std::uintptr_t q : {p, p + bytesize - 1}) {
    PtrInfo other = lookup_range(q, 0);
    if (other.found) {
      return other.host ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_ERROR_INVALID_VALUE;
    }
  }
  // A range with unmapped pages cannot be page-locked (the code the real
  // driver returns for it was not checked on a GPU).
  if (!host_range_mapped(p, bytesize)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(reg_mu());
  if (overlapping(p, bytesize) != regs().end()) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  regs()[p] = PinnedHost{bytesize, flags, c, G().next_buffer_id.fetch_add(1, std::memory_order_relaxed)};
  return CUDA_SUCCESS;
}

// ---- peer access ---------------------------------------------------------------
// (current context, peer context) -> the generations both had when access
// was enabled: a reset or destroyed context (generation bumped) loses what
// was enabled from or to it, as its mappings go with it.
std::mutex& peer_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<std::pair<Context*, Context*>, std::pair<std::uint64_t, std::uint64_t>>& peers() {
  static auto* m =
      new std::map<std::pair<Context*, Context*>, std::pair<std::uint64_t, std::uint64_t>>;
  return *m;
}

bool valid_context(CUcontext h) {
  std::lock_guard<std::mutex> lk(G().mu);
  return G().contexts.count(reinterpret_cast<Context*>(h)) != 0;
}

// Caller holds peer_mu().
bool peer_enabled_locked(Context* from, Context* to) {
  auto it = peers().find({from, to});
  if (it == peers().end()) return false;
  if (it->second.first == from->generation.load() && it->second.second == to->generation.load()) {
    return true;
  }
  peers().erase(it);
  return false;
}

// ---- managed-memory hints ----------------------------------------------------
// "The memory range must refer to managed memory allocated via
// cuMemAllocManaged" (cuMemAdvise, cuMemPrefetchAsync, cuMemRangeGetAttribute);
// pageable memory would do only where CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS
// is set, and the simulated device reports 0.
CUresult check_managed(CUdeviceptr p, std::size_t count) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  const PtrInfo i = lookup_range(p, count);
  return i.found && i.managed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// A CUmemLocation naming a device, the host, or a host NUMA node.
CUresult check_location(const CUmemLocation& loc) {
  switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return device_at(loc.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return CUDA_SUCCESS;  // "id is ignored"
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      // The simulated host is one NUMA node, 0 (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID
      // says -1: no NUMA-aware placement).
      return loc.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// The old CUdevice form: an ordinal or CU_DEVICE_CPU.
CUresult location_of(CUdevice dev, CUmemLocation* out) {
  if (dev == CU_DEVICE_CPU) {
    out->type = CU_MEM_LOCATION_TYPE_HOST;
    out->id = 0;
    return CUDA_SUCCESS;
  }
  if (!device_at(dev)) return CUDA_ERROR_INVALID_DEVICE;
  out->type = CU_MEM_LOCATION_TYPE_DEVICE;
  out->id = dev;
  return CUDA_SUCCESS;
}

CUresult advise(CUdeviceptr p, std::size_t count, CUmem_advise advice, const CUmemLocation& loc) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      break;  // the location is ignored
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
      if (CUresult r = check_location(loc)) return r;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return check_managed(p, count);
}

CUresult prefetch(CUdeviceptr p, std::size_t count, const CUmemLocation& loc, unsigned flags,
                  CUstream h, bool pt) {
  // "flags for future use, must be zero now."
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (CUresult r = check_location(loc)) return r;
  // Validated, nothing to move: managed memory has one home in the sim.
  return check_managed(p, count);
}

// What a range reports: no advice was ever recorded, nothing prefetched.
CUresult range_attribute(void* data, std::size_t size, CUmem_range_attribute attribute) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  auto put_int = [&](int v) {
    if (size != sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  };
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
      return put_int(0);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
      return put_int(CU_DEVICE_INVALID);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: {
      if (size != sizeof(CUmemLocationType)) return CUDA_ERROR_INVALID_VALUE;
      const CUmemLocationType t = CU_MEM_LOCATION_TYPE_INVALID;
      std::memcpy(data, &t, sizeof t);
      return CUDA_SUCCESS;
    }
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      // "dataSize must be a non-zero multiple of 4"; CU_DEVICE_INVALID "in
      // all the extra space provided".
      if (size == 0 || size % sizeof(int) != 0) return CUDA_ERROR_INVALID_VALUE;
      const int none = CU_DEVICE_INVALID;
      for (std::size_t k = 0; k < size / sizeof(int); ++k) {
        std::memcpy(static_cast<char*>(data) + k * sizeof(int), &none, sizeof none);
      }
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

bool registered_lookup(std::uintptr_t p, std::size_t len, PtrInfo* info) {
  std::lock_guard<std::mutex> lk(reg_mu());
  auto it = overlapping(p, 1);
  if (it == regs().end() || p + len > it->first + it->second.size) return false;
  *info = pinned_host_info(it->first, it->second);
  return true;
}

void drop_context_registrations(Context* ctx) {
  std::lock_guard<std::mutex> lk(reg_mu());
  for (auto it = regs().begin(); it != regs().end();) {
    it = it->second.ctx == ctx ? regs().erase(it) : std::next(it);
  }
}

}  // namespace sim

using namespace sim;

// ---- host registration ------------------------------------------------------------
CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  return host_register(p, bytesize, Flags);
}
// The CUDA 4.0 ABI (PFN_cuMemHostRegister_v4000): the same arguments.
CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return host_register(p, bytesize, Flags);
}

// "The base address must be the same one specified to cuMemHostRegister()";
// anything else is CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, NULL
// CUDA_ERROR_INVALID_VALUE (driver 590.48.01, lupinemachines/lupine#858). It
// "does not produce an error when invoked from a different context than the
// one it was originally registered in (or even without an active context)"
// (openucx/ucx#10643); a destroyed context left current keeps its error, as
// for cuMemFree (drv_memory.cpp).
CUresult CUDAAPI cuMemHostUnregister(void* p) {
  Context* c = nullptr;
  CUresult r = current_ctx(&c);
  if (r == CUDA_ERROR_INVALID_CONTEXT && (ctx_stack().empty() || !ctx_stack().back())) {
    r = CUDA_SUCCESS;
  }
  if (r) return r;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(reg_mu());
  auto it = regs().find(reinterpret_cast<std::uintptr_t>(p));
  if (it == regs().end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  regs().erase(it);
  return CUDA_SUCCESS;
}

// ---- peer access ----------------------------------------------------------------
// cuda.h: no current context, an invalid peer, or the current context itself
// is CUDA_ERROR_INVALID_CONTEXT; Flags other than 0 CUDA_ERROR_INVALID_VALUE;
// a device cuDeviceCanAccessPeer says cannot access the peer's (its own
// device: 0) CUDA_ERROR_PEER_ACCESS_UNSUPPORTED; a second enable
// CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED. Access is one-way.
CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (!valid_context(peerContext)) return CUDA_ERROR_INVALID_CONTEXT;
  auto* peer = reinterpret_cast<Context*>(peerContext);
  if (peer == c) return CUDA_ERROR_INVALID_CONTEXT;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int can = 0;
  if (CUresult r = cuDeviceCanAccessPeer(&can, c->dev->ordinal, peer->dev->ordinal)) return r;
  if (!can) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  std::lock_guard<std::mutex> lk(peer_mu());
  if (peer_enabled_locked(c, peer)) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  peers()[{c, peer}] = {c->generation.load(), peer->generation.load()};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (!valid_context(peerContext)) return CUDA_ERROR_INVALID_CONTEXT;
  auto* peer = reinterpret_cast<Context*>(peerContext);
  std::lock_guard<std::mutex> lk(peer_mu());
  if (!peer_enabled_locked(c, peer)) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  peers().erase({c, peer});
  return CUDA_SUCCESS;
}

// "CUDA_ERROR_INVALID_DEVICE if srcDevice or dstDevice are not valid or if
// they represent the same device. CUDA_ERROR_INVALID_VALUE if attrib is not
// valid or if value is a null pointer" (cuda.h). Two simulated devices are
// linked like two H100s on NVLink: access and native atomics; no CUDA arrays
// exist in the sim, so none are accessible over the link.
CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib,
                                         CUdevice srcDevice, CUdevice dstDevice) {
  if (CUresult r = check_init()) return r;
  if (!device_at(srcDevice) || !device_at(dstDevice) || srcDevice == dstDevice) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = 1; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = 1; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED: *value = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---- profiler ---------------------------------------------------------------------
// cudaProfiler.h: CUDA_SUCCESS, or CUDA_ERROR_INVALID_CONTEXT without a
// current context. No profiler is attached to the sim: nothing to start.
CUresult CUDAAPI cuProfilerStart(void) {
  Context* c = nullptr;
  return current_ctx(&c);
}
CUresult CUDAAPI cuProfilerStop(void) {
  Context* c = nullptr;
  return current_ctx(&c);
}

// ---- managed-memory hints -----------------------------------------------------------
CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                CUmemLocation location) {
  return advise(devPtr, count, advice, location);
}
// The CUDA 8.0 ABI: a CUdevice, CU_DEVICE_CPU for the host.
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
  CUmemLocation loc{};
  const bool needs_location = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                              advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                              advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (needs_location) {
    if (CUresult r = location_of(device, &loc)) return r;
  }
  return advise(devPtr, count, advice, loc);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                       unsigned int flags, CUstream hStream) {
  return prefetch(devPtr, count, location, flags, hStream, false);
}
CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                            CUmemLocation location, unsigned int flags,
                                            CUstream hStream) {
  return prefetch(devPtr, count, location, flags, hStream, true);
}
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                    CUstream hStream) {
  CUmemLocation loc{};
  if (CUresult r = location_of(dstDevice, &loc)) return r;
  return prefetch(devPtr, count, loc, 0, hStream, false);
}
CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                         CUstream hStream) {
  CUmemLocation loc{};
  if (CUresult r = location_of(dstDevice, &loc)) return r;
  return prefetch(devPtr, count, loc, 0, hStream, true);
}

CUresult CUDAAPI cuMemRangeGetAttribute(void* data, size_t dataSize,
                                        CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                        size_t count) {
  if (CUresult r = check_init()) return r;
  if (CUresult r = check_managed(devPtr, count)) return r;
  return range_attribute(data, dataSize, attribute);
}

CUresult CUDAAPI cuMemRangeGetAttributes(void** data, size_t* dataSizes,
                                         CUmem_range_attribute* attributes, size_t numAttributes,
                                         CUdeviceptr devPtr, size_t count) {
  if (CUresult r = check_init()) return r;
  if (!data || !dataSizes || !attributes || numAttributes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_managed(devPtr, count)) return r;
  for (std::size_t k = 0; k < numAttributes; ++k) {
    if (CUresult r = range_attribute(data[k], dataSizes[k], attributes[k])) return r;
  }
  return CUDA_SUCCESS;
}
