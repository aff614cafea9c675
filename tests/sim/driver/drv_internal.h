// Internal model of the simulated driver (libcuda.so.1).
//
// Everything lives on host memory. Each device has one big virtual
// reservation (MAP_NORESERVE) of device address space, several times its
// capacity, so a pointer identifies its device and an 80 GiB device costs no
// RAM until it is written. Physical memory is counted separately, in 2 MiB
// pages, as a real GPU's driver does (see DeviceSpace below). Streams are
// worker threads that run their queue in order. Global objects are created
// with `new` and never destroyed: worker threads may still run while the
// process exits, and they must not meet destroyed globals.
#pragma once

// The toolkit's own sources define this to see every versioned ABI
// (cuMemAlloc and cuMemAlloc_v2, cuStreamSynchronize and _ptsz, ...).
#define __CUDA_API_VERSION_INTERNAL 1
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaProfiler.h>  // cuProfilerStart/Stop (drv_host_peer.cpp)
#pragma GCC visibility pop

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>
#include <type_traits>
#include <vector>

#include "../common/sim_config.h"
#include "../include/simcuda_counters.h"

namespace sim {

constexpr int kDriverVersion = 13000;  // what cuDriverGetVersion reports
constexpr std::size_t kAllocAlign = 512;
constexpr std::size_t kVmmGranularity = std::size_t{2} << 20;
// Physical device memory is handed out in 2 MiB pages, and an allocation
// larger than 1 MiB takes whole pages of its own (its size rounded up to
// 2 MiB, its address 2 MiB-aligned); smaller ones are packed together into
// shared pages. PyTorch's caching allocator was rebuilt around this
// (pytorch/pytorch#17120: since Pascal "the page size increased from 1MB to
// 2MB and allocations larger than 1MB are now always page-aligned", "the
// remaining memory in a page could only be filled by small cudaMalloc
// calls", and "nvidia-smi counts a partially used page as full"); measured
// with CUDA 13.1 on an RTX 3090 (JustVugg/colibri#1244), 1 MiB costs 1 MiB,
// 1 MiB + 1 B and 1.5 MiB cost 2 MiB, 2 MiB + 1 B costs 4 MiB. The same
// 2 MiB is the VMM granularity (cuMemGetAllocationGranularity).
constexpr std::size_t kPageSize = kVmmGranularity;
constexpr std::size_t kSharedPageMax = std::size_t{1} << 20;

struct Context;
struct Stream;
struct Pool;
struct Capture;    // drv_graph.h
struct GraphNode;  // drv_graph.h

// Best-fit, address-ordered, coalescing allocator of address ranges. With a
// `boundary`, free ranges never merge across a multiple of it (the holes of
// one shared page stay inside that page). Not thread-safe: the owning
// Device's mutex guards it.
class RangeAllocator {
 public:
  // Returns 0 when no free range is large enough.
  std::uintptr_t alloc(std::size_t size);
  // Gives [p, p+size) back, merging with free neighbours.
  void release(std::uintptr_t p, std::size_t size, std::size_t boundary = 0);
  // Takes every free range inside [p, p+size) out.
  void remove_within(std::uintptr_t p, std::size_t size);

