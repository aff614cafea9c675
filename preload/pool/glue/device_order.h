// Ordering the device without waiting for it: what lets the caching pool
// hand a cudaFree'd block out again at once, where the real cudaFree would
// have synchronised the device (and stopped the host from running ahead of
// the GPU: +166% step time on an H100, issue 30).
//
// The rule it rests on (CUDA Runtime API, "Stream synchronization
// behavior"): work on the legacy default stream waits for all earlier work
// on the blocking streams of its context, and later work on a blocking
// stream waits for it; the per-thread default stream "is not a non-blocking
// stream and will synchronize with the legacy default stream". So one event
// recorded on the legacy stream orders all of those at once, and only the
// streams created with CU_STREAM_NON_BLOCKING need an event of their own,
// waited for by the legacy stream before its event, and a wait for that
// event after it. That needs every such stream known: the hooks tell this
// registry of each stream created (cuStreamCreate, cuStreamCreateWithPriority,
// whatever route reached the driver) and destroyed. A stream created later
// waits for the newest ordering's event at creation, so it cannot run ahead
// of work issued before that ordering either.
//
// Where the registry cannot see every stream that may touch the pool's
// memory, ordering refuses (and the pool synchronises as before): a context
// other than the primary ones was created (cuCtxCreate, green contexts:
// their own legacy streams), or work may span devices (pools or
// non-blocking streams on more than one device).
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// The hooks' side. `stream` is a CUstream; `flags` as given to its creation.
void note_stream_created(void* stream, unsigned flags);
void note_stream_destroyed(void* stream);
void note_foreign_context();
void note_pool_device(int dev);

// The pool's side (DriverUpstream::order_device): in the primary context
// `primary` of device `dev`, orders all later work after all earlier work
// and records `fence` (a CUevent) on the legacy stream after that point.
// False when ordering is not possible here, or a driver call failed.
bool order_device_work(int dev, void* primary, void* fence);

}  // namespace cumemtrace::preload
