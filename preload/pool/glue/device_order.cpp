#include "pool/glue/device_order.h"

#include <cuda.h>
#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "hooks/real_cuda.h"

namespace cumemtrace::preload {
namespace {

// The real driver functions (never our hooks: these calls are the pool's).
#define CUMEMTRACE_ORDER_FN(NAME, SYMBOL) NextSymbol<decltype(&::SYMBOL)> NAME{#SYMBOL}
struct Calls {
  CUMEMTRACE_ORDER_FN(ctx_get_device, cuCtxGetDevice);
  CUMEMTRACE_ORDER_FN(event_create, cuEventCreate);
  CUMEMTRACE_ORDER_FN(event_record, cuEventRecord);
  CUMEMTRACE_ORDER_FN(event_destroy, cuEventDestroy_v2);
  CUMEMTRACE_ORDER_FN(event_query, cuEventQuery);
  CUMEMTRACE_ORDER_FN(stream_wait_event, cuStreamWaitEvent);
  CUMEMTRACE_ORDER_FN(stream_synchronize, cuStreamSynchronize);
  bool loaded() {
    return ctx_get_device.get() && event_create.get() && event_record.get() && event_destroy.get() &&
           event_query.get() && stream_wait_event.get();
  }
};
#undef CUMEMTRACE_ORDER_FN

Calls& calls() {
  static Calls c;  // constant-initialised
  return c;
}

constexpr int kMaxDevices = 64;

struct NonBlockingStream {
  CUstream stream;
  int dev;
  CUevent event;  // recorded on it at each ordering; made at the first
};

// A destroyed non-blocking stream's last work: cuStreamDestroy returns at
// once "in case the device is still doing work in the stream", which then
// completes (CUDA Driver API, cuStreamDestroy), so until this event has
// completed the orderings still put the legacy stream's next work after it.
// Without it an ordering found the pages of a buffer whose last use was
// queued on a destroyed stream idle, and the pool unmapped them under that
// use (tests/apps/pool_destroyed_stream.cpp: an illegal address).
struct RetiredStream {
  CUevent last_work;
  int dev;
};

struct Registry {
  std::mutex mu;
  std::vector<NonBlockingStream> streams;
  std::vector<RetiredStream> retired;
  // The legacy stream's event of the newest ordering on each device (the
  // non-blocking streams wait for it); made at the first.
  CUevent newest[kMaxDevices] = {};
  bool foreign_context = false;
  std::uint64_t pool_devices = 0;  // bit per device with a pool (dev < 64)
  bool pool_beyond_64 = false;
};

// Never destroyed: hooks run during exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// A fork child starts from nothing: the parent's streams and events are not
// its own (every CUDA call fails there anyway), and a lock held by a parent
// thread must not be inherited held.
void forget_in_child() { new (&registry()) Registry; }

__attribute__((constructor)) void register_order_fork_handler() {
  pthread_atfork(nullptr, nullptr, &forget_in_child);
}

bool single_device(const Registry& r, int dev) {
  if (r.pool_beyond_64 || dev < 0 || dev >= kMaxDevices) return false;
  if ((r.pool_devices & ~(std::uint64_t{1} << dev)) != 0) return false;
  return std::all_of(r.streams.begin(), r.streams.end(), [dev](const NonBlockingStream& s) { return s.dev == dev; }) &&
         std::all_of(r.retired.begin(), r.retired.end(), [dev](const RetiredStream& s) { return s.dev == dev; });
}

}  // namespace

void note_stream_created(void* stream, unsigned flags) {
  if (!(flags & CU_STREAM_NON_BLOCKING) || !stream) return;
  Calls& c = calls();
  if (!c.loaded()) return;
  CUdevice dev = -1;
  c.ctx_get_device.get()(&dev);
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.streams.push_back({static_cast<CUstream>(stream), static_cast<int>(dev), nullptr});
  // Memory handed out after an ordering may still be in use by work issued
  // before it, which the legacy stream's work so far follows: the new
  // stream, which no ordering covered yet, starts after that (a no-op once
  // it has completed). In the stream's own context, current here.
  if (dev >= 0 && dev < kMaxDevices && r.newest[dev]) {
    CUevent now = nullptr;
    if (c.event_create.get()(&now, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
    if (c.event_record.get()(now, CU_STREAM_LEGACY) == CUDA_SUCCESS)
      c.stream_wait_event.get()(static_cast<CUstream>(stream), now, 0);
    c.event_destroy.get()(now);
  }
}

void note_stream_destroyed(void* stream) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = std::find_if(r.streams.begin(), r.streams.end(),
                         [stream](const NonBlockingStream& s) { return s.stream == stream; });
  if (it == r.streams.end()) return;
  Calls& c = calls();
  if (c.loaded()) {
    // Called before the real cuStreamDestroy: the stream still takes work.
    // Its last work is marked now for the orderings to come (RetiredStream);
    // if that cannot be done, it is waited for here, once, which is what
    // the real cudaFree of a buffer it used would have done anyway.
    CUevent last = nullptr;
    const auto stream_handle = static_cast<CUstream>(stream);
    if (c.event_create.get()(&last, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
        c.event_record.get()(last, stream_handle) == CUDA_SUCCESS) {
      r.retired.push_back({last, it->dev});
    } else {
      if (last) c.event_destroy.get()(last);
      if (auto sync = c.stream_synchronize.get()) sync(stream_handle);
    }
    // An event still recorded may be destroyed: "resources ... released
    // automatically when the device has completed the event" (cuEventDestroy).
    if (it->event) c.event_destroy.get()(it->event);
  }
  r.streams.erase(it);
}

void note_foreign_context() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.foreign_context = true;
}

void note_pool_device(int dev) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (dev >= 0 && dev < kMaxDevices) r.pool_devices |= std::uint64_t{1} << dev;
  else r.pool_beyond_64 = true;
}

bool order_device_work(int dev, void* /*primary: current here*/, void* fence) {
  Calls& c = calls();
  if (!c.loaded()) return false;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (r.foreign_context || !single_device(r, dev)) return false;
  const auto record = c.event_record.get();
  const auto wait = c.stream_wait_event.get();
  auto event_for = [&](CUevent* e) {
    return *e != nullptr || c.event_create.get()(e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  };
  // Every non-blocking stream's work so far, before the legacy stream's
  // next work...
  for (NonBlockingStream& s : r.streams) {
    if (!event_for(&s.event) || record(s.event, s.stream) != CUDA_SUCCESS ||
        wait(CU_STREAM_LEGACY, s.event, 0) != CUDA_SUCCESS)
      return false;
  }
  // ...and the work that destroyed ones still had, until it has completed.
  for (std::size_t i = 0; i < r.retired.size();) {
    // Done, or never to be (an error): no longer waited for.
    if (c.event_query.get()(r.retired[i].last_work) != CUDA_ERROR_NOT_READY) {
      c.event_destroy.get()(r.retired[i].last_work);
      r.retired[i] = r.retired.back();
      r.retired.pop_back();
      continue;
    }
    if (wait(CU_STREAM_LEGACY, r.retired[i].last_work, 0) != CUDA_SUCCESS) return false;
    ++i;
  }
  // ...which orders every blocking stream's too; the fence marks the point.
  if (record(static_cast<CUevent>(fence), CU_STREAM_LEGACY) != CUDA_SUCCESS) return false;
  // And every non-blocking stream's later work after that point (the fence
  // is the pool's to destroy, so the streams wait for an event of ours).
  if (!event_for(&r.newest[dev])) return false;
  if (!r.streams.empty() && record(r.newest[dev], CU_STREAM_LEGACY) != CUDA_SUCCESS) return false;
  for (NonBlockingStream& s : r.streams)
    if (wait(s.stream, r.newest[dev], 0) != CUDA_SUCCESS) return false;
  return true;
}

}  // namespace cumemtrace::preload
