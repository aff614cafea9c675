// The intercepted CUDA functions, one row per ABI, for the two routes that
// hand out function pointers instead of binding to our exported symbols:
// cuGetProcAddress (and so cudaGetDriverEntryPoint*, and every runtime,
// static or shared) and dlsym on a handle (frameworks that dlopen
// libcudart/libcuda, runtimes that dlsym cuGetProcAddress from libcuda.so.1).
#pragma once

#include <cstdint>
#include <span>

#include "hooks/real_cuda.h"

namespace cumemtrace::preload {

struct InterceptedSymbol {
  const char* symbol;  // exported name, and the `api` recorded: "cuMemAllocAsync_ptsz"
  const char* base;    // the name cuGetProcAddress is asked for: "cuMemAllocAsync";
                       // nullptr for runtime functions (not reachable that way)
  int version;         // the CUDA version that introduced this ABI: the _vNNNN
                       // of its PFN_ typedef in cudaTypedefs.h
  bool per_thread;     // the per-thread-default-stream (_ptsz) twin of `base`
  void* (*wrap)(void* real);  // our wrapper calling exactly `real`
  void* exported;             // our exported hook of that name
  void* (*exported_real)();   // the real function that hook calls (NULL if none loaded)

  // What to hand out for `real`: our exported hook when `real` is the very
  // function it calls (so dlsym and cuGetProcAddress give the program one
  // pointer for one function, as the driver does), else a wrapper bound to
  // `real` (another copy of the library, loaded privately).
  void* substitute(void* real) const {
    return exported_real() == real ? exported : wrap(real);
  }
};

// For a row's exported_real: the function behind an exported hook.
template <auto& Next>
void* resolved() {
  return reinterpret_cast<void*>(Next.get());
}

// Defined next to the hooks they describe.
std::span<const InterceptedSymbol> driver_symbols();      // hooks/driver.cpp
std::span<const InterceptedSymbol> entry_point_symbols();  // hooks/entry_points.cpp
std::span<const InterceptedSymbol> runtime_symbols();     // hooks/runtime.cpp
// Stream and context creation, for the pool's ordering (pool/glue/device_order.h).
std::span<const InterceptedSymbol> stream_symbols();      // hooks/streams.cpp
// Stream capture, so the pool never serves a capture-time request (hooks/capture.h).
std::span<const InterceptedSymbol> capture_symbols();     // hooks/capture.cpp
// Graph instantiation, launch, destruction, memory nodes: graph memory.
std::span<const InterceptedSymbol> graph_symbols();       // hooks/graphs.cpp
// Memory-pool attributes as the program reads them (pool/glue/mempool_view.h).
std::span<const InterceptedSymbol> mempool_symbols();     // hooks/mempools.cpp
// IPC handles, address ranges, pointer attributes (driver and runtime rows).
std::span<const InterceptedSymbol> allocation_query_symbols();  // hooks/ipc.cpp

// dlsym(handle, name) returned `real`: our wrapper for it when `name` is an
// intercepted function, else `real` unchanged.
void* wrap_symbol(const char* name, void* real);

// cuGetProcAddress(symbol, …, version, flags) returned `real`: our wrapper
// for the ABI that lookup selects (newest version ≤ `version`; the _ptsz
// twin under CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), else `real`.
void* wrap_entry_point(const char* symbol, int version, std::uint64_t flags, void* real);

}  // namespace cumemtrace::preload
