// Contexts as the driver keeps them (issue 20, item 2), checked exactly on
// the sim with two devices: the per-thread context stack, created and
// primary contexts and their retain counts, what cuCtxDestroy and
// cuDevicePrimaryCtxReset leave behind, handles that go stale, the context
// queries (flags, id, API version, limits, cache and shared-memory
// configuration, stream priorities), from several threads, and the start-up
// sequences of Numba 0.56, CuPy and PyTorch. The documented behaviour is
// quoted in tests/sim/driver/drv_state.cpp and drv_contexts.cpp; what the
// documentation leaves open, sim_driver_probe asks a real GPU.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "sim_test.h"

// cuCtxGet/SetSharedMemConfig are deprecated in CUDA 13 but still exported.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

int g_sentinel_object;
const CUcontext kSentinel = reinterpret_cast<CUcontext>(&g_sentinel_object);

CUcontext current() {
  CUcontext c = kSentinel;
  SIM_CU_OK(cuCtxGetCurrent(&c));
  return c;
}

int current_device() {
  CUdevice d = -1;
  SIM_CU_OK(cuCtxGetDevice(&d));
  return d;
}

unsigned long long id_of(CUcontext c) {
  unsigned long long id = 0;
  SIM_CU_OK(cuCtxGetId(c, &id));
  SIM_CHECK(id != 0);
  return id;
}

int primary_active(CUdevice dev, unsigned* flags = nullptr) {
  unsigned f = 0xdead;
  int active = -1;
  SIM_CU_OK(cuDevicePrimaryCtxGetState(dev, &f, &active));
  if (flags) *flags = f;
  return active;
}

std::size_t limit(CUlimit l) {
  std::size_t v = 0;
  SIM_CU_OK(cuCtxGetLimit(&v, l));
  return v;
}

CUfunc_cache cache_config() {
  CUfunc_cache c = CU_FUNC_CACHE_PREFER_EQUAL;
  SIM_CU_OK(cuCtxGetCacheConfig(&c));
  return c;
}

// Every query that needs a current context, with the code it must give.
void all_need_a_context(CUresult want) {
  CUdevice d = -1;
  unsigned u = 0;
  unsigned long long id = 0;
  std::size_t v = 0;
  int lo = 7, hi = 7;
  CUfunc_cache cc = CU_FUNC_CACHE_PREFER_NONE;
  CUsharedconfig sc = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
  CUdeviceptr p = 0;
  SIM_EXPECT_CU(cuCtxGetDevice(&d), want);
  SIM_EXPECT_CU(cuCtxGetDevice_v2(&d, nullptr), want);
  SIM_EXPECT_CU(cuCtxGetFlags(&u), want);
  SIM_EXPECT_CU(cuCtxSetFlags(0), want);
  SIM_EXPECT_CU(cuCtxGetApiVersion(nullptr, &u), want);
  SIM_EXPECT_CU(cuCtxGetId(nullptr, &id), want);
  SIM_EXPECT_CU(cuCtxSynchronize(), want);
  SIM_EXPECT_CU(cuCtxSynchronize_v2(nullptr), want);
  SIM_EXPECT_CU(cuCtxGetStreamPriorityRange(&lo, &hi), want);
  SIM_EXPECT_CU(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), want);
  SIM_EXPECT_CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 2048), want);
  SIM_EXPECT_CU(cuCtxGetCacheConfig(&cc), want);
  SIM_EXPECT_CU(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1), want);
  SIM_EXPECT_CU(cuCtxGetSharedMemConfig(&sc), want);
  SIM_EXPECT_CU(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE), want);
  SIM_EXPECT_CU(cuMemAlloc(&p, 64), want);
  SIM_CHECK(lo == 7 && hi == 7);  // nothing written on failure
}

// A handle the driver no longer knows, used explicitly.
void stale_handle(CUcontext c) {
  CUdevice d = -1;
  unsigned u = 0;
  unsigned long long id = 0;
  SIM_EXPECT_CU(cuCtxPushCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxSetCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxGetDevice_v2(&d, c), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxGetApiVersion(c, &u), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxGetId(c, &id), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxSynchronize_v2(c), CUDA_ERROR_INVALID_CONTEXT);
}

