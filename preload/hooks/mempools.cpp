// The driver's memory-pool attributes, as the program reads them: where the
// caching pool serves its stream-ordered allocations, what the device's
// current pool reports of used and reserved memory is adjusted to what the
// program would read bare (pool/glue/mempool_view.h). The runtime's
// cudaMemPoolGetAttribute / SetAttribute reach these through
// cuGetProcAddress, so the driver's functions are all that is hooked.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"
#include "hooks/tables.h"
#include "pool/glue/mempool_view.h"

using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

namespace {

constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;

CUresult pool_get_attribute(decltype(&::cuMemPoolGetAttribute) real, CUmemoryPool pool, CUmemPool_attribute attr,
                            void* value) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  const CUresult rc = real(pool, attr, value);
  if (rc == CUDA_SUCCESS && guard.outermost()) adjust_mempool_attribute(pool, attr, value);
  return rc;
}

CUresult pool_set_attribute(decltype(&::cuMemPoolSetAttribute) real, CUmemoryPool pool, CUmemPool_attribute attr,
                            void* value) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  const CUresult rc = real(pool, attr, value);
  if (rc == CUDA_SUCCESS && guard.outermost()) note_mempool_attribute_set(pool, attr);
  return rc;
}

}  // namespace

static NextSymbol<decltype(&::cuMemPoolGetAttribute)> next_cuMemPoolGetAttribute{"cuMemPoolGetAttribute"};
static NextSymbol<decltype(&::cuMemPoolSetAttribute)> next_cuMemPoolSetAttribute{"cuMemPoolSetAttribute"};

CUMEMTRACE_HOOK CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return pool_get_attribute(next_cuMemPoolGetAttribute.get(), pool, attr, value);
}
CUMEMTRACE_HOOK CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return pool_set_attribute(next_cuMemPoolSetAttribute.get(), pool, attr, value);
}

// Versions: PFN_cuMemPoolGetAttribute_v11020 / SetAttribute_v11020.
static const InterceptedSymbol kMempoolSymbols[] = {
    {"cuMemPoolGetAttribute", "cuMemPoolGetAttribute", 11020, false, &wrap_with<&pool_get_attribute>,
     reinterpret_cast<void*>(&::cuMemPoolGetAttribute), &resolved<next_cuMemPoolGetAttribute>},
    {"cuMemPoolSetAttribute", "cuMemPoolSetAttribute", 11020, false, &wrap_with<&pool_set_attribute>,
     reinterpret_cast<void*>(&::cuMemPoolSetAttribute), &resolved<next_cuMemPoolSetAttribute>},
};

std::span<const InterceptedSymbol> cumemtrace::preload::mempool_symbols() { return kMempoolSymbols; }