 private:
  void insert_free(std::uintptr_t p, std::size_t n);
  void erase_free(std::map<std::uintptr_t, std::size_t>::iterator it);
  std::map<std::uintptr_t, std::size_t> by_addr_;
  std::set<std::pair<std::size_t, std::uintptr_t>> by_size_;
};

// One reservation of device address space and the allocations carved from
// it. A real GPU maps physical pages anywhere behind its virtual addresses,
// so physical memory does not fragment by address: the NVIDIA stream-ordered
// allocator blog (quoted in pytorch/pytorch#110194) says the driver
// "defragments the pool by remapping unused memory in the pool to a
// contiguous portion of the GPU's virtual address space". Here the address
// space is plentiful (a multiple of the capacity) and only pages count
// against capacity: a large allocation needs enough free pages, not a
// contiguous hole. Pages are still a unit, though: a page holding any live
// small allocation is in use, so freeing some of the small allocations of a
// page frees nothing, and memory fragmented into partly used pages cannot
// serve a large request.
class DeviceSpace {
 public:
  bool init(std::size_t size);
  bool ready() const { return base_ != 0; }
  bool contains(std::uintptr_t p) const { return p >= base_ && p < base_ + size_; }
  // Allocates `size` bytes (a multiple of kAllocAlign) with at most
  // `free_pages` new physical pages; adds the pages it took to *pages_taken.
  // Returns 0 when the pages run out.
  std::uintptr_t alloc(std::size_t size, std::size_t free_pages, std::size_t* pages_taken);
  // Frees what alloc returned; returns the number of pages given back.
  // With keep_hole, a small allocation's bytes are not handed out again while
  // its shared page lives (memory another process may still map, see
  // drv_ipc.cpp); the page is still freed with its last allocation.
  std::size_t release(std::uintptr_t p, std::size_t size, bool keep_hole = false);
  // Address space without physical pages (an imported IPC mapping):
  // `bytes` is a multiple of kPageSize; 0 when the space is exhausted.
  std::uintptr_t reserve(std::size_t bytes) { return pages_.alloc(bytes); }
  void unreserve(std::uintptr_t p, std::size_t bytes) { pages_.release(p, bytes); }
  // Physical pages an allocation of `size` bytes takes of its own (0 when
  // it goes into a shared page).
  static std::size_t own_pages(std::size_t size) {
    return size > kSharedPageMax ? (size + kPageSize - 1) / kPageSize : 0;
  }

 private:
  std::uintptr_t base_ = 0;
  std::size_t size_ = 0;
  RangeAllocator pages_;   // unused virtual pages
  RangeAllocator shared_;  // free bytes inside shared pages
  std::unordered_map<std::uintptr_t, std::size_t> shared_used_;  // shared page -> live bytes
};

// Ipc: another process's allocation mapped here by cuIpcOpenMemHandle.
// Module: a module global's memory (drv_module.cpp), the driver's own, not
// the program's: cuMemFree refuses it and cuModuleUnload frees it.
// Graph: the address range of a graph allocation node (drv_graph_mem.cpp),
// owned by its graph, freed only with the node.
enum class AllocKind { Device, Pitch, Managed, Async, Ipc, Module, Graph };

struct Allocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;       // size rounded to kAllocAlign (what the pool counts as used)
  std::size_t requested = 0;  // what the caller asked for
  Context* ctx = nullptr;
  AllocKind kind = AllocKind::Device;
  Pool* pool = nullptr;       // for stream-ordered allocations
  bool free_pending = false;  // a cuMemFreeAsync is queued for it
  bool exported = false;      // cuIpcGetMemHandle gave out a handle for it
  // CU_POINTER_ATTRIBUTE_BUFFER_ID: "unique ID over a process lifetime".
  std::uint64_t buffer_id = 0;
  // Kind Ipc only: the whole mapped unit, the opens not yet closed, and the
  // handle's identity (exporter pid, memfd inode, exporter's buffer id).
  std::uintptr_t map_base = 0;
  std::size_t map_size = 0;
  int ipc_refs = 0;
  std::tuple<std::uint32_t, std::uint64_t, std::uint64_t> ipc_key{};
};

// A unit of a device's space (one allocation's own pages, or one shared
// page) that was exported with cuIpcGetMemHandle: it is backed by a memfd,
// MAP_SHARED, that other processes map (drv_ipc.cpp).
struct SharedUnit {
  int fd = -1;
  std::size_t size = 0;      // bytes mapped (a multiple of kPageSize)
  std::uint64_t inode = 0;   // identity of the memfd, written into handles
};

