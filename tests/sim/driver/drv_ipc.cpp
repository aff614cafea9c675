// Legacy CUDA IPC: cuIpcGetMemHandle, cuIpcOpenMemHandle[_v2],
// cuIpcCloseMemHandle.
//
// How memory is shared. A device's space is one private anonymous mapping
// (drv_arena.cpp), so ordinary cuMemAlloc/cuMemFree cost nothing more than
// before. The first cuIpcGetMemHandle of a unit turns that unit into shared
// memory: a memfd receives the unit's bytes and is mapped MAP_SHARED|MAP_FIXED
// over it. A unit is an allocation's own pages (allocations > 1 MiB), or the
// whole 2 MiB page a small allocation shares with others (its 512-byte
// placement cannot be mapped alone). The 64-byte handle carries the
// exporter's pid, the memfd's descriptor number and inode, the allocation's
// offset in the unit, its size and its buffer id. The importer opens
// /proc/<pid>/fd/<fd>, checks the inode, and maps the unit into its own
// device space (address space only: an import takes no pages of the
// importer's capacity); the pointer it returns is the allocation's base in
// that mapping.
//
// Lifetime. After the memfd's bytes, the file holds one 8-byte slot per
// 512-byte offset of the unit: the buffer id of the exported allocation that
// starts there while it lives, 0 once it is freed, so a handle of a freed
// allocation no longer opens. When the exporter frees the unit (the
// allocation, or the shared page's last allocation) the unit becomes private
// memory again and the exporter closes its descriptor; an importer that
// mapped it keeps the memfd and its bytes until cuIpcCloseMemHandle, as the
// real driver keeps an exported allocation's physical memory while an
// importer has it open ("Calling cuMemFree on an exported memory region
// before calling cuIpcCloseMemHandle in the importing context will result in
// undefined behavior", cuda.h: undefined, and here harmless). A freed
// exported small allocation's bytes are not handed out again while its
// shared page lives, for the same reason.
//
// fork. Shared units and imported mappings are MADV_DONTFORK: a forked child
// (whose CUDA calls all fail, drv_state.cpp) does not share them with its
// parent; the rest of the device space is private, copied on write.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

#include "drv_internal.h"

