// Virtual memory management: cuMemAddressReserve / cuMemCreate / cuMemMap /
// cuMemSetAccess / cuMemUnmap / cuMemRelease / cuMemAddressFree.
//
// A reservation is an anonymous PROT_NONE mapping. Physical memory is shared
// anonymous memory (MAP_SHARED|MAP_ANONYMOUS), which has no file size: a real
// driver writes no file, and neither does the sim, so RLIMIT_FSIZE (a memfd
// needs ftruncate: EFBIG, or SIGXFSZ killing a program that simulates a full
// disk) and the descriptor limit do not touch cuMemCreate or cuMemMap.
//
// Each device has one such object (its "arena", created at the first
// cuMemCreate on it), seen through two views: a PROT_NONE one, from which
// handles are carved as ranges of pages (best fit), and a writable one, only
// for MADV_REMOVE, which gives a destroyed handle's pages back to the kernel
// (and makes them read as zeros when they are handed out again). cuMemMap
// duplicates the handle's range into the reservation with
// mremap(range, 0, size, MREMAP_MAYMOVE|MREMAP_FIXED, ptr): "if the value of
// old_size is zero, and old_address refers to a shareable mapping, mremap()
// will create a new mapping of the same pages" (mremap(2)). So every mapping
// of a handle shows the same bytes, wherever and whenever it is mapped: data
// survives unmap/remap. The copy has the view's PROT_NONE (inaccessible until
// cuMemSetAccess) and MADV_DONTFORK (not in a forked child, whose CUDA calls
// all fail, see drv_state.cpp). Where there is no arena (the host would not
// map it) or no range of it is large enough, a handle gets a shared anonymous
// mapping of its own, mapped the same way and unmapped when it is destroyed.
// The arena spans twice the capacity, so that practically never happens.
//
// Physical memory counts against the device's capacity from cuMemCreate until
// it is both released and unmapped ("the memory is freed when all mappings
// are unmapped", cuMemRelease).
//
// None of these calls waits for work queued on the device. cuMemUnmap and
// cuMemSetAccess carry cuda.h's \note_sync, "This function exhibits
// synchronous behavior for most use cases" (CUDA Driver API, Virtual Memory
// Management), which NVIDIA defines for copies and sets only ("API
// synchronization behavior"); cuMemCreate, cuMemMap, cuMemRelease,
// cuMemAddressReserve and cuMemAddressFree carry no such note. And cuMemUnmap
// returning does not mean that queued kernels are done with the range:
// PyTorch's empty_cache() unmapped memory that queued kernels were still
// writing, and the process got an illegal memory access
// (pytorch/pytorch#196258, fixed by synchronising the owning stream first,
// #197159); kvcached saw kernels fault when a page was remapped under them
// (ovg-project/kvcached#465). So here a queued operation that reaches a range
// unmapped, or whose access was revoked, after it was queued is a device
// fault (drv_copy.cpp), never a host crash: cuMemUnmap and cuMemSetAccess
// change the range's protection only with remap_lock() held exclusively,
// while no worker is between checking a range and touching it.
//
// Each call charges the host its cost of the cost table (drv_costs.cpp), and
// counts in simcuda_counters, in the entry points at the end of the file.
#include <sys/mman.h>

#include <cstdint>

#include "drv_internal.h"