struct Device {
  int ordinal = 0;
  // Its index among all simulated devices, before CUDA_VISIBLE_DEVICES
  // picked and ordered them (names the device: UUID, PCI bus id).
  int physical = 0;
  std::size_t capacity = 0;
  std::mutex mu;  // guards space, allocs, used
  DeviceSpace space;
  std::map<std::uintptr_t, Allocation> allocs;
  std::map<std::uintptr_t, SharedUnit> shared_units;  // by unit base (exporter side)
  // Handles opened here: (exporter pid, memfd inode, exporter buffer id) ->
  // the pointer cuIpcOpenMemHandle returned (importer side).
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>, std::uintptr_t> imports;
  // Physical memory in use: pages of allocations (space and low) + VMM
  // physical memory (cuMemCreate); always a multiple of kPageSize.
  std::size_t used = 0;
  std::size_t free_pages() const { return capacity > used ? (capacity - used) / kPageSize : 0; }
  Context* primary = nullptr;
  int primary_refcount = 0;     // guarded by g_mu
  unsigned primary_flags = 0;   // guarded by g_mu
  Pool* default_pool = nullptr;
  Pool* current_pool = nullptr; // guarded by g_mu
};

struct Context {
  Device* dev = nullptr;
  bool is_primary = false;
  unsigned flags = 0;
  std::atomic<std::uint64_t> generation{1};  // bumped on reset/destroy
  // Whether Globals::contexts holds it (set and cleared with it, under
  // Globals::mu): the current context's check reads this without the global
  // lock, as a real driver's entry points take none (a context left current
  // on a thread is never freed, see Globals).
  std::atomic<bool> registered{false};
  // A device fault (drv_copy.cpp): CUDA_ERROR_ILLEGAL_ADDRESS once a queued
  // operation of this context touched memory no longer accessible, else
  // CUDA_SUCCESS. Sticky: every later call that takes the context returns
  // it, until the context is reset or destroyed (see current_ctx).
  std::atomic<CUresult> fault{CUDA_SUCCESS};
  std::mutex mu;  // guards streams, legacy, and the order of enqueues
  std::condition_variable cv;  // signalled when a worker leaves `streams`
  std::set<Stream*> streams;   // every live worker of this context
  std::shared_ptr<Stream> legacy;
  // drv_contexts.cpp: cuCtxGetId's id (a new one for each incarnation of a
  // primary context) and what cuCtxSetLimit / cuCtxSetCacheConfig set;
  // reset with the context. Guarded by settings_mu.
  std::mutex settings_mu;
  unsigned long long id = 0;
  std::size_t limits[CU_LIMIT_MAX] = {};
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
};
// Gives ctx a new id and the default limits and cache preference.
void reset_context_settings(Context* ctx);

struct Op {
  std::function<void()> fn;
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> deps;
  bool pays_latency = false;  // "kernel-like" work: memset, memcpy, host fn
  // Bookkeeping only (an event record, a wait): on an idle stream whose
  // dependencies are met it completes at once, in the enqueuing call, as a
  // GPU completes such a command on an idle stream within microseconds;
  // waking the stream's worker thread for it would cost the host tens of
  // microseconds on a two-core machine, which no GPU charges, and would
  // leave an event recorded on an idle stream pending for a moment that
  // depends on the scheduler.
  bool bookkeeping = false;
};

struct Stream : std::enable_shared_from_this<Stream> {
  Context* ctx = nullptr;
  std::uint64_t ctx_generation = 0;
  unsigned flags = 0;  // CU_STREAM_NON_BLOCKING or 0
  int priority = 0;
  bool is_legacy = false;
  bool is_per_thread = false;
  unsigned long long id = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op> queue;
  std::uint64_t submitted = 0;  // guarded by mu
  std::uint64_t completed = 0;  // guarded by mu
  bool stopping = false;
  // Stream capture (drv_capture.cpp), guarded by its capture_mu: the
  // sequence this stream captures into, and the nodes its next captured
  // operation depends on.
  std::shared_ptr<Capture> capture;
  std::vector<GraphNode*> capture_deps;

  bool blocking() const { return !is_legacy && !(flags & CU_STREAM_NON_BLOCKING); }
  void wait_for(std::uint64_t seq);
  bool is_done(std::uint64_t seq);
};