void before_init() {
  CUcontext c = nullptr;
  SIM_EXPECT_CU(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
  SIM_EXPECT_CU(cuCtxPopCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
  SIM_EXPECT_CU(cuCtxSetCurrent(nullptr), CUDA_ERROR_NOT_INITIALIZED);
  SIM_EXPECT_CU(cuDevicePrimaryCtxRetain(&c, 0), CUDA_ERROR_NOT_INITIALIZED);
}

void empty_stack() {
  SIM_CHECK(current() == nullptr);  // "set to NULL and CUDA_SUCCESS is returned"
  SIM_EXPECT_CU(cuCtxGetCurrent(nullptr), CUDA_ERROR_INVALID_VALUE);
  CUcontext popped = kSentinel;
  SIM_EXPECT_CU(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CHECK(popped == kSentinel);
  SIM_EXPECT_CU(cuCtxPopCurrent(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CU_OK(cuCtxSetCurrent(nullptr));  // "a no-op if ... the stack is empty"
  SIM_CHECK(current() == nullptr);
  SIM_EXPECT_CU(cuCtxPushCurrent(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  all_need_a_context(CUDA_ERROR_INVALID_CONTEXT);
}

// Retain counts, and that retaining pushes nothing.
CUcontext primary_counts(CUdevice dev) {
  CUcontext p = nullptr, again = nullptr;
  SIM_CHECK(primary_active(dev) == 0);
  SIM_EXPECT_CU(cuDevicePrimaryCtxRelease(dev), CUDA_ERROR_INVALID_CONTEXT);  // never retained
  SIM_EXPECT_CU(cuDevicePrimaryCtxRetain(nullptr, dev), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuDevicePrimaryCtxRetain(&p, 7), CUDA_ERROR_INVALID_DEVICE);
  SIM_EXPECT_CU(cuDevicePrimaryCtxGetState(dev, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&p, dev));
  SIM_CHECK(p != nullptr && primary_active(dev) == 1);
  SIM_CHECK(current() == nullptr);  // "not pushed onto the stack"
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&again, dev));
  SIM_CHECK(again == p);
  SIM_CU_OK(cuDevicePrimaryCtxRelease(dev));
  SIM_CHECK(primary_active(dev) == 1);  // one retain left
  CUdevice d = -1;
  SIM_CU_OK(cuCtxGetDevice_v2(&d, p));  // usable by handle without being current
  SIM_CHECK(d == dev);
  return p;
}

void stack_order(CUcontext p0, CUcontext p1) {
  CUcontext c = nullptr, popped = nullptr;
  SIM_CU_OK(cuCtxPushCurrent(p0));
  SIM_CHECK(current() == p0 && current_device() == 0);
  unsigned version = 0;
  SIM_CU_OK(cuCtxGetApiVersion(nullptr, &version));
  SIM_CHECK(version == 3020);
  SIM_CU_OK(cuCtxSynchronize());
  SIM_CU_OK(cuCtxSynchronize_v2(p1));  // another context, by handle
  // cuCtxCreate pushes: "supplanted by the newly created context and may be
  // restored by a subsequent call to cuCtxPopCurrent()".
  SIM_CU_OK(cuCtxCreate(&c, nullptr, 0, 1));
  SIM_CHECK(current() == c && current_device() == 1);
  CUdevice d = -1;
  SIM_CU_OK(cuCtxGetDevice_v2(&d, p0));
  SIM_CHECK(d == 0);
  SIM_CU_OK(cuCtxPopCurrent(&popped));
  SIM_CHECK(popped == c && current() == p0);
  SIM_CU_OK(cuCtxPopCurrent(&popped));
  SIM_CHECK(popped == p0 && current() == nullptr);
  SIM_EXPECT_CU(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);

  // cuCtxSetCurrent replaces the top; NULL pops it; on an empty stack it pushes.
  SIM_CU_OK(cuCtxPushCurrent(p0));
  SIM_CU_OK(cuCtxPushCurrent(c));
  SIM_CU_OK(cuCtxSetCurrent(p1));
  SIM_CHECK(current() == p1);
  SIM_CU_OK(cuCtxPopCurrent(&popped));
  SIM_CHECK(popped == p1 && current() == p0);  // c was replaced, not kept below
  SIM_CU_OK(cuCtxSetCurrent(nullptr));
  SIM_CHECK(current() == nullptr);
  SIM_CU_OK(cuCtxSetCurrent(c));
  SIM_CHECK(current() == c);
  SIM_CU_OK(cuCtxPopCurrent(nullptr));  // the popped handle is optional
  SIM_CHECK(current() == nullptr);
  // The same context twice on the stack.
  SIM_CU_OK(cuCtxPushCurrent(p0));
  SIM_CU_OK(cuCtxPushCurrent(p0));
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
  SIM_CHECK(current() == p0);
  SIM_CU_OK(cuCtxPopCurrent(nullptr));

  // Ids: unique, stable, by handle or current.
  const unsigned long long i0 = id_of(p0), i1 = id_of(p1), ic = id_of(c);
  SIM_CHECK(i0 != i1 && i0 != ic && i1 != ic);
  SIM_CU_OK(cuCtxPushCurrent(c));
  SIM_CHECK(id_of(nullptr) == ic && id_of(c) == ic);
  SIM_EXPECT_CU(cuCtxGetId(c, nullptr), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuCtxDestroy(c));
  SIM_CHECK(current() == nullptr);  // popped: it was current here
}

void create_variants_and_flags(CUcontext p0) {
  CUcontext c = nullptr;
  SIM_CU_OK(cuCtxPushCurrent(p0));
  // "Only one of the scheduling flags can be set"; unknown bits are invalid.
  SIM_EXPECT_CU(cuCtxCreate(&c, nullptr, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuCtxCreate(&c, nullptr, 0x100, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuCtxCreate(nullptr, nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuCtxCreate(&c, nullptr, 0, 9), CUDA_ERROR_INVALID_DEVICE);
  SIM_CHECK(current() == p0);  // nothing pushed by a failure

  const unsigned flags = CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_MAP_HOST;
  SIM_CU_OK(cuCtxCreate(&c, nullptr, flags, 0));
  unsigned got = 0;
  SIM_CU_OK(cuCtxGetFlags(&got));
  SIM_CHECK(got == flags);
  SIM_CU_OK(cuCtxSetFlags(CU_CTX_SCHED_SPIN | CU_CTX_SYNC_MEMOPS));
  SIM_CU_OK(cuCtxGetFlags(&got));
  SIM_CHECK(got == (CU_CTX_SCHED_SPIN | CU_CTX_SYNC_MEMOPS));
  SIM_EXPECT_CU(cuCtxSetFlags(CU_CTX_SCHED_SPIN | CU_CTX_SCHED_BLOCKING_SYNC), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuCtxGetFlags(nullptr), CUDA_ERROR_INVALID_VALUE);
  SIM_CU_OK(cuCtxGetFlags(&got));
  SIM_CHECK(got == (CU_CTX_SCHED_SPIN | CU_CTX_SYNC_MEMOPS));  // unchanged by the refusal
  SIM_CU_OK(cuCtxDestroy(c));
  SIM_CHECK(current() == p0);

  // The older ABIs push too.
  void* v2 = nullptr;
  void* v3 = nullptr;
  CUdriverProcAddressQueryResult q{};
  SIM_CU_OK(cuGetProcAddress("cuCtxCreate", &v2, 3020, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  SIM_CU_OK(cuGetProcAddress("cuCtxCreate", &v3, 11040, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  SIM_CHECK(v2 != nullptr && v3 != nullptr && v2 != v3);
  SIM_CU_OK(reinterpret_cast<PFN_cuCtxCreate_v3020>(v2)(&c, 0, 1));
  SIM_CHECK(current() == c && current_device() == 1);
  SIM_CU_OK(cuCtxDestroy(c));
  SIM_CU_OK(reinterpret_cast<PFN_cuCtxCreate_v11040>(v3)(&c, nullptr, 0, 0, 0));
  SIM_CHECK(current() == c && current_device() == 0);
  SIM_CU_OK(cuCtxDestroy(c));
  SIM_CHECK(current() == p0);

  // Primary flags: cuDevicePrimaryCtxSetFlags, seen by cuCtxGetFlags; and
  // cuCtxSetFlags on the current primary, seen by GetState.
  SIM_CU_OK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
  SIM_CU_OK(cuCtxGetFlags(&got));
  SIM_CHECK(got == CU_CTX_SCHED_BLOCKING_SYNC);
  SIM_CU_OK(cuCtxSetFlags(CU_CTX_SCHED_YIELD));
  SIM_CHECK(primary_active(0, &got) == 1 && got == CU_CTX_SCHED_YIELD);
  SIM_EXPECT_CU(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuDevicePrimaryCtxSetFlags(9, 0), CUDA_ERROR_INVALID_DEVICE);
  SIM_CU_OK(cuDevicePrimaryCtxSetFlags(0, 0));
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
}

void limits_and_configs(CUcontext p0) {
  SIM_CU_OK(cuCtxPushCurrent(p0));
  SIM_CHECK(limit(CU_LIMIT_STACK_SIZE) == 1024);
  SIM_CHECK(limit(CU_LIMIT_PRINTF_FIFO_SIZE) == (1u << 20));
  SIM_CHECK(limit(CU_LIMIT_MALLOC_HEAP_SIZE) == (8u << 20));
  SIM_CHECK(limit(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT) == 2048);
  SIM_CHECK(limit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY) == 64);
  SIM_CHECK(limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0);
  SIM_CHECK(limit(CU_LIMIT_CIG_ENABLED) == 0);
  std::size_t v = 0;
  SIM_EXPECT_CU(cuCtxGetLimit(nullptr, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuCtxGetLimit(&v, CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH), CUDA_ERROR_UNSUPPORTED_LIMIT);
  SIM_EXPECT_CU(cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4), CUDA_ERROR_UNSUPPORTED_LIMIT);
  SIM_EXPECT_CU(cuCtxGetLimit(&v, CU_LIMIT_MAX), CUDA_ERROR_UNSUPPORTED_LIMIT);
  SIM_EXPECT_CU(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1), CUDA_ERROR_UNSUPPORTED_LIMIT);
  SIM_CU_OK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
  SIM_CU_OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 64u << 20));
  SIM_CU_OK(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 1000));
  SIM_CHECK(limit(CU_LIMIT_STACK_SIZE) == 4096);
  SIM_CHECK(limit(CU_LIMIT_MALLOC_HEAP_SIZE) == (64u << 20));
  SIM_CHECK(limit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY) == 128);  // clamped to the documented range

  SIM_CHECK(cache_config() == CU_FUNC_CACHE_PREFER_NONE);
  SIM_CU_OK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
  SIM_CHECK(cache_config() == CU_FUNC_CACHE_PREFER_L1);
  SIM_EXPECT_CU(cuCtxSetCacheConfig(static_cast<CUfunc_cache>(7)), CUDA_ERROR_INVALID_VALUE);
  SIM_EXPECT_CU(cuCtxGetCacheConfig(nullptr), CUDA_ERROR_INVALID_VALUE);
  SIM_CHECK(cache_config() == CU_FUNC_CACHE_PREFER_L1);
  CUsharedconfig sc = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
  SIM_CU_OK(cuCtxGetSharedMemConfig(&sc));
  SIM_CHECK(sc == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
  SIM_CU_OK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));  // fixed banks: no effect
  SIM_CU_OK(cuCtxGetSharedMemConfig(&sc));
  SIM_CHECK(sc == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
  SIM_EXPECT_CU(cuCtxSetSharedMemConfig(static_cast<CUsharedconfig>(9)), CUDA_ERROR_INVALID_VALUE);

  int lo = 7, hi = 7;
  SIM_CU_OK(cuCtxGetStreamPriorityRange(&lo, &hi));
  SIM_CHECK(lo == 0 && hi == -5);
  SIM_CU_OK(cuCtxGetStreamPriorityRange(nullptr, &hi));
  SIM_CU_OK(cuCtxGetStreamPriorityRange(&lo, nullptr));
  SIM_CU_OK(cuCtxGetStreamPriorityRange(nullptr, nullptr));

  // Per context: a created context starts from the defaults.
  CUcontext c = nullptr;
  SIM_CU_OK(cuCtxCreate(&c, nullptr, 0, 0));
  SIM_CHECK(limit(CU_LIMIT_STACK_SIZE) == 1024 && cache_config() == CU_FUNC_CACHE_PREFER_NONE);
  SIM_CU_OK(cuCtxDestroy(c));
  SIM_CHECK(limit(CU_LIMIT_STACK_SIZE) == 4096);

  // cuDevicePrimaryCtxReset: "reset all state on the primary context"; it
  // stays retained, current and usable, as a new context (new id).
  const unsigned long long before = id_of(p0);
  CUdeviceptr p = 0;
  SIM_CU_OK(cuMemAlloc(&p, 1 << 20));
  SIM_CU_OK(cuDevicePrimaryCtxReset(0));
  SIM_CHECK(primary_active(0) == 1 && current() == p0 && current_device() == 0);
  SIM_CHECK(limit(CU_LIMIT_STACK_SIZE) == 1024 && cache_config() == CU_FUNC_CACHE_PREFER_NONE);
  SIM_CHECK(id_of(p0) != before);
  SIM_EXPECT_CU(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);  // the reset freed it
  SIM_EXPECT_CU(cuDevicePrimaryCtxReset(9), CUDA_ERROR_INVALID_DEVICE);
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
}

void destroy_here(CUcontext p0) {
  // Destroyed below the top: stays on the stack, the top is unaffected.
  CUcontext c = nullptr, popped = nullptr;
  SIM_CU_OK(cuCtxCreate(&c, nullptr, 0, 0));
  SIM_CU_OK(cuCtxPushCurrent(p0));
  SIM_CU_OK(cuCtxDestroy(c));
  SIM_CHECK(current() == p0 && current_device() == 0);
  SIM_CU_OK(cuCtxPopCurrent(&popped));
  SIM_CHECK(popped == p0 && current() == c);
  all_need_a_context(CUDA_ERROR_CONTEXT_IS_DESTROYED);
  SIM_CU_OK(cuCtxPopCurrent(&popped));
  SIM_CHECK(popped == c && current() == nullptr);
  stale_handle(c);
  SIM_EXPECT_CU(cuCtxDestroy(c), CUDA_ERROR_INVALID_CONTEXT);  // twice
  SIM_EXPECT_CU(cuCtxDestroy(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  SIM_EXPECT_CU(cuCtxDestroy(p0), CUDA_ERROR_INVALID_CONTEXT);  // a primary is released, not destroyed
  SIM_CHECK(primary_active(0) == 1);
}

// "If ctx is current to other threads, then ctx will remain current to
// those threads, and attempting to access ctx from those threads will
// result in the error CUDA_ERROR_CONTEXT_IS_DESTROYED."
void destroy_on_another_thread() {
  CUcontext c = nullptr;
  SIM_CU_OK(cuCtxCreate(&c, nullptr, 0, 1));
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
  std::atomic<int> step{0};
  std::thread t([&] {
    SIM_CHECK(current() == nullptr);  // a new thread's stack is empty
    SIM_CU_OK(cuCtxPushCurrent(c));
    SIM_CHECK(current_device() == 1);
    step = 1;
    while (step != 2) std::this_thread::yield();
    SIM_CHECK(current() == c);  // still current here
    all_need_a_context(CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUcontext popped = nullptr;
    SIM_CU_OK(cuCtxPopCurrent(&popped));
    SIM_CHECK(popped == c && current() == nullptr);
    step = 3;
  });
  while (step != 1) std::this_thread::yield();
  SIM_CHECK(current() == nullptr);  // the other thread's push is not ours
  SIM_CU_OK(cuCtxDestroy(c));
  SIM_CHECK(current() == nullptr);
  step = 2;
  t.join();
  SIM_CHECK(step == 3);
  stale_handle(c);
}

// The last release makes the primary inactive; the handle stays the same,
// unknown to the driver until it is retained again.
void primary_release_and_retain(CUcontext p0) {
  CUdeviceptr p = 0;
  SIM_CU_OK(cuCtxPushCurrent(p0));
  SIM_CU_OK(cuMemAlloc(&p, 4096));
  const unsigned long long before = id_of(p0);
  SIM_CU_OK(cuDevicePrimaryCtxRelease(0));  // the last retain
  SIM_CHECK(primary_active(0) == 0);
  // "does not pop the context from stack in any circumstances"
  SIM_CHECK(current() == p0);
  all_need_a_context(CUDA_ERROR_INVALID_CONTEXT);
  stale_handle(p0);
  SIM_EXPECT_CU(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  SIM_CU_OK(cuDevicePrimaryCtxReset(0));  // allowed on an inactive primary (Numba's reset does it)
  CUcontext again = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&again, 0));
  SIM_CHECK(again == p0 && current() == p0 && current_device() == 0);
  SIM_CHECK(id_of(p0) != before);
  SIM_EXPECT_CU(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);  // "automatically reset" at the last release
  SIM_CU_OK(cuCtxPopCurrent(nullptr));
}

// Stacks are per thread; contexts move between threads; retains from many
// threads balance.
void many_threads(CUcontext p0, CUcontext p1) {
  constexpr int kThreads = 8, kRounds = 300;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([=] {
      const CUcontext mine = (i % 2) ? p1 : p0;
      const CUcontext other = (i % 2) ? p0 : p1;
      for (int r = 0; r < kRounds; ++r) {
        CUcontext h = nullptr, popped = nullptr;
        SIM_CU_OK(cuDevicePrimaryCtxRetain(&h, i % 2));
        SIM_CHECK(h == mine);
        SIM_CU_OK(cuCtxPushCurrent(mine));
        SIM_CU_OK(cuCtxPushCurrent(other));
        SIM_CHECK(current() == other && current_device() == (i + 1) % 2);
        SIM_CU_OK(cuCtxSetCurrent(mine));
        SIM_CHECK(current_device() == i % 2);
        CUcontext c = nullptr;
        SIM_CU_OK(cuCtxCreate(&c, nullptr, 0, i % 2));
        SIM_CHECK(current() == c);
        SIM_CU_OK(cuCtxDestroy(c));
        SIM_CU_OK(cuCtxPopCurrent(&popped));
        SIM_CHECK(popped == mine);
        SIM_CU_OK(cuCtxPopCurrent(&popped));
        SIM_CHECK(popped == mine && current() == nullptr);
        SIM_CU_OK(cuDevicePrimaryCtxRelease(i % 2));
      }
    });
  }
  for (auto& t : ts) t.join();
  SIM_CHECK(primary_active(0) == 1 && primary_active(1) == 1);  // the test's own retains
}

// Numba 0.56's start and cuda.close() (numba/cuda/cudadrv/driver.py,
// devices.py): retain, push, query through the stack, pop every context,
// release, reset; then a worker thread does the same (test_select_device).
void numba_sequence() {
  for (int round = 0; round < 3; ++round) {
    auto body = [] {
      CUcontext h = nullptr, got = nullptr, popped = nullptr;
      SIM_CU_OK(cuDevicePrimaryCtxRetain(&h, 0));
      SIM_CU_OK(cuCtxPushCurrent(h));
      std::size_t f = 0, t = 0;
      SIM_CU_OK(cuMemGetInfo(&f, &t));
      SIM_CU_OK(cuCtxGetCurrent(&got));
      SIM_CHECK(got == h && current_device() == 0);
      CUstream s = nullptr;
      SIM_CU_OK(cuStreamCreate(&s, 0));
      CUdeviceptr p = 0;
      SIM_CU_OK(cuMemAlloc(&p, 800));
      SIM_CU_OK(cuStreamSynchronize(s));
      SIM_CU_OK(cuMemFree(p));
      SIM_CU_OK(cuStreamDestroy(s));
      SIM_CU_OK(cuCtxPopCurrent(&popped));
      SIM_CHECK(popped == h && current() == nullptr);
      SIM_CU_OK(cuDevicePrimaryCtxRelease(0));
      SIM_CU_OK(cuDevicePrimaryCtxReset(0));
    };
    if (round == 1) {
      std::thread(body).join();
    } else {
      body();
    }
  }
}

// CuPy and PyTorch start through the runtime: cudaSetDevice / cudaFree(0)
// make the device's primary context current (retained by the runtime), and
// they then ask the driver: cuCtxGetCurrent, cuCtxGetDevice,
// cuDevicePrimaryCtxGetState (c10::cuda's hasPrimaryContext).
void runtime_start() {
  SIM_RT_OK(cudaSetDevice(1));
  SIM_RT_OK(cudaFree(nullptr));
  CUcontext p1 = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&p1, 1));
  SIM_CHECK(current() == p1 && current_device() == 1);
  SIM_CHECK(primary_active(1) == 1);
  SIM_CU_OK(cuDevicePrimaryCtxRelease(1));
  SIM_CHECK(primary_active(1) == 1);  // the runtime's retain
  int dev = -1;
  SIM_RT_OK(cudaGetDevice(&dev));
  SIM_CHECK(dev == 1);
}

}  // namespace

int main() {
  before_init();
  SIM_CU_OK(cuInit(0));
  int count = 0;
  SIM_CU_OK(cuDeviceGetCount(&count));
  SIM_CHECK(count == 2);
  char name[256] = {};
  SIM_CU_OK(cuDeviceGetName(name, sizeof name, 0));
  simtest::require_sim_name(name);

  empty_stack();
  const CUcontext p0 = primary_counts(0);
  const CUcontext p1 = primary_counts(1);
  SIM_CHECK(p0 != p1);
  stack_order(p0, p1);
  create_variants_and_flags(p0);
  limits_and_configs(p0);
  destroy_here(p0);
  destroy_on_another_thread();
  primary_release_and_retain(p0);
  many_threads(p0, p1);
  SIM_CU_OK(cuDevicePrimaryCtxRelease(0));
  SIM_CU_OK(cuDevicePrimaryCtxRelease(1));
  SIM_CHECK(primary_active(0) == 0 && primary_active(1) == 0);
  numba_sequence();
  SIM_CHECK(primary_active(0) == 0);
  runtime_start();
  std::printf("sim_contexts: OK\n");
  return 0;
}