namespace sim {

std::shared_mutex& remap_lock() {
  static auto* m = new std::shared_mutex;  // never destroyed, see drv_internal.h
  return *m;
}

namespace {

constexpr std::size_t kHostPage = 4096;
constexpr char kMagic[8] = {'s', 'i', 'm', 'c', 'u', 'i', 'p', 'c'};

// The 64 bytes of a CUipcMemHandle ("opaque", cuda.h: any layout will do).
struct Wire {
  char magic[8];
  std::uint32_t pid;        // exporter
  std::int32_t fd;          // exporter's memfd descriptor
  std::uint64_t inode;      // of that memfd: a reused descriptor number is told apart
  std::uint64_t unit_size;  // bytes the importer maps
  std::uint64_t offset;     // of the allocation in the unit
  std::uint64_t size;       // the allocation's requested size
  std::uint64_t buffer_id;  // exporter's id of the allocation (never reused)
  std::int32_t device;      // exporter's device ordinal
  std::uint32_t check;      // FNV-1a of the bytes before it
};
static_assert(sizeof(Wire) == CU_IPC_HANDLE_SIZE, "a handle is 64 bytes");

std::uint32_t checksum(const Wire& w) {
  std::uint32_t h = 2166136261u;
  const auto* b = reinterpret_cast<const unsigned char*>(&w);
  for (std::size_t i = 0; i < offsetof(Wire, check); ++i) h = (h ^ b[i]) * 16777619u;
  return h;
}

// The memfd: the unit's bytes, then the slot table.
std::size_t file_size(std::size_t unit_size) { return unit_size + unit_size / kAllocAlign * 8; }
off_t slot_of(std::size_t unit_size, std::size_t offset) {
  return static_cast<off_t>(unit_size + offset / kAllocAlign * 8);
}

void unit_of(const Allocation& a, std::uintptr_t* base, std::size_t* size) {
  if (std::size_t own = DeviceSpace::own_pages(a.size)) {
    *base = a.base;
    *size = own * kPageSize;
  } else {
    *base = a.base & ~(kPageSize - 1);
    *size = kPageSize;
  }
}

Device* device_containing(std::uintptr_t p) {
  for (Device* d : G().devices) {
    if (d->space.contains(p)) return d;
  }
  return nullptr;
}

// Back to private anonymous memory, as the rest of the device space.
void make_private(std::uintptr_t p, std::size_t n) {
  mmap(reinterpret_cast<void*>(p), n, PROT_READ | PROT_WRITE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

bool all_zero(const unsigned char* p, std::size_t n) {
  const auto* w = reinterpret_cast<const std::uint64_t*>(p);
  for (std::size_t i = 0; i < n / 8; ++i) {
    if (w[i]) return false;
  }
  return true;
}

// Copies the unit's bytes into the memfd mapping `to`, page by page, only
// where the host has them (mincore) and they are not zero: a never-written
// 8 GiB allocation costs the memfd no RAM (its holes read as zeros).
void copy_contents(std::uintptr_t from, unsigned char* to, std::size_t n) {
  std::vector<unsigned char> resident(n / kHostPage);
  const bool known = mincore(reinterpret_cast<void*>(from), n, resident.data()) == 0;
  for (std::size_t i = 0; i < n / kHostPage; ++i) {
    if (known && !(resident[i] & 1)) continue;
    const auto* page = reinterpret_cast<const unsigned char*>(from + i * kHostPage);
    if (!all_zero(page, kHostPage)) std::memcpy(to + i * kHostPage, page, kHostPage);
  }
}

// Turns [unit, unit+size) into a shared memfd mapping holding the same
// bytes. Caller holds remap_lock() exclusively (no stream worker touches
// device memory meanwhile) and d->mu.
CUresult share_unit_locked(Device* d, std::uintptr_t unit, std::size_t size, SharedUnit** out) {
  int fd = memfd_create("simcuda-ipc", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  struct stat st{};
  if (ftruncate(fd, static_cast<off_t>(file_size(size))) != 0 || fstat(fd, &st) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* staging = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_MAP_FAILED;
  }
  copy_contents(unit, static_cast<unsigned char*>(staging), size);
  munmap(staging, size);
  void* m = mmap(reinterpret_cast<void*>(unit), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_MAP_FAILED;
  }
  madvise(m, size, MADV_DONTFORK);
  SharedUnit& su = d->shared_units[unit];
  su.fd = fd;
  su.size = size;
  su.inode = static_cast<std::uint64_t>(st.st_ino);
  *out = &su;
  return CUDA_SUCCESS;
}

void write_slot(const SharedUnit& su, std::size_t offset, std::uint64_t id) {
  if (pwrite(su.fd, &id, sizeof id, slot_of(su.size, offset)) != static_cast<ssize_t>(sizeof id)) {
    std::fprintf(stderr, "simcuda: cannot write an IPC slot\n");
  }
}

CUresult get_handle(CUipcMemHandle* out, CUdeviceptr dptr) {
  Context* c = nullptr;
  // No current context: CUDA_ERROR_INVALID_CONTEXT (cuda.h lists it; Open
  // MPI users saw exactly it from cuIpcGetMemHandle, OPM/LBPM#34).
  if (CUresult r = current_ctx(&c)) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  const std::uintptr_t p = dptr;
  // Host memory (pinned or not), VMM mappings and garbage are outside every
  // device space: CUDA_ERROR_INVALID_VALUE, the code cuIpcGetMemHandle gives
  // for memory that is not cuMemAlloc's (see below).
  Device* d = p ? device_containing(p) : nullptr;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  // Pass 0 answers an allocation whose unit is already shared without
  // stopping the stream workers; pass 1 shares it under remap_lock().
  for (int pass = 0; pass < 2; ++pass) {
    std::unique_lock<std::shared_mutex> remap(remap_lock(), std::defer_lock);
    if (pass == 1) remap.lock();
    std::lock_guard<std::mutex> lk(d->mu);
    // "Takes a pointer to the base of an existing device memory allocation":
    // a pointer inside one is accepted too and gives the same handle as its
    // base ("cuIpcGetMemHandle(base + offset): CUDA_SUCCESS ... opaque
    // handles are identical", measured in openucx/ucx#11724), which is what
    // PyTorch relies on, sending the offset beside the handle. A freed
    // pointer matches no allocation.
    auto it = d->allocs.upper_bound(p);
    if (it == d->allocs.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    Allocation& a = it->second;
    if (p >= a.base + a.requested) return CUDA_ERROR_INVALID_VALUE;
    // Only cuMemAlloc-style memory (cuMemAlloc, cuMemAllocPitch) is legacy-
    // IPC capable. Stream-ordered memory is refused with
    // CUDA_ERROR_INVALID_VALUE ("cuIpcGetMemHandle return value: 1" for
    // CUDA.jl's cuMemAllocAsync memory, JuliaGPU/CUDA.jl#1053; the same for
    // cudarc's, chelsea0x3b/cudarc#521), so is managed memory
    // (cudaErrorInvalidValue, cupy/cupy#9306). VMM memory "does not support
    // the legacy cuIpc* functions" (NVIDIA's VMM blog post, quoted in
    // openucx/ucx#7110). Memory this process imported is not re-exported
    // (not checked on a real driver).
    if (a.kind != AllocKind::Device && a.kind != AllocKind::Pitch) return CUDA_ERROR_INVALID_VALUE;
    std::uintptr_t unit = 0;
    std::size_t unit_size = 0;
    unit_of(a, &unit, &unit_size);
    SharedUnit* su = nullptr;
    auto s = d->shared_units.find(unit);
    if (s != d->shared_units.end()) {
      su = &s->second;
    } else if (pass == 0) {
      continue;
    } else if (CUresult r = share_unit_locked(d, unit, unit_size, &su)) {
      return r;
    }
    if (!a.exported) {
      write_slot(*su, a.base - unit, a.buffer_id);
      a.exported = true;
    }
    // The same allocation always gives the same handle ("may be called
    // multiple times on an allocation without adverse effects"); a new
    // allocation at the same address a different one ("will return a unique
    // handle for the new memory"): its buffer id differs.
    Wire w{};
    std::memcpy(w.magic, kMagic, sizeof kMagic);
    w.pid = static_cast<std::uint32_t>(getpid());
    w.fd = su->fd;
    w.inode = su->inode;
    w.unit_size = su->size;
    w.offset = a.base - unit;
    w.size = a.requested;
    w.buffer_id = a.buffer_id;
    w.device = d->ordinal;
    w.check = checksum(w);
    std::memcpy(out->reserved, &w, sizeof w);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;  // not reached
}

CUresult open_handle(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned int flags) {
  if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  // "Flags ... Must be specified as CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS";
  // 0 is accepted as well (every simulated device can access every other).
  if (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) return CUDA_ERROR_INVALID_VALUE;
  Wire w{};
  std::memcpy(&w, handle.reserved, sizeof w);
  // Not a handle (garbage, or zeros): CUDA_ERROR_INVALID_VALUE, what
  // cudaIpcOpenMemHandle says of a handle never made ("invalid argument",
  // NVIDIA/nccl#842).
  if (std::memcmp(w.magic, kMagic, sizeof kMagic) != 0 || w.check != checksum(w) ||
      w.unit_size == 0 || w.unit_size % kPageSize != 0 || w.offset % kAllocAlign != 0 ||
      w.size == 0 || w.offset >= w.unit_size || w.size > w.unit_size - w.offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A handle cannot be opened in the process that exported it: the driver
  // answers CUDA_ERROR_INVALID_CONTEXT ("cuIpcOpenMemHandle() failed:
  // invalid device context", openucx/ucx#11603 and #11226; through the
  // runtime cudaErrorDeviceUninitialized (201), NVIDIA/DALI#4817).
  if (w.pid == static_cast<std::uint32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  // The mapping goes into the importing context's device space.
  Device* d = c->dev;
  const auto key = std::make_tuple(w.pid, w.inode, w.buffer_id);
  // "If the memory handle has already been opened by the current context,
  // the reference count on the handle is incremented by 1 and the existing
  // device pointer is returned." Another context of the same device may not
  // open it ("may only be opened by one CUcontext per CUdevice per other
  // process"): refused with CUDA_ERROR_INVALID_CONTEXT (the code is not
  // documented and was not checked on a real driver).
  auto reopen = [&](std::uintptr_t ptr) {
    Allocation& a = d->allocs.at(ptr);
    if (a.ctx != c) return CUDA_ERROR_INVALID_CONTEXT;
    ++a.ipc_refs;
    *pdptr = ptr;
    return CUDA_SUCCESS;
  };
  {
    std::lock_guard<std::mutex> lk(d->mu);
    auto it = d->imports.find(key);
    if (it != d->imports.end()) return reopen(it->second);
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%u/fd/%d", w.pid, w.fd);
  // The exporter has exited, freed the unit (its descriptor is closed, or
  // the number now names another file), or freed the allocation (its slot
  // is 0): the handle names no memory any more.
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  struct stat st{};
  std::uint64_t live = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_ino) != w.inode ||
      static_cast<std::uint64_t>(st.st_size) != file_size(w.unit_size) ||
      pread(fd, &live, sizeof live, slot_of(w.unit_size, w.offset)) != static_cast<ssize_t>(sizeof live) ||
      live != w.buffer_id) {
    close(fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lk(d->mu);
  auto it = d->imports.find(key);
  if (it != d->imports.end()) {  // another thread opened it meanwhile
    close(fd);
    return reopen(it->second);
  }
  const std::uintptr_t va = d->space.reserve(w.unit_size);
  if (!va) {
    close(fd);
    return CUDA_ERROR_MAP_FAILED;
  }
  void* m = mmap(reinterpret_cast<void*>(va), w.unit_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 fd, 0);
  close(fd);  // the mapping keeps the memfd
  if (m == MAP_FAILED) {
    make_private(va, w.unit_size);
    d->space.unreserve(va, w.unit_size);
    return CUDA_ERROR_MAP_FAILED;
  }
  madvise(m, w.unit_size, MADV_DONTFORK);
  const std::uintptr_t base = va + w.offset;
  Allocation& a = d->allocs[base];
  a = Allocation{};
  a.base = base;
  a.size = (w.size + kAllocAlign - 1) / kAllocAlign * kAllocAlign;
  a.requested = w.size;
  a.ctx = c;
  a.kind = AllocKind::Ipc;
  a.buffer_id = G().next_buffer_id.fetch_add(1, std::memory_order_relaxed);
  a.map_base = va;
  a.map_size = w.unit_size;
  a.ipc_refs = 1;
  a.ipc_key = key;
  d->imports[key] = base;
  // The exporter's allocation base: "the opening process gets the base",
  // which is where PyTorch adds the offset it was sent.
  *pdptr = base;
  return CUDA_SUCCESS;
}

}  // namespace

void ipc_forget_export_locked(Device* d, const Allocation& a) {
  std::uintptr_t unit = 0;
  std::size_t size = 0;
  unit_of(a, &unit, &size);
  auto s = d->shared_units.find(unit);
  if (s != d->shared_units.end()) write_slot(s->second, a.base - unit, 0);
}

void ipc_unshare_unit_locked(Device* d, std::uintptr_t unit) {
  auto s = d->shared_units.find(unit);
  if (s == d->shared_units.end()) return;
  make_private(unit, s->second.size);
  close(s->second.fd);
  d->shared_units.erase(s);
}

void ipc_unmap_import_locked(Device* d, const Allocation& a) {
  make_private(a.map_base, a.map_size);
  d->space.unreserve(a.map_base, a.map_size);
  d->imports.erase(a.ipc_key);
}

}  // namespace sim

using namespace sim;

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  return get_handle(pHandle, dptr);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_handle(pdptr, handle, Flags);
}

// The ABI of CUDA 4.1 (PFN_cuIpcOpenMemHandle_v4010), same signature; the
// sim gives it the documented behaviour of today's (_v2, CUDA 11.0). Drivers
// before CUDA 11.2 refused a second open of a handle instead of counting it
// (triton-inference-server/python_backend#101); not modelled.
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_handle(pdptr, handle, Flags);
}

// "Decrements the reference count of the memory returned by
// cuIpcOpenMemHandle by 1. When the reference count reaches 0, this API
// unmaps the memory. The original allocation in the exporting process as
// well as imported mappings in other processes will be unaffected."
CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  Context* c = nullptr;
  // No context current: CUDA_ERROR_INVALID_CONTEXT (openucx/ucx#10618 saw
  // it from cuIpcCloseMemHandle on a thread without one).
  if (CUresult r = current_ctx(&c)) return r;
  const std::uintptr_t p = dptr;
  Device* d = p ? device_containing(p) : nullptr;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  Context* owner = nullptr;
  {
    std::lock_guard<std::mutex> lk(d->mu);
    auto it = d->allocs.find(p);
    // Only the pointer cuIpcOpenMemHandle returned (not one inside it, not
    // cuMemAlloc memory).
    if (it == d->allocs.end() || it->second.kind != AllocKind::Ipc) return CUDA_ERROR_INVALID_VALUE;
    if (it->second.ipc_refs > 1) {
      --it->second.ipc_refs;
      return CUDA_SUCCESS;
    }
    owner = it->second.ctx;
  }
  // Work already queued on the mapping completes before it goes, as with
  // cuMemFree (the sim's choice; not documented).
  sync_context(owner);
  std::lock_guard<std::mutex> lk(d->mu);
  auto it = d->allocs.find(p);
  if (it == d->allocs.end() || it->second.kind != AllocKind::Ipc) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.ipc_refs == 0) {
    ipc_unmap_import_locked(d, it->second);
    d->allocs.erase(it);
  }
  return CUDA_SUCCESS;
}