struct Event {
  unsigned flags = 0;
  Context* ctx = nullptr;
  std::mutex mu;
  std::shared_ptr<Stream> stream;  // stream of the latest record
  std::uint64_t seq = 0;           // op sequence of the latest record
  std::uint64_t gen = 0;           // bumped by each record
  bool recorded = false;
  bool done_stamp = false;
  double stamp_ms = 0;             // time the record op ran
  // Last recorded inside a capture sequence (drv_capture.cpp, under its
  // lock): that sequence and the nodes a wait on the event joins.
  std::shared_ptr<Capture> capture;
  std::vector<GraphNode*> capture_nodes;
};

struct Pool {
  Device* dev = nullptr;
  bool is_default = false;
  std::atomic<std::uint64_t> release_threshold{0};
  std::atomic<std::uint64_t> used_current{0};
  std::atomic<std::uint64_t> used_high{0};
};

// ---- global state (drv_state.cpp) -----------------------------------------
struct Globals {
  std::mutex mu;  // g_mu: init, registries, primary refcounts
  std::atomic<bool> initialized{false};  // written under mu; read without it by check_init
  std::vector<Device*> devices;
  std::set<Context*> contexts;
  std::unordered_map<void*, std::shared_ptr<Stream>> streams;
  std::unordered_map<void*, std::shared_ptr<Event>> events;
  std::set<Pool*> pools;
  // Destroyed contexts and pools, and devices of a failed cuInit, are kept
  // here and never freed: a stale handle must stay invalid instead of naming
  // a later object at the same address, and stream-ordered allocations still
  // outstanding point at their pool ("the pool is destroyed once they are
  // freed", cuMemPoolDestroy). Held, so that LeakSanitizer sees them as such.
  std::vector<Context*> retired_contexts;
  std::vector<Pool*> retired_pools;
  std::vector<Device*> retired_devices;
  std::atomic<unsigned long long> next_stream_id{100};
  // CU_POINTER_ATTRIBUTE_BUFFER_ID of the next allocation of any kind.
  std::atomic<std::uint64_t> next_buffer_id{1};
};
Globals& G();

// Returns CUDA_ERROR_NOT_INITIALIZED before cuInit (and in a forked child
// of an initialised process).
CUresult check_init();
// Current context of the calling thread, or an error: also the context's
// sticky device fault, as every call that takes the context returns it.
CUresult current_ctx(Context** out);
// The same without the sticky fault, for the calls that only name the
// context (cuCtxGetDevice): the runtime finds its device, and so the
// context to reset, through them.
CUresult current_ctx_any(Context** out);
// c's sticky device fault (CUDA_SUCCESS when none).
inline CUresult ctx_fault(const Context* c) { return c->fault.load(std::memory_order_acquire); }
// A queued operation of ctx touched memory that is no longer accessible.
void raise_device_fault(Context* ctx);
Device* device_at(int ordinal);  // nullptr if out of range (after init)
// The UUID of the simulated device with that physical index.
void device_uuid(int physical, char bytes[16]);
double now_ms();

// Thread-local context stack (cuCtxPush/Pop, cuCtxSetCurrent replaces top).
// Trivially destructible on purpose: exit() runs thread_local destructors
// before atexit handlers and static destructors, and a program may still
// free device memory there, as real CUDA allows (AddressSanitizer found a
// std::vector here used after its destruction: exit_paths atexit-after).
// Its depth is bounded; a push past it fails with CUDA_ERROR_OUT_OF_MEMORY.
class ContextStack {
 public:
  static constexpr std::size_t kMaxDepth = 256;
  bool empty() const { return depth_ == 0; }
  bool full() const { return depth_ == kMaxDepth; }
  Context*& back() { return items_[depth_ - 1]; }
  [[nodiscard]] bool push_back(Context* c) {
    if (depth_ == kMaxDepth) return false;
    items_[depth_++] = c;
    return true;
  }
  void pop_back() { --depth_; }

 private:
  Context* items_[kMaxDepth];
  std::size_t depth_;
};
static_assert(std::is_trivially_destructible_v<ContextStack>);
ContextStack& ctx_stack();

// Frees everything owned by ctx: drains and stops its streams, frees its
// allocations, events, VMM handles and pinned host memory.
void destroy_context_resources(Context* ctx);
Context* new_context(Device* dev, bool primary, unsigned flags);

