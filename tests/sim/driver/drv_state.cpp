// Driver initialisation, devices, contexts (primary and created), fork.
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "drv_graph.h"

namespace sim {

std::atomic<bool> g_forked_child{false};

Globals& G() {
  static Globals* g = new Globals;  // never destroyed, see drv_internal.h
  return *g;
}

ContextStack& ctx_stack() {
  static thread_local ContextStack stack;  // zero-initialised: empty
  return stack;
}

double now_ms() {
  using namespace std::chrono;
  static const steady_clock::time_point t0 = steady_clock::now();
  return duration<double, std::milli>(steady_clock::now() - t0).count();
}

CUresult check_init() {
  // A forked child does not inherit the parent's worker threads; like real
  // CUDA it must not use the parent's CUDA state (it gets an init error).
  if (g_forked_child.load(std::memory_order_relaxed)) return CUDA_ERROR_NOT_INITIALIZED;
  return G().initialized.load(std::memory_order_acquire) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

Device* device_at(int ordinal) {
  auto& g = G();
  if (ordinal < 0 || ordinal >= static_cast<int>(g.devices.size())) return nullptr;
  return g.devices[ordinal];
}

Context* new_context(Device* dev, bool primary, unsigned flags) {
  auto* c = new Context;
  c->dev = dev;
  c->is_primary = primary;
  c->flags = flags;
  reset_context_settings(c);
  return c;
}

CUresult current_ctx(Context** out) {
  Context* c = nullptr;
  if (CUresult r = current_ctx_any(&c)) return r;
  // A device fault is sticky: "This leaves the process in an inconsistent
  // state and any further CUDA work will return the same error"
  // (CUDA_ERROR_ILLEGAL_ADDRESS, cuda.h). cudaGetLastError does not clear it
  // either (NVIDIA/nvbench#88); what does is a new context: "The only fix is
  // a hard device reset and construction of a new context"
  // (JuliaGPU/CUDAnative.jl#93), i.e. cuDevicePrimaryCtxReset /
  // cudaDeviceReset, or destroying a created context
  // (destroy_context_resources clears it).
  if (CUresult f = ctx_fault(c)) return f;
  *out = c;
  return CUDA_SUCCESS;
}

void raise_device_fault(Context* ctx) {
  count(Counter::device_faults);
  CUresult none = CUDA_SUCCESS;
  ctx->fault.compare_exchange_strong(none, CUDA_ERROR_ILLEGAL_ADDRESS, std::memory_order_acq_rel);
}

CUresult current_ctx_any(Context** out) {
  if (CUresult r = check_init()) return r;
  auto& st = ctx_stack();
  if (st.empty() || !st.back()) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = st.back();
  if (!c->registered.load(std::memory_order_acquire)) {
    // A context destroyed while current here stays current, and "attempting
    // to access ctx from those threads will result in the error
    // CUDA_ERROR_CONTEXT_IS_DESTROYED" (cuCtxDestroy, CUDA 13 cuda.h). A
    // primary context released by its last retainer while current here is
    // inactive: CUDA_ERROR_INVALID_CONTEXT (not documented; sim_driver_probe
    // asks the driver).
    return c->is_primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  *out = c;
  return CUDA_SUCCESS;
}

void destroy_context_resources(Context* ctx) {
  // Bumped first so per-thread streams made from here on are already "old"
  // and get replaced on their next use.
  ctx->generation.fetch_add(1);
  sync_context(ctx);
  stop_context_streams(ctx);
  drop_context_events(ctx);
  // Stream-ordered and VMM allocations are not associated with a context:
  // "cuCtxDestroy() will not destroy memory allocations by cuMemCreate(),
  // cuMemAllocAsync() and cuMemAllocFromPoolAsync()", and cudaDeviceReset
  // leaves those of cudaMallocAsync / cudaMallocFromPoolAsync (CUDA 13).
  free_context_allocations(ctx);
  free_context_host(ctx);
  // A primary context comes back with default settings and a new id
  // ("Destroy all allocations and reset all state", cuDevicePrimaryCtxReset).
  reset_context_settings(ctx);
  // Its streams are stopped: no operation of the old context can fault now.
  ctx->fault.store(CUDA_SUCCESS, std::memory_order_release);
  ctx->generation.fetch_add(1);
}

namespace {

void atfork_child() {
  // Only this thread survives. The state of an initialised parent (streams,
  // worker threads, locks they held) is unusable; poison it so calls fail
  // with an init error instead of deadlocking. An uninitialised parent's
  // child may still initialise normally.
  auto& g = G();
  new (&g.mu) std::mutex;
  if (g.initialized) g_forked_child.store(true);
}

__attribute__((constructor)) void register_atfork() {
  pthread_atfork(nullptr, nullptr, atfork_child);
}

// Device address space is not memory (see DeviceSpace): the driver maps
// physical pages wherever in its virtual address space it likes, so a large
// allocation should not fail for want of addresses while pages are free.
// The sim reserves four times the capacity, so address-space fragmentation
// practically never decides, or less where the host's address space is
// short (64 TiB devices); MAP_NORESERVE keeps it free of RAM and swap.
bool init_address_space(Device* d) {
  for (std::size_t factor : {4, 2, 1}) {
    if (d->capacity <= SIZE_MAX / factor && d->space.init(d->capacity * factor)) return true;
  }
  std::fprintf(stderr, "simcuda: cannot reserve %zu bytes of address space for a device\n", d->capacity);
  return false;
}

CUresult check_device(CUdevice dev, Device** out) {
  if (CUresult r = check_init()) return r;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *out = d;
  return CUDA_SUCCESS;
}

bool valid_ctx_flags(unsigned flags) {
  // CU_CTX_FLAGS_MASK covers every flag of cuCtxCreate; "Only one of the
  // scheduling flags can be set" (cuCtxCreate, cuDevicePrimaryCtxSetFlags).
  const unsigned sched = flags & CU_CTX_SCHED_MASK;
  return (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) == 0 && (sched & (sched - 1)) == 0;
}

CUresult create_ctx(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  Device* d = nullptr;
  if (CUresult r = check_device(dev, &d)) return r;
  // "Context creation will fail with CUDA_ERROR_INVALID_VALUE if invalid
  //  parameter was passed" (cuCtxCreate).
  if (!valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (ctx_stack().full()) return CUDA_ERROR_OUT_OF_MEMORY;  // checked before anything is made
  Context* c = new_context(d, false, flags);
  {
    std::lock_guard<std::mutex> lk(G().mu);
    G().contexts.insert(c);
    c->registered.store(true, std::memory_order_release);
  }
  // cuCtxCreate pushes the new context onto the caller's stack.
  (void)ctx_stack().push_back(c);  // not full: checked above
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult destroy_ctx(CUcontext ctx) {
  if (CUresult r = check_init()) return r;
  Context* c = reinterpret_cast<Context*>(ctx);
  {
    std::lock_guard<std::mutex> lk(G().mu);
    if (!c || !G().contexts.count(c) || c->is_primary) return CUDA_ERROR_INVALID_CONTEXT;
  }
  destroy_context_resources(c);
  {
    std::lock_guard<std::mutex> lk(G().mu);
    G().contexts.erase(c);
    c->registered.store(false, std::memory_order_release);
    G().retired_contexts.push_back(c);  // never freed: see Globals
  }
  // "If the context is current to the calling thread then it is also popped."
  auto& st = ctx_stack();
  if (!st.empty() && st.back() == c) st.pop_back();
  return CUDA_SUCCESS;
}

CUresult primary_release(CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = check_device(dev, &d)) return r;
  bool destroy = false;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    if (d->primary_refcount <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--d->primary_refcount == 0) destroy = true;
  }
  if (destroy) {
    destroy_context_resources(d->primary);
    std::lock_guard<std::mutex> lk(G().mu);
    if (d->primary_refcount == 0) {
      G().contexts.erase(d->primary);
      d->primary->registered.store(false, std::memory_order_release);
    }
  }
  return CUDA_SUCCESS;
}

CUresult primary_reset(CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = check_device(dev, &d)) return r;
  // "Destroy all allocations and reset all state on the primary context.
  //  Resetting the primary context does not release it" (cuDevicePrimaryCtxReset).
  // Retainers keep a usable, empty context.
  destroy_context_resources(d->primary);
  std::lock_guard<std::mutex> lk(G().mu);
  d->primary_flags = 0;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace sim

using namespace sim;

namespace {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints it.
std::string uuid_text(int physical) {
  char b[16];
  device_uuid(physical, b);
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(b[i]));
    out += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) out += '-';
  }
  return out;
}

// One CUDA_VISIBLE_DEVICES entry: a device index, or a GPU UUID (or a prefix
// naming one device); -1 when it names none.
int visible_entry(std::string_view token, int count) {
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty()) return -1;
  if (token.substr(0, 4) == "GPU-") {
    int found = -1;
    for (int i = 0; i < count; ++i) {
      if (uuid_text(i).compare(0, token.size(), token) != 0) continue;
      if (found >= 0) return -1;  // ambiguous prefix
      found = i;
    }
    return found;
  }
  int value = 0;
  for (char c : token) {
    if (c < '0' || c > '9' || value > count) return -1;
    value = value * 10 + (c - '0');
  }
  return value < count ? value : -1;
}

// The simulated devices CUDA_VISIBLE_DEVICES lets this process see, in its
// order. Read by cuInit, not when the library loads: a program may set it
// after loading the driver and before initialising it (Numba's
// test_visible_devices_set_after_import, numba#6149). "Only the devices whose
// index is present in the sequence are visible to CUDA applications and they
// are enumerated in the order of the sequence. If one of the indices is
// invalid, only the devices whose index precedes the invalid index are
// visible" (CUDA C++ Programming Guide, CUDA Environment Variables). A
// repeated device is taken as invalid (the guide does not say).
std::vector<int> visible_devices(int count) {
  std::vector<int> out;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!env) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::string_view rest(env);
  for (;;) {
    const std::size_t comma = rest.find(',');
    const int index = visible_entry(rest.substr(0, comma), count);
    if (index < 0 || std::find(out.begin(), out.end(), index) != out.end()) break;
    out.push_back(index);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

CUresult CUDAAPI cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_forked_child.load()) return CUDA_ERROR_NOT_INITIALIZED;
  const auto& cfg = simcfg::get();
  auto& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.initialized) return CUDA_SUCCESS;
  const std::vector<int> visible = visible_devices(cfg.device_count);
  if (visible.empty()) return CUDA_ERROR_NO_DEVICE;
  for (int i = 0; i < static_cast<int>(visible.size()); ++i) {
    auto* d = new Device;
    d->ordinal = i;
    d->physical = visible[static_cast<std::size_t>(i)];
    d->capacity = cfg.device_memory;
    if (!init_address_space(d)) {
      // Not enough address space for every device (e.g. 16 x 64 TiB): fail
      // cleanly so a later cuInit starts from scratch (objects are retired).
      g.retired_devices.insert(g.retired_devices.end(), g.devices.begin(), g.devices.end());
      g.retired_devices.push_back(d);
      g.retired_pools.insert(g.retired_pools.end(), g.pools.begin(), g.pools.end());
      g.devices.clear();
      g.pools.clear();
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->primary = new_context(d, true, 0);
    auto* pool = new Pool;
    pool->dev = d;
    pool->is_default = true;
    d->default_pool = d->current_pool = pool;
    g.pools.insert(pool);
    g.devices.push_back(d);
  }
  g.initialized = true;
  load_costs();  // a bad SIMCUDA_COSTS warns here, once
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = kDriverVersion;  // valid before cuInit, as in real CUDA
  return CUDA_SUCCESS;
}