namespace sim {
namespace {

struct Phys {
  // Its pages as a PROT_NONE shared mapping, what cuMemMap duplicates: a
  // range of the arena's view, or (own) a mapping of its own.
  std::uintptr_t source = 0;
  bool own = false;
  std::size_t size = 0;
  Device* dev = nullptr;
  Context* ctx = nullptr;
  int refs = 1;  // cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
  int maps = 0;
  CUmemAllocationProp prop{};
};
struct Mapping {
  std::size_t size;
  CUmemGenericAllocationHandle handle;
  int prot;  // PROT_NONE until cuMemSetAccess
};
struct Reservation {
  std::size_t size;
  Context* ctx;
  std::map<std::uintptr_t, Mapping> maps;  // by mapping base
  std::uint64_t buffer_id;  // CU_POINTER_ATTRIBUTE_BUFFER_ID of what is mapped in it
};

// A device's physical memory for cuMemCreate (see the top of the file).
struct Arena {
  bool tried = false;       // created, or failed to, at the first cuMemCreate
  std::uintptr_t none = 0;  // PROT_NONE view; 0 when there is no arena
  std::uintptr_t rw = 0;    // writable view of the same pages
  std::size_t size = 0;
  RangeAllocator free;      // unused ranges, as addresses in `none`
};

struct Vmm {
  std::mutex mu;
  std::map<CUmemGenericAllocationHandle, Phys> phys;
  std::map<Device*, Arena> arenas;
  CUmemGenericAllocationHandle next = 0x51c0000;
  std::map<std::uintptr_t, Reservation> res;  // by reservation base
};
Vmm& V() {
  static auto* v = new Vmm;
  return *v;
}

bool aligned(std::uintptr_t v) { return v % kVmmGranularity == 0; }

CUresult check_prop(const CUmemAllocationProp* prop) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!device_at(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

constexpr int kShared = MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE;

// The device's arena, created on first use. Caller holds V().mu.
Arena& arena_locked(Device* d) {
  Arena& a = V().arenas[d];
  if (a.tried) return a;
  a.tried = true;
  for (std::size_t factor : {2, 1}) {
    if (d->capacity > SIZE_MAX / factor) continue;
    const std::size_t n = d->capacity * factor / kVmmGranularity * kVmmGranularity;
    void* rw = mmap(nullptr, n, PROT_READ | PROT_WRITE, kShared, -1, 0);
    if (rw == MAP_FAILED) continue;
    void* none = mremap(rw, 0, n, MREMAP_MAYMOVE);
    if (none == MAP_FAILED || mprotect(none, n, PROT_NONE) != 0) {
      if (none != MAP_FAILED) munmap(none, n);
      munmap(rw, n);
      continue;
    }
    madvise(rw, n, MADV_DONTFORK);
    madvise(none, n, MADV_DONTFORK);
    a.none = reinterpret_cast<std::uintptr_t>(none);
    a.rw = reinterpret_cast<std::uintptr_t>(rw);
    a.size = n;
    a.free.release(a.none, n);
    break;
  }
  return a;
}

// Pages for a new handle of p->size bytes; false when the host has none.
// Caller holds V().mu.
bool take_pages_locked(Device* d, Phys* p) {
  Arena& a = arena_locked(d);
  if (a.size != 0) p->source = a.free.alloc(p->size);
  p->own = p->source == 0;
  if (p->own) {
    void* m = mmap(nullptr, p->size, PROT_NONE, kShared, -1, 0);
    if (m == MAP_FAILED) return false;
    madvise(m, p->size, MADV_DONTFORK);
    p->source = reinterpret_cast<std::uintptr_t>(m);
  }
  return true;
}

// Caller holds V().mu.
void destroy_phys_locked(std::map<CUmemGenericAllocationHandle, Phys>::iterator it) {
  Phys& p = it->second;
  if (p.own) {
    munmap(reinterpret_cast<void*>(p.source), p.size);
  } else {
    Arena& a = V().arenas.at(p.dev);
    // Frees the pages (no mapping of them is left). Should that ever fail,
    // the range is not handed out again, so no handle starts with another's
    // bytes.
    if (madvise(reinterpret_cast<void*>(a.rw + (p.source - a.none)), p.size, MADV_REMOVE) == 0) {
      a.free.release(p.source, p.size);
    }
  }
  {
    std::lock_guard<std::mutex> lk(p.dev->mu);
    p.dev->used -= p.size;
  }
  V().phys.erase(it);
}

void maybe_destroy_locked(CUmemGenericAllocationHandle h) {
  auto it = V().phys.find(h);
  if (it != V().phys.end() && it->second.refs <= 0 && it->second.maps == 0) {
    destroy_phys_locked(it);
  }
}

// Finds the reservation wholly containing [p, p+n). Caller holds V().mu.
std::map<std::uintptr_t, Reservation>::iterator find_res_locked(std::uintptr_t p, std::size_t n) {
  auto& res = V().res;
  auto it = res.upper_bound(p);
  if (it == res.begin()) return res.end();
  --it;
  if (p >= it->first && n <= it->second.size && p - it->first <= it->second.size - n) return it;
  return res.end();
}

void unmap_one_locked(std::uintptr_t base, const Mapping& m) {
  // Back to an inaccessible, reserved range.
  mmap(reinterpret_cast<void*>(base), m.size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  auto it = V().phys.find(m.handle);
  if (it != V().phys.end()) {
    --it->second.maps;
    maybe_destroy_locked(m.handle);
  }
}

}  // namespace

bool vmm_lookup(std::uintptr_t p, std::size_t len, PtrInfo* info, bool for_attributes) {
  std::lock_guard<std::mutex> lk(V().mu);
  auto r = find_res_locked(p, len ? len : 1);
  if (r == V().res.end()) return false;
  PtrInfo out;
  out.vmm = true;
  out.range_base = r->first;
  out.range_size = r->second.size;
  out.buffer_id = r->second.buffer_id;
  auto& maps = r->second.maps;
  auto it = maps.upper_bound(p);
  if (it == maps.begin() || std::prev(it)->first + std::prev(it)->second.size <= p) {
    if (for_attributes) *info = out;  // reserved, nothing mapped at p
    return for_attributes;
  }
  --it;
  // The range may span several adjacent mappings; all must be accessible
  // (the attribute queries ask of p alone, and take a mapping as it is).
  std::uintptr_t cur = p, end = p + (len ? len : 1);
  auto first = it;
  while (cur < end) {
    if (it == maps.end() || it->first > cur || it->first + it->second.size <= cur) return false;
    if (it->second.prot == PROT_NONE && !for_attributes) return false;
    if (!(it->second.prot & PROT_WRITE)) out.read_only = true;
    cur = it->first + it->second.size;
    ++it;
  }
  const Phys& ph = V().phys.at(first->second.handle);
  out.found = true;
  out.device = ph.dev->ordinal;
  out.base = first->first;
  out.size = first->second.size;
  out.ctx = ph.ctx;
  out.mapped = true;
  *info = out;
  return true;
}

}  // namespace sim

using namespace sim;

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  if (CUresult r = check_prop(prop)) return r;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

static CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!handle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  if (CUresult r = check_prop(prop)) return r;
  // "size ... must be aligned to the granularity" (cuMemGetAllocationGranularity).
  if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_at(prop->location.id);
  Context* owner = nullptr;
  if (current_ctx_any(&owner) != CUDA_SUCCESS || owner->dev != d) owner = d->primary;
  simcfg::wait_us(simcfg::get().malloc_latency_us);
  {
    std::lock_guard<std::mutex> lk(d->mu);
    if (size > d->capacity - d->used) return CUDA_ERROR_OUT_OF_MEMORY;
    d->used += size;
  }
  std::lock_guard<std::mutex> lk(V().mu);
  Phys p;
  p.size = size;
  p.dev = d;
  p.ctx = owner;
  p.prop = *prop;
  if (!take_pages_locked(d, &p)) {
    std::lock_guard<std::mutex> dk(d->mu);
    d->used -= size;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUmemGenericAllocationHandle h = V().next++;
  V().phys.emplace(h, p);
  *handle = h;
  return CUDA_SUCCESS;
}

// No remap_lock() here: the handle's pages are destroyed only once no
// mapping of them is left, and an unmapped range is one no worker touches.
static CUresult mem_release(CUmemGenericAllocationHandle handle, std::size_t* bytes) {
  if (CUresult r = check_init()) return r;
  simcfg::wait_us(simcfg::get().free_latency_us);
  std::lock_guard<std::mutex> lk(V().mu);
  auto it = V().phys.find(handle);
  if (it == V().phys.end() || it->second.refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  *bytes = it->second.size;
  --it->second.refs;
  maybe_destroy_locked(handle);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  auto p = reinterpret_cast<std::uintptr_t>(addr);
  std::lock_guard<std::mutex> lk(V().mu);
  auto r = find_res_locked(p, 1);
  if (r == V().res.end()) return CUDA_ERROR_INVALID_VALUE;
  auto it = r->second.maps.upper_bound(p);
  if (it == r->second.maps.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (p >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  ++V().phys.at(it->second.handle).refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(V().mu);
  auto it = V().phys.find(handle);
  if (it == V().phys.end() || it->second.refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

static CUresult address_reserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  if (!ptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment < kVmmGranularity) alignment = kVmmGranularity;
  const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* got = MAP_FAILED;
  if (addr && addr % alignment == 0) {  // "addr: fixed starting address hint"
    got = mmap(reinterpret_cast<void*>(addr), size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != MAP_FAILED && reinterpret_cast<CUdeviceptr>(got) != addr) {
      munmap(got, size);  // old kernels treat the flag as a hint
      got = MAP_FAILED;
    }
  }
  if (got == MAP_FAILED) {
    void* raw = mmap(nullptr, size + alignment, PROT_NONE, mflags, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    auto r = reinterpret_cast<std::uintptr_t>(raw);
    std::uintptr_t a = (r + alignment - 1) / alignment * alignment;
    if (a > r) munmap(raw, a - r);
    std::uintptr_t tail = r + size + alignment - (a + size);
    if (tail) munmap(reinterpret_cast<void*>(a + size), tail);
    got = reinterpret_cast<void*>(a);
  }
  Context* owner = nullptr;
  if (current_ctx_any(&owner) != CUDA_SUCCESS) owner = nullptr;
  std::lock_guard<std::mutex> lk(V().mu);
  V().res[reinterpret_cast<std::uintptr_t>(got)] =
      Reservation{size, owner, {}, G().next_buffer_id.fetch_add(1, std::memory_order_relaxed)};
  *ptr = reinterpret_cast<CUdeviceptr>(got);
  return CUDA_SUCCESS;
}

static CUresult address_free(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(V().mu);
  auto it = V().res.find(ptr);
  // "size must match the size of the reservation".
  if (it == V().res.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  // A reservation with a mapping left in it is refused, and stays as it was:
  // driver 580.159.04 on an H100 (tests/apps/sim_driver_probe).
  if (!it->second.maps.empty()) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  V().res.erase(it);
  return CUDA_SUCCESS;
}

static CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (CUresult r = check_init()) return r;
  // "offset ... Currently must be zero"; "flags ... must be zero".
  if (flags != 0 || offset != 0) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || !aligned(ptr) || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(V().mu);
  auto ph = V().phys.find(handle);
  if (ph == V().phys.end() || ph->second.refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > ph->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto r = find_res_locked(ptr, size);
  if (r == V().res.end()) return CUDA_ERROR_INVALID_VALUE;
  auto& maps = r->second.maps;
  auto next = maps.lower_bound(ptr);
  if (next != maps.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != maps.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;  // overlaps
  }
  // The handle's first `size` bytes at ptr, in place of the reserved range;
  // PROT_NONE and MADV_DONTFORK, as its source.
  void* want = reinterpret_cast<void*>(ptr);
  if (mremap(reinterpret_cast<void*>(ph->second.source), 0, size, MREMAP_MAYMOVE | MREMAP_FIXED,
             want) != want) {
    // The kernel may have unmapped the target before failing: reserve it again.
    mmap(want, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  maps[ptr] = Mapping{size, handle, PROT_NONE};
  ++ph->second.maps;
  return CUDA_SUCCESS;
}

static CUresult mem_unmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = check_init()) return r;
  if (size == 0 || !aligned(ptr) || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock<std::shared_mutex> remap(remap_lock());
  std::lock_guard<std::mutex> lk(V().mu);
  auto r = find_res_locked(ptr, size);
  if (r == V().res.end()) return CUDA_ERROR_INVALID_VALUE;
  auto& maps = r->second.maps;
  // Every mapping touched must lie wholly inside the range.
  auto first = maps.upper_bound(ptr);
  if (first != maps.begin() && std::prev(first)->first + std::prev(first)->second.size > ptr) {
    --first;
  }
  auto last = first;
  bool any = false;
  for (; last != maps.end() && last->first < ptr + size; ++last) {
    if (last->first < ptr || last->first + last->second.size > ptr + size) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    any = true;
  }
  if (!any) return CUDA_ERROR_INVALID_VALUE;
  for (auto it = first; it != last;) {
    unmap_one_locked(it->first, it->second);
    it = maps.erase(it);
  }
  return CUDA_SUCCESS;
}

static CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  if (CUresult r = check_init()) return r;
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (std::size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!device_at(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_NONE: break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ: prot |= PROT_READ; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot |= PROT_READ | PROT_WRITE; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::unique_lock<std::shared_mutex> remap(remap_lock());  // may revoke access
  std::lock_guard<std::mutex> lk(V().mu);
  auto r = find_res_locked(ptr, size);
  if (r == V().res.end()) return CUDA_ERROR_INVALID_VALUE;
  auto& maps = r->second.maps;
  // The whole range must be mapped.
  auto it = maps.upper_bound(ptr);
  if (it == maps.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  std::vector<Mapping*> touched;
  for (std::uintptr_t cur = ptr; cur < ptr + size; ++it) {
    if (it == maps.end() || it->first > cur || it->first + it->second.size <= cur) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    touched.push_back(&it->second);
    cur = it->first + it->second.size;
  }
  if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  for (Mapping* m : touched) m->prot = prot;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                CUdeviceptr ptr) {
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(V().mu);
  auto r = find_res_locked(ptr, 1);
  if (r == V().res.end()) return CUDA_ERROR_INVALID_VALUE;
  auto it = r->second.maps.upper_bound(ptr);
  if (it == r->second.maps.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (ptr >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  int p = it->second.prot;
  *flags = (p & PROT_WRITE)  ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
           : (p & PROT_READ) ? CU_MEM_ACCESS_FLAGS_PROT_READ
                             : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

// ---- entry points: count, then charge what a successful call costs ----------

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  count(Counter::mem_create);
  return charged(Cost::Create, size, mem_create(handle, size, prop, flags));
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  count(Counter::mem_release);
  std::size_t bytes = 0;
  const CUresult r = mem_release(handle, &bytes);
  return charged(Cost::Release, bytes, r);
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  count(Counter::mem_address_reserve);
  return charged(Cost::AddressReserve, size, address_reserve(ptr, size, alignment, addr, flags));
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  count(Counter::mem_address_free);
  return charged(Cost::AddressFree, size, address_free(ptr, size));
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  count(Counter::mem_map);
  return charged(Cost::Map, size, mem_map(ptr, size, offset, handle, flags));
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  count(Counter::mem_unmap);
  return charged(Cost::Unmap, size, mem_unmap(ptr, size));
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count_) {
  count(Counter::mem_set_access);
  return charged(Cost::SetAccess, size, set_access(ptr, size, desc, count_));
}