// ---- streams (drv_streams.cpp) ---------------------------------------------
// Resolves a stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a
// created stream); `per_thread` is true for the _ptsz/_ptds entry points.
CUresult resolve_stream(CUstream h, bool per_thread, std::shared_ptr<Stream>* out);
// Enqueues `op` on `s`, adding the legacy-default-stream dependencies. With
// `behind`, says whether the op must wait for earlier work (its stream's or
// another's through a dependency).
std::uint64_t enqueue(const std::shared_ptr<Stream>& s, Op op, bool* behind = nullptr);
// Runs fn on the stream and waits for it (synchronous copies and sets);
// then the stream's context's fault, if it has one.
CUresult run_sync(const std::shared_ptr<Stream>& s, std::function<void()> fn, bool pays_latency);
// Waits for every stream of ctx; then ctx's fault, if it has one. A host
// wait (counted in simcuda_counters' wait_calls).
CUresult sync_context(Context* ctx);
// Stops all streams of ctx after they drain (used by reset/destroy).
void stop_context_streams(Context* ctx);
void drop_context_events(Context* ctx);

// ---- costs and counters (drv_costs.cpp) ---------------------------------------
// The calls the cost table (SIMCUDA_COSTS) prices, in the order of
// kCostNames in drv_costs.cpp.
enum class Cost {
  AddressReserve, AddressFree, Create, Map, SetAccess, Unmap, Release,
  Alloc, Free, EventRecord, EventQuery, StreamWaitEvent, EventCreate, EventDestroy,
  CtxSynchronize, kCount
};
// Reads SIMCUDA_COSTS (once; cuInit calls it so that a bad value warns there).
void load_costs();
// Charges the calling thread the table's cost of `c` on `bytes` (per call +
// per 2 MiB granule), as host time; no lock may be held.
void charge(Cost c, std::size_t bytes = 0);
// Charges `c` when the call succeeded (r == CUDA_SUCCESS); returns r. Called
// with the call's result, after its locks are released.
inline CUresult charged(Cost c, std::size_t bytes, CUresult r) {
  if (r == CUDA_SUCCESS) charge(c, bytes);
  return r;
}
// The fields of SimcudaCounters (include/simcuda_counters.h), by name.
enum class Counter {
#define SIM_COUNTER_ENUM(field, what) field,
  SIMCUDA_COUNTER_FIELDS(SIM_COUNTER_ENUM)
#undef SIM_COUNTER_ENUM
  kCount
};
void count(Counter c, std::uint64_t n = 1);
// One host wait for device work: counts it (wait_calls) and, when work was
// outstanding, times it (blocked_waits, blocked_us) until destroyed.
class HostWait {
 public:
  explicit HostWait(bool outstanding);
  ~HostWait();
  HostWait(const HostWait&) = delete;
  HostWait& operator=(const HostWait&) = delete;

 private:
  bool outstanding_;
  double t0_ms_ = 0;
};

// ---- memory (drv_memory.cpp) -----------------------------------------------
struct PtrInfo {
  bool found = false;
  int device = -1;
  std::uintptr_t base = 0;
  std::size_t size = 0;      // accessible bytes from base
  Context* ctx = nullptr;
  bool host = false;         // pinned host allocation
  bool managed = false;      // cuMemAllocManaged
  bool vmm = false;          // a cuMemMap mapping (or, with !found, a reservation)
  AllocKind kind = AllocKind::Device;  // for device-space allocations
  Pool* pool = nullptr;
  std::uint64_t buffer_id = 0;
  bool read_only = false;    // a VMM mapping cuMemSetAccess made readable only
  // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR / RANGE_SIZE: the allocation, or
  // for VMM the cuMemAddressReserve range ("the mappable address range").
  std::uintptr_t range_base = 0;
  std::size_t range_size = 0;
  bool mapped = false;       // CU_POINTER_ATTRIBUTE_MAPPED
};
// Looks up any simulated allocation (arena, low arena, pinned host, VMM
// mapping) containing [p, p+len). len 0 checks just p.
PtrInfo lookup_range(std::uintptr_t p, std::size_t len);
// What the pointer attribute queries say of p: lookup_range(p, 0), or for a
// VMM address whose mapping is not accessible or that is only reserved, the
// reservation (found false for a reserved but unmapped address, vmm true).
PtrInfo describe_pointer(std::uintptr_t p);

