// The caching pools of libcumemtrace.so (CUMEMTRACE_POOL=caching): one
// DevicePool per device, made on first use over a DriverUpstream
// (pool/glue/driver_upstream.h), whose segment changes become `segment_alloc` /
// `segment_free` events and whose state becomes `pool` samples. The hooks
// reach it through hook_support; see device_pool.h for how each CUDA call
// maps onto the pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cumemtrace/pool/device_pool.h"

namespace cumemtrace::preload {

// The pool of the device of the calling thread's current context, made on
// first use. Null when no context is current or no pool can work on the
// device (driver functions missing, primary context unavailable): the call
// then passes through to CUDA.
pool::DevicePool* current_device_pool(int* dev);

// The pool of `dev` if one was made, else null (makes none).
pool::DevicePool* pool_of_device(int dev);

// The pool whose memory holds `ptr` (lock-free), null if none.
pool::DevicePool* pool_owning(std::uintptr_t ptr, int* dev);

// The pool of the device whose primary context is `ctx` (null: the calling
// thread's current context); null if that is not a primary context we pool.
// A synchronisation of that context covers all the pool's memory's work.
pool::DevicePool* pool_of_context(void* ctx);

// The driver's free and total bytes of `dev` (cuMemGetInfo in its primary
// context), through the pool of `dev` if one was made; false otherwise.
bool pool_driver_memory_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes);

// Calls `fn(pool)` for each pool made so far.
void for_each_pool(void (*fn)(pool::DevicePool&, void*), void* arg);

// A `pool` sample of `dev` if CUMEMTRACE_POOL_SAMPLE_MS passed since the
// last (a coarse clock read and a compare when not due).
void sample_pool_if_due(int dev);

// After a successful reset of `dev` (cudaDeviceReset,
// cuDevicePrimaryCtxReset): the reset freed every segment, so each gets its
// segment_free and the pool forgets them.
void pool_device_reset(int dev);

// The pool's handle for a stream as the trace records it (stream_handle()):
// the per-thread default stream becomes a handle unique to the calling
// thread, the legacy stream (0x1) the same as 0.
std::uintptr_t pool_stream(std::uintptr_t recorded);

}  // namespace cumemtrace::preload
