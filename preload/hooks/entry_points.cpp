// cuGetProcAddress / cuGetProcAddress_v2: the route by which every CUDA
// runtime, shared or static, reaches the driver (it dlsyms only
// cuGetProcAddress from libcuda.so.1), and behind cudaGetDriverEntryPoint*.
// The real lookup runs first, with the caller's arguments; for a memory
// function we return a wrapper that calls exactly the pointer the real
// lookup returned for that name, version and flags (so the ABI the caller
// asked for is the one it gets). Every other name, every failure and every
// status is passed through untouched. cuGetProcAddress itself is wrapped
// too, or a program could fetch the real one through it and bypass us.
//
// Which of our wrappers matches a lookup follows the driver's rules
// (cuGetProcAddress, Driver API "Driver Entry Point Access"): the newest ABI
// whose version is ≤ cudaVersion ("cuMemAlloc" below 3020 is the legacy
// 32-bit cuMemAlloc), and the _ptsz twin when the flags ask for
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. A cudaVersion above the
// newest we know still selects the newest ABI we know: no memory function
// has changed ABI since 11.2, and an unknown newer one would fail the real
// lookup's own rules, not ours.
#define __CUDA_API_VERSION_INTERNAL 1  // declares the 11.x cuGetProcAddress too
#include <cuda.h>

#include <cstring>

#include "hooks/hook_support.h"
#include "hooks/tables.h"
#include "hooks/real_cuda.h"

using namespace cumemtrace::preload;

#define CUMEMTRACE_HOOK extern "C" __attribute__((visibility("default")))

namespace {

constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;

CUresult get_proc_address_v2(decltype(&::cuGetProcAddress_v2) real, const char* symbol, void** pfn,
                             int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (!real) return kNoDriver;
  const CUresult rc = real(symbol, pfn, version, flags, status);
  if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) {
    *pfn = wrap_entry_point(symbol, version, flags, *pfn);
  }
  return rc;
}

// The CUDA 11.3–11.8 form, without the status argument.
CUresult get_proc_address_v1(decltype(&::cuGetProcAddress) real, const char* symbol, void** pfn,
                             int version, cuuint64_t flags) {
  if (!real) return kNoDriver;
  const CUresult rc = real(symbol, pfn, version, flags);
  if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) {
    *pfn = wrap_entry_point(symbol, version, flags, *pfn);
  }
  return rc;
}

// The row of `symbols` that cuGetProcAddress(base, version, flags) selects.
const InterceptedSymbol* select_abi(std::span<const InterceptedSymbol> symbols, const char* base,
                                    int version, bool per_thread) {
  const InterceptedSymbol* legacy = nullptr;
  const InterceptedSymbol* twin = nullptr;
  for (const InterceptedSymbol& s : symbols) {
    if (!s.base || std::strcmp(s.base, base) != 0 || s.version > version) continue;
    const InterceptedSymbol*& best = s.per_thread ? twin : legacy;
    if (!best || s.version > best->version) best = &s;
  }
  // The per-thread twin only of the ABI selected (none of ours has a twin
  // that outlived its legacy ABI).
  if (per_thread && twin && legacy && twin->version >= legacy->version) return twin;
  return legacy;
}

bool could_be_cuda(const char* name) { return name[0] == 'c' && name[1] == 'u'; }

}  // namespace


void* cumemtrace::preload::wrap_entry_point(const char* symbol, int version, std::uint64_t flags,
                                            void* real) {
  // Already ours: the real driver's table can point at our exported hooks
  // when its own symbols were bound to them.
  if (!could_be_cuda(symbol) || inside_cumemtrace(real)) return real;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (auto table : {driver_symbols(), entry_point_symbols(), allocation_query_symbols(), stream_symbols(),
                     capture_symbols(), graph_symbols(), mempool_symbols()}) {
    if (const InterceptedSymbol* s = select_abi(table, symbol, version, per_thread)) {
      return s->substitute(real);
    }
  }
  return real;
}

void* cumemtrace::preload::wrap_symbol(const char* name, void* real) {
  if (!real || !name || !could_be_cuda(name) || inside_cumemtrace(real)) return real;
  for (auto table :
       {driver_symbols(), entry_point_symbols(), runtime_symbols(), allocation_query_symbols(), stream_symbols(),
        capture_symbols(), graph_symbols(), mempool_symbols()}) {
    for (const InterceptedSymbol& s : table) {
      if (std::strcmp(s.symbol, name) == 0) return s.substitute(real);
    }
  }
  return real;
}

static NextSymbol<decltype(&::cuGetProcAddress_v2)> next_cuGetProcAddress_v2{"cuGetProcAddress_v2"};
static NextSymbol<decltype(&::cuGetProcAddress)> next_cuGetProcAddress{"cuGetProcAddress"};

CUMEMTRACE_HOOK CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                     cuuint64_t flags,
                                                     CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address_v2(next_cuGetProcAddress_v2.get(), symbol, pfn, cudaVersion, flags,
                             symbolStatus);
}

CUMEMTRACE_HOOK CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                  cuuint64_t flags) {
  return get_proc_address_v1(next_cuGetProcAddress.get(), symbol, pfn, cudaVersion, flags);
}

static const InterceptedSymbol kEntryPointSymbols[] = {
    {"cuGetProcAddress", "cuGetProcAddress", 11030, false, &wrap_with<&get_proc_address_v1>,
     reinterpret_cast<void*>(&::cuGetProcAddress), &resolved<next_cuGetProcAddress>},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, false, &wrap_with<&get_proc_address_v2>,
     reinterpret_cast<void*>(&::cuGetProcAddress_v2), &resolved<next_cuGetProcAddress_v2>},
};

std::span<const InterceptedSymbol> cumemtrace::preload::entry_point_symbols() {
  return kEntryPointSymbols;
}