// ---- primary contexts --------------------------------------------------------

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  Device* d = nullptr;
  if (CUresult r = check_device(dev, &d)) return r;
  std::lock_guard<std::mutex> lk(G().mu);
  if (d->primary_refcount++ == 0) {
    G().contexts.insert(d->primary);
    d->primary->registered.store(true, std::memory_order_release);
  }
  *pctx = reinterpret_cast<CUcontext>(d->primary);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  Device* d = nullptr;
  if (CUresult r = check_device(dev, &d)) return r;
  std::lock_guard<std::mutex> lk(G().mu);
  *flags = d->primary_flags;
  *active = d->primary_refcount > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags) {
  Device* d = nullptr;
  if (CUresult r = check_device(dev, &d)) return r;
  if (!valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(G().mu);
  d->primary_flags = flags;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return primary_set_flags(dev, flags);
}
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return primary_set_flags(dev, flags);
}

// ---- created contexts and the current-context stack -------------------------

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                               CUdevice dev) {
  (void)params;  // execution affinity / CIG parameters do not apply to the sim
  return create_ctx(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                               unsigned int flags, CUdevice dev) {
  (void)paramsArray;
  (void)numParams;
  return create_ctx(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_ctx(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_ctx(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) { return destroy_ctx(ctx); }
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return destroy_ctx(ctx); }

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  auto& st = ctx_stack();
  *pctx = st.empty() ? nullptr : reinterpret_cast<CUcontext>(st.back());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = check_init()) return r;
  Context* c = reinterpret_cast<Context*>(ctx);
  if (c) {
    std::lock_guard<std::mutex> lk(G().mu);
    if (!G().contexts.count(c)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  auto& st = ctx_stack();
  // "If there exists a CUDA context stack on the calling CPU thread, this
  //  will replace the top of that stack with ctx. If ctx is NULL then this
  //  will be equivalent to popping the top of the calling CPU thread's stack."
  if (!c) {
    if (!st.empty()) st.pop_back();
  } else if (st.empty()) {
    (void)st.push_back(c);  // an empty stack has room
  } else {
    st.back() = c;
  }
  return CUDA_SUCCESS;
}

static CUresult push_ctx(CUcontext ctx) {
  if (CUresult r = check_init()) return r;
  Context* c = reinterpret_cast<Context*>(ctx);
  {
    std::lock_guard<std::mutex> lk(G().mu);
    if (!c || !G().contexts.count(c)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!ctx_stack().push_back(c)) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}
static CUresult pop_ctx(CUcontext* pctx) {
  if (CUresult r = check_init()) return r;
  auto& st = ctx_stack();
  if (st.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(st.back());
  st.pop_back();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) { return push_ctx(ctx); }
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return push_ctx(ctx); }
CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) { return pop_ctx(pctx); }
CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) { return pop_ctx(pctx); }

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx_any(&c)) return r;
  *device = c->dev->ordinal;
  return CUDA_SUCCESS;
}

