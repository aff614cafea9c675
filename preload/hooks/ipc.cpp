// What a program may ask the driver about an allocation, answered for the
// allocation it made rather than for the pool segment it lies in (DESIGN.md,
// "The instrumented caching pool"): IPC memory handles, cuMemGetAddressRange
// and the range attributes of cuPointerGetAttribute(s).
//
// IPC. cuIpcGetMemHandle "takes a pointer to the base of an existing device
// memory allocation created with cuMemAlloc" (cuda.h); the process that
// opens the handle maps that driver allocation and gets its base. A pool
// block usually lies inside a larger segment, so a handle of it would open
// the segment's base: the opener would read and write a neighbour's memory
// without any error. So a handle is given only for a block that starts an
// ordinary segment (ContainingBlock::shareable: the opener then gets exactly
// the program's pointer); anything else in the pool is refused with the
// documented CUDA_ERROR_INVALID_VALUE / cudaErrorInvalidValue (what the
// driver answers for memory it cannot export, e.g. from cuMemCreate), an
// `error` event (`what`: ipc_pooled_memory) and one warning naming the fix.
// PyTorch's caching allocator, the usual IPC user (torch.multiprocessing),
// is not served by the pool by default (hooks/step_aside.cpp), so its
// segments are the driver's own and share as they would without us.
//
// Ranges. cuMemGetAddressRange and the RANGE_START_ADDR / RANGE_SIZE
// attributes name the live block and the size the program asked for; memory
// of the pool that is in no live block (freed) is answered as the driver
// answers for memory nobody allocated: CUDA_ERROR_NOT_FOUND from
// cuMemGetAddressRange, CUDA_ERROR_INVALID_VALUE from cuPointerGetAttribute.
// IS_LEGACY_CUDA_IPC_CAPABLE says whether the handle would be given. The
// MAPPING_* attributes describe the driver's mapping and stay the driver's.
// cudaPointerGetAttributes has no range field; it reaches the driver through
// cuPointerGetAttributes, hooked here.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "text/diagnostics.h"
#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"
#include "hooks/tables.h"
#include "pool/glue/pool_glue.h"

using namespace cumemtrace::preload;
using cumemtrace::pool::Containing;
using cumemtrace::pool::ContainingBlock;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

namespace {

constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;
constexpr cudaError_t kNoRuntime = cudaErrorSharedObjectSymbolNotFound;

// The pool block at ptr when this call is the outermost hook and the
// caching pool owns ptr; not_owned otherwise (the driver answers).
Containing pooled(bool outermost, std::uintptr_t ptr, ContainingBlock* block) noexcept {
  if (!outermost || ptr == 0 || !caching_pool()) return Containing::not_owned;
  try {
    int dev = 0;
    const cumemtrace::pool::DevicePool* pool = pool_owning(ptr, &dev);
    return pool ? pool->find_containing(ptr, block) : Containing::not_owned;
  } catch (...) {
    return Containing::not_owned;
  }
}

// Whether an IPC handle of ptr may be given; records and warns when not.
bool may_export(const char* api, Containing where, const ContainingBlock& block, std::uintptr_t ptr) noexcept {
  if (where == Containing::not_owned || (where == Containing::live && block.shareable)) return true;
  if (where == Containing::not_live) return false;  // freed memory: the program's own error
  try {
    recorder().on_error(api, ptr, "ipc_pooled_memory");
  } catch (...) {
  }
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    cumemtrace::contract::warn(
        "%s refused for 0x%zx: it lies in a segment of cumemtrace's caching pool, and the process that opens "
        "the handle would map the segment, not this allocation; to share device memory between processes run "
        "with --pool passthrough (CUMEMTRACE_POOL=passthrough)",
        api, static_cast<std::size_t>(ptr));
  }
  return false;
}

CUresult ipc_get_mem_handle(decltype(&::cuIpcGetMemHandle) real, CUipcMemHandle* handle, CUdeviceptr ptr) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  ContainingBlock block;
  const Containing where = pooled(guard.outermost(), static_cast<std::uintptr_t>(ptr), &block);
  if (!may_export("cuIpcGetMemHandle", where, block, static_cast<std::uintptr_t>(ptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return real(handle, ptr);
}

cudaError_t ipc_get_mem_handle_runtime(decltype(&::cudaIpcGetMemHandle) real, cudaIpcMemHandle_t* handle,
                                       void* ptr) {
  if (!real) return kNoRuntime;
  ReentryGuard guard;
  ContainingBlock block;
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!may_export("cudaIpcGetMemHandle", pooled(guard.outermost(), address, &block), block, address)) {
    // The runtime refuses a host address with its invalid-value error and
    // sets its last-error state itself, as for any refused call.
    return real(handle, not_a_device_pointer());
  }
  return real(handle, ptr);
}

CUresult mem_get_address_range(decltype(&::cuMemGetAddressRange_v2) real, CUdeviceptr* base, size_t* size,
                               CUdeviceptr ptr) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  ContainingBlock block;
  switch (pooled(guard.outermost(), static_cast<std::uintptr_t>(ptr), &block)) {
    case Containing::not_owned: return real(base, size, ptr);
    case Containing::not_live: return CUDA_ERROR_NOT_FOUND;
    case Containing::live: break;
  }
  // Both out-parameters are optional (cuda.h).
  if (base) *base = static_cast<CUdeviceptr>(block.base);
  if (size) *size = block.size;
  return CUDA_SUCCESS;
}

