// Streams and contexts as the caching pool must know them: each stream
// created with CU_STREAM_NON_BLOCKING, and whether the program made a
// context of its own (pool/glue/device_order.h says why). Only the driver's
// functions are hooked: every runtime, shared or static, creates its
// streams and contexts through them (cudaStreamCreateWithFlags reaches
// cuStreamCreate through cuGetProcAddress), so each is seen once. A stream's
// destruction is told to the pool in hook_support (destroy_stream).
#define __CUDA_API_VERSION_INTERNAL 1  // declares every ABI of cuCtxCreate
#include <cuda.h>

#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"
#include "hooks/tables.h"
#include "pool/glue/device_order.h"

using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

namespace {

constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;

CUresult stream_create(decltype(&::cuStreamCreate) real, CUstream* stream, unsigned int flags) {
  if (!real) return kNoDriver;
  const CUresult rc = real(stream, flags);
  if (rc == CUDA_SUCCESS && stream && caching_pool()) note_stream_created(*stream, flags);
  return rc;
}

CUresult stream_create_with_priority(decltype(&::cuStreamCreateWithPriority) real, CUstream* stream,
                                     unsigned int flags, int priority) {
  if (!real) return kNoDriver;
  const CUresult rc = real(stream, flags, priority);
  if (rc == CUDA_SUCCESS && stream && caching_pool()) note_stream_created(*stream, flags);
  return rc;
}

// A context the program makes itself has its own legacy stream, which an
// ordering in the primary context does not reach.
template <typename... Args>
CUresult context_create(CUresult (*real)(Args...), Args... args) {
  if (!real) return kNoDriver;
  const CUresult rc = real(args...);
  if (rc == CUDA_SUCCESS) note_foreign_context();
  return rc;
}

CUresult ctx_create_v2(decltype(&::cuCtxCreate_v2) real, CUcontext* ctx, unsigned int flags, CUdevice dev) {
  return context_create(real, ctx, flags, dev);
}

CUresult ctx_create_v3(decltype(&::cuCtxCreate_v3) real, CUcontext* ctx, CUexecAffinityParam* params, int count,
                       unsigned int flags, CUdevice dev) {
  return context_create(real, ctx, params, count, flags, dev);
}

CUresult ctx_create_v4(decltype(&::cuCtxCreate_v4) real, CUcontext* ctx, CUctxCreateParams* params,
                       unsigned int flags, CUdevice dev) {
  return context_create(real, ctx, params, flags, dev);
}

CUresult green_ctx_create(decltype(&::cuGreenCtxCreate) real, CUgreenCtx* ctx, CUdevResourceDesc desc,
                          CUdevice dev, unsigned int flags) {
  return context_create(real, ctx, desc, dev, flags);
}

}  // namespace

#define CUMEMTRACE_STREAMS_EXPORT(NAME, BODY, PARAMS, ...)  \
  static NextSymbol<decltype(&::NAME)> next_##NAME{#NAME};  \
  CUMEMTRACE_HOOK CUresult CUDAAPI NAME PARAMS { return BODY(next_##NAME.get(), __VA_ARGS__); }

CUMEMTRACE_STREAMS_EXPORT(cuStreamCreate, stream_create, (CUstream * stream, unsigned int flags), stream, flags)
CUMEMTRACE_STREAMS_EXPORT(cuStreamCreateWithPriority, stream_create_with_priority,
                          (CUstream * stream, unsigned int flags, int priority), stream, flags, priority)
// cuCtxCreate (CUDA < 3.2) has cuCtxCreate_v2's signature.
static NextSymbol<decltype(&::cuCtxCreate_v2)> next_cuCtxCreate{"cuCtxCreate"};
CUMEMTRACE_HOOK CUresult CUDAAPI cuCtxCreate(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  return ctx_create_v2(next_cuCtxCreate.get(), ctx, flags, dev);
}
CUMEMTRACE_STREAMS_EXPORT(cuCtxCreate_v2, ctx_create_v2, (CUcontext * ctx, unsigned int flags, CUdevice dev), ctx,
                          flags, dev)
CUMEMTRACE_STREAMS_EXPORT(cuCtxCreate_v3, ctx_create_v3,
                          (CUcontext * ctx, CUexecAffinityParam* params, int count, unsigned int flags,
                           CUdevice dev),
                          ctx, params, count, flags, dev)
CUMEMTRACE_STREAMS_EXPORT(cuCtxCreate_v4, ctx_create_v4,
                          (CUcontext * ctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev), ctx,
                          params, flags, dev)
CUMEMTRACE_STREAMS_EXPORT(cuGreenCtxCreate, green_ctx_create,
                          (CUgreenCtx * ctx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags), ctx, desc,
                          dev, flags)

#define ROW(NAME, BASE, VERSION, BODY)                                                              \
  {#NAME, BASE, VERSION, false, &wrap_with<&BODY>, reinterpret_cast<void*>(&::NAME), \
   &resolved<next_##NAME>}

// Versions: the PFN_ typedefs of cudaTypedefs.h (cuStreamCreate_v2000,
// cuStreamCreateWithPriority_v5050, cuCtxCreate_v3020 / v11040 / v12050,
// cuGreenCtxCreate_v12040).
static const InterceptedSymbol kStreamSymbols[] = {
    ROW(cuStreamCreate, "cuStreamCreate", 2000, stream_create),
    ROW(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050, stream_create_with_priority),
    ROW(cuCtxCreate, "cuCtxCreate", 2000, ctx_create_v2),
    ROW(cuCtxCreate_v2, "cuCtxCreate", 3020, ctx_create_v2),
    ROW(cuCtxCreate_v3, "cuCtxCreate", 11040, ctx_create_v3),
    ROW(cuCtxCreate_v4, "cuCtxCreate", 12050, ctx_create_v4),
    ROW(cuGreenCtxCreate, "cuGreenCtxCreate", 12040, green_ctx_create),
};

std::span<const InterceptedSymbol> cumemtrace::preload::stream_symbols() { return kStreamSymbols; }