// The named context, or the current one when ctx is NULL; with `sticky`,
// also its device fault (see current_ctx).
static CUresult ctx_or_current(CUcontext ctx, Context** out, bool sticky = true) {
  if (!ctx) return sticky ? current_ctx(out) : current_ctx_any(out);
  if (CUresult r = check_init()) return r;
  Context* c = reinterpret_cast<Context*>(ctx);
  {
    std::lock_guard<std::mutex> lk(G().mu);
    if (!G().contexts.count(c)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (CUresult f = sticky ? ctx_fault(c) : CUDA_SUCCESS) return f;
  *out = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = ctx_or_current(ctx, &c, false)) return r;
  *device = c->dev->ordinal;
  return CUDA_SUCCESS;
}

// Waits for the context's work, then answers its fault if that work raised
// one; besides the wait, the call's own cost (Cost::CtxSynchronize).
static CUresult ctx_synchronize(CUcontext ctx) {
  count(Counter::ctx_synchronize);
  Context* c = nullptr;
  if (CUresult r = ctx_or_current(ctx, &c)) return r;
  // A "potentially unsafe API call" during capture (cudaDeviceSynchronize
  // would wait for work the capture holds back).
  if (CUresult r = capture_check_unsafe_call()) return r;
  return charged(Cost::CtxSynchronize, 0, sync_context(c));
}

CUresult CUDAAPI cuCtxSynchronize(void) { return ctx_synchronize(nullptr); }
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) { return ctx_synchronize(ctx); }

CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  std::lock_guard<std::mutex> lk(G().mu);
  *flags = c->is_primary ? c->dev->primary_flags : c->flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetFlags(unsigned int flags) {
  // "Sets the flags for the current context overwriting previously set ones.
  //  See cuDevicePrimaryCtxSetFlags for flag values." (CUDA 13 cuda.h)
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (!valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(G().mu);
  if (c->is_primary) {
    c->dev->primary_flags = flags;
  } else {
    c->flags = flags;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = ctx_or_current(ctx, &c)) return r;
  *version = 3020;  // what real drivers report for contexts of current APIs
  return CUDA_SUCCESS;
}
