// What a context holds besides its memory and streams: its id, resource
// limits, cache and shared-memory preferences, and the stream priority
// range. The context stack, created and primary contexts are in
// drv_state.cpp. Quotations are from CUDA 13's cuda.h; values that the
// documentation does not give are asked of a real GPU by
// tests/apps/sim_driver_probe.cpp.
#include <atomic>

#include "drv_internal.h"

namespace sim {

namespace {

// "The Id is unique for the life of the program for this instance of CUDA"
// (cuCtxGetId); never reused, so a primary context reset or released and
// retained again is a new context with a new id.
std::atomic<unsigned long long> g_next_ctx_id{1};

// Limits of a fresh context of a compute capability 9.0 device:
// CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT "the default (2048 launches)"
// (cuCtxSetLimit); stack 1 KiB, printf FIFO 1 MiB and malloc heap 8 MiB as
// the driver reports them (sim_driver_probe checks these on a GPU).
constexpr std::size_t kDefaultStack = 1024;
constexpr std::size_t kDefaultPrintfFifo = std::size_t{1} << 20;
constexpr std::size_t kDefaultMallocHeap = std::size_t{8} << 20;
constexpr std::size_t kDefaultPendingLaunches = 2048;
constexpr std::size_t kDefaultL2Fetch = 64;
// "Values can range from 0B to 128B" (CU_LIMIT_MAX_L2_FETCH_GRANULARITY).
constexpr std::size_t kMaxL2Fetch = 128;

// Which limits a compute capability 9.0 context knows. "This limit is only
// applicable to devices of compute capability < 9.0. Attempting to set this
// limit on devices of other compute capability versions will result in the
// error CUDA_ERROR_UNSUPPORTED_LIMIT" (CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH). The
// CIG limits apply to CIG contexts (cuCtxCreate_v4 with cigParams), which
// the sim does not make: only CU_LIMIT_CIG_ENABLED (0) is answered.
bool supported(CUlimit limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
    case CU_LIMIT_CIG_ENABLED:
      return true;
    default:
      return false;
  }
}

std::size_t max_persisting_l2(Context* c) {
  int value = 0;
  if (cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, c->dev->ordinal) !=
          CUDA_SUCCESS ||
      value < 0) {
    return 0;
  }
  return static_cast<std::size_t>(value);
}

}  // namespace

void reset_context_settings(Context* ctx) {
  std::lock_guard<std::mutex> lk(ctx->settings_mu);
  ctx->id = g_next_ctx_id.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t& v : ctx->limits) v = 0;
  ctx->limits[CU_LIMIT_STACK_SIZE] = kDefaultStack;
  ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = kDefaultPrintfFifo;
  ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = kDefaultMallocHeap;
  ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = kDefaultPendingLaunches;
  ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = kDefaultL2Fetch;
  ctx->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
  ctx->limits[CU_LIMIT_CIG_ENABLED] = 0;
  // "CU_FUNC_CACHE_PREFER_NONE: no preference for shared memory or L1 (default)".
  ctx->cache_config = CU_FUNC_CACHE_PREFER_NONE;
}

}  // namespace sim

using namespace sim;

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (!ctxId) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (ctx) {
    // A handle the driver does not know (a destroyed context's, or a
    // released primary's) is "not a valid handle": CUDA_ERROR_INVALID_CONTEXT.
    if (CUresult r = check_init()) return r;
    std::lock_guard<std::mutex> lk(G().mu);
    c = reinterpret_cast<Context*>(ctx);
    if (!G().contexts.count(c)) return CUDA_ERROR_INVALID_CONTEXT;
  } else if (CUresult r = current_ctx(&c)) {
    // "If context is supplied as NULL and there is one current, the Id of
    //  the current context is returned."
    return r;
  }
  std::lock_guard<std::mutex> lk(c->settings_mu);
  *ctxId = c->id;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (!pvalue) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (!supported(limit)) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  std::lock_guard<std::mutex> lk(c->settings_mu);
  *pvalue = c->limits[limit];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  // CU_LIMIT_CIG_ENABLED "Can only be queried, cannot be set".
  if (!supported(limit) || limit == CU_LIMIT_CIG_ENABLED) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  // "The driver is free to modify the requested value to meet h/w
  //  requirements (this could be clamping to minimum or maximum values ...)".
  if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > kMaxL2Fetch) value = kMaxL2Fetch;
  if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE) {
    const std::size_t most = max_persisting_l2(c);
    if (value > most) value = most;
  }
  // "Setting this value will take effect immediately, and if necessary, the
  //  device will block until all preceding requested tasks are complete"
  // (CU_LIMIT_STACK_SIZE).
  if (limit == CU_LIMIT_STACK_SIZE) sync_context(c);
  std::lock_guard<std::mutex> lk(c->settings_mu);
  c->limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  if (!pconfig) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  // A compute capability 9.0 device shares L1 and shared memory, so the
  // preference set is the one returned.
  std::lock_guard<std::mutex> lk(c->settings_mu);
  *pconfig = c->cache_config;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (static_cast<int>(config) < 0 || static_cast<int>(config) > CU_FUNC_CACHE_PREFER_EQUAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lk(c->settings_mu);
  c->cache_config = config;
  return CUDA_SUCCESS;
}

// Deprecated but still exported by CUDA 13's libcuda.so. "When
// cuCtxGetSharedMemConfig is called on devices without configurable shared
// memory, it will return the fixed bank size of the hardware" (four bytes
// since compute capability 5.0), and cuCtxSetSharedMemConfig "will do
// nothing on devices with fixed shared memory bank size".
CUresult CUDAAPI cuCtxGetSharedMemConfig(CUsharedconfig* pConfig) {
  if (!pConfig) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetSharedMemConfig(CUsharedconfig config) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  if (static_cast<int>(config) < 0 || static_cast<int>(config) > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  // "A NULL may be passed in for *leastPriority or *greatestPriority if the
  //  value is not desired." The range is the one cuStreamCreateWithPriority
  // clamps to (drv_streams.cpp) and cudaDeviceGetStreamPriorityRange reports.
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}