// Device memory is plain host memory that stream workers read and write
// with memmove/memset. Remapping a live range to a shared memfd (the first
// cuIpcGetMemHandle of a unit), unmapping it (cuMemUnmap) or revoking its
// access (cuMemSetAccess) must not race with them: workers hold this shared
// while they check that device memory is still accessible and touch it,
// those calls hold it exclusively. Taken before any other sim lock.
std::shared_mutex& remap_lock();

// ---- ipc (drv_ipc.cpp) -------------------------------------------------------
// Called with d->mu held by the code that frees allocations: an exported
// allocation's slot is cleared and, when its unit goes, the unit is turned
// back into private memory (importers keep the memfd they mapped); an
// imported mapping is unmapped.
void ipc_forget_export_locked(Device* d, const Allocation& a);
void ipc_unshare_unit_locked(Device* d, std::uintptr_t unit);
void ipc_unmap_import_locked(Device* d, const Allocation& a);
CUresult alloc_device(Context* ctx, std::size_t size, AllocKind kind, Pool* pool, std::uintptr_t* out);
// Marks the allocation starting at p as having a stream-ordered free queued;
// fails for unknown pointers and for a second free.
CUresult mark_free_pending(std::uintptr_t p);
// Frees a live allocation starting at p (no synchronisation).
CUresult free_device(std::uintptr_t p, bool async_pending_ok);
void free_context_allocations(Context* ctx);
void free_context_host(Context* ctx);

// Page-locked host memory the driver knows of: a cuMemHostAlloc allocation
// (drv_memory.cpp) or a cuMemHostRegister registration (drv_host_peer.cpp),
// each kept in its own table by base address.
struct PinnedHost {
  std::size_t size;
  unsigned flags;
  Context* ctx;
  std::uint64_t buffer_id;
};
// What lookup_range says of an address inside the pinned memory at base.
PtrInfo pinned_host_info(std::uintptr_t base, const PinnedHost& pinned);

// ---- host registration (drv_host_peer.cpp) --------------------------------------
// Fills info (host = true) when [p, p+len) lies in memory registered with
// cuMemHostRegister; false otherwise.
bool registered_lookup(std::uintptr_t p, std::size_t len, PtrInfo* info);
// Unregisters what ctx registered (context reset/destroy).
void drop_context_registrations(Context* ctx);

// ---- vmm (drv_vmm.cpp) -----------------------------------------------------
// Fills info for an accessible mapping containing [p, p+len); with
// for_attributes, also for a mapped but inaccessible address (found) and a
// reserved, unmapped one (found false, vmm true). False if p is in no
// reservation.
bool vmm_lookup(std::uintptr_t p, std::size_t len, PtrInfo* info, bool for_attributes = false);

// ---- modules and launches (drv_module.cpp, drv_launch.cpp) -----------------
// What a launch needs to know of a CUfunction (or a CUkernel cast to one,
// resolved in `ctx_hint`'s context, or the current one when null).
struct LaunchInfo {
  Context* ctx = nullptr;          // the context of the function's module
  int max_threads_per_block = 0;   // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
  int num_regs = 0;                // CU_FUNC_ATTRIBUTE_NUM_REGS
  std::size_t static_shared = 0;   // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
  int max_dynamic_shared = 0;      // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};
CUresult function_launch_info(CUfunction f, Context* ctx_hint, LaunchInfo* out);
// Blocks of `threads` threads with `dyn_shared` bytes each that fit on one
// SM (the occupancy model of drv_module.cpp, also used by cooperative launches).
int active_blocks_per_sm(const LaunchInfo& f, int threads, std::size_t dyn_shared);
// Unloads the modules of ctx and frees their globals (context destruction).
void drop_context_modules(Context* ctx);

// ---- fork --------------------------------------------------------------------
extern std::atomic<bool> g_forked_child;

}  // namespace sim

// Entry points (real names, from cuda.h) are defined across drv_*.cpp.