// One attribute of a live pool block, over what the driver wrote for the
// segment. False when the driver's answer stands.
bool patch_attribute(CUpointer_attribute attribute, void* data, Containing where, const ContainingBlock& block) {
  if (!data || where == Containing::not_owned) return false;
  const bool live = where == Containing::live;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = live ? static_cast<CUdeviceptr>(block.base) : 0;
      return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = live ? block.size : 0;
      return true;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      // cuda.h says "a boolean" without its width (cuda-python reads an
      // int): the driver's own answer stands when the handle would be given,
      // and a refusal clears only the first byte, which is 0 either way.
      if (live && block.shareable) return false;
      *static_cast<unsigned char*>(data) = 0;
      return true;
    default: return false;
  }
}

CUresult pointer_get_attribute(decltype(&::cuPointerGetAttribute) real, void* data, CUpointer_attribute attribute,
                               CUdeviceptr ptr) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  ContainingBlock block;
  const Containing where = pooled(guard.outermost(), static_cast<std::uintptr_t>(ptr), &block);
  if (where == Containing::not_live) return CUDA_ERROR_INVALID_VALUE;
  const CUresult rc = real(data, attribute, ptr);
  if (rc == CUDA_SUCCESS) patch_attribute(attribute, data, where, block);
  return rc;
}

CUresult pointer_get_attributes(decltype(&::cuPointerGetAttributes) real, unsigned int count,
                                CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  if (!real) return kNoDriver;
  ReentryGuard guard;
  const CUresult rc = real(count, attributes, data, ptr);
  if (rc != CUDA_SUCCESS || !attributes || !data) return rc;
  ContainingBlock block;
  const Containing where = pooled(guard.outermost(), static_cast<std::uintptr_t>(ptr), &block);
  for (unsigned int i = 0; i < count; ++i) patch_attribute(attributes[i], data[i], where, block);
  return rc;
}

}  // namespace

#define CUMEMTRACE_DRIVER_EXPORT(NAME, BODY, PARAMS, ...)  \
  static NextSymbol<decltype(&::NAME)> next_##NAME{#NAME}; \
  CUMEMTRACE_HOOK CUresult CUDAAPI NAME PARAMS { return BODY(next_##NAME.get(), __VA_ARGS__); }

CUMEMTRACE_DRIVER_EXPORT(cuIpcGetMemHandle, ipc_get_mem_handle, (CUipcMemHandle * handle, CUdeviceptr ptr),
                         handle, ptr)
CUMEMTRACE_DRIVER_EXPORT(cuMemGetAddressRange_v2, mem_get_address_range,
                         (CUdeviceptr * base, size_t* size, CUdeviceptr ptr), base, size, ptr)
CUMEMTRACE_DRIVER_EXPORT(cuPointerGetAttribute, pointer_get_attribute,
                         (void* data, CUpointer_attribute attribute, CUdeviceptr ptr), data, attribute, ptr)
CUMEMTRACE_DRIVER_EXPORT(cuPointerGetAttributes, pointer_get_attributes,
                         (unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr),
                         count, attributes, data, ptr)

static NextSymbol<decltype(&::cudaIpcGetMemHandle)> next_cudaIpcGetMemHandle{"cudaIpcGetMemHandle"};
CUMEMTRACE_HOOK cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  return ipc_get_mem_handle_runtime(next_cudaIpcGetMemHandle.get(), handle, ptr);
}

// Versions: the PFN_*_vNNNN typedefs of cudaTypedefs.h. Runtime rows have no
// base name (cuGetProcAddress does not hand out runtime functions).
#define ROW(NAME, BASE, VERSION, BODY)                                                   \
  {#NAME, BASE, VERSION, false, &wrap_with<&BODY>, reinterpret_cast<void*>(&::NAME), \
   &resolved<next_##NAME>}

static const InterceptedSymbol kAllocationQuerySymbols[] = {
    ROW(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, ipc_get_mem_handle),
    ROW(cuMemGetAddressRange_v2, "cuMemGetAddressRange", 3020, mem_get_address_range),
    ROW(cuPointerGetAttribute, "cuPointerGetAttribute", 4000, pointer_get_attribute),
    ROW(cuPointerGetAttributes, "cuPointerGetAttributes", 7000, pointer_get_attributes),
    ROW(cudaIpcGetMemHandle, nullptr, 0, ipc_get_mem_handle_runtime),
};

std::span<const InterceptedSymbol> cumemtrace::preload::allocation_query_symbols() {
  return kAllocationQuerySymbols;
}
