/* simcuda_counters: what the host asked of the simulated device, counted.
 *
 * An extension of the sim's libcuda.so.1 only (tests/sim/README.md,
 * "Counters"): a real driver does not export it, so a program that looks it
 * up at run time finds it on the sim and finds nothing on a GPU. Tests use it
 * to assert what a program (or a profiler's pool inside it) made the host do:
 * how many VMM calls, how many waits for the device, how long it was blocked.
 *
 *   SimcudaCounters c;
 *   if (simcuda_counters_read(&c)) printf("%llu cuMemCreate\n", c.mem_create);
 *
 * Counts are process-wide, start at 0 when the driver loads and only grow.
 * Every call of an entry point counts, whatever it returns (a refused
 * cuMemCreate still cost the host a call); calls the sim makes internally
 * (the runtime's cudaMalloc calling cuMemAlloc_v2 is not internal: it is the
 * driver call a real runtime makes too) do not.
 *
 * Versioning: set `size` to sizeof(SimcudaCounters) before the call. The sim
 * fills at most that many bytes, fields in this order, and sets `size` to
 * the bytes it filled; fields added later go at the end. Returns 0, or -1
 * when `out` is NULL or `size` is below sizeof(out->size).
 *
 * Plain C, so that C programs and ctypes can use it too.
 */
#ifndef SIMCUDA_COUNTERS_H
#define SIMCUDA_COUNTERS_H

#include <dlfcn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The fields after `size`, in order: X(field, what it counts). Each is an
 * unsigned long long. */
#define SIMCUDA_COUNTER_FIELDS(X)                                                      \
  X(mem_create, "cuMemCreate")                                                         \
  X(mem_release, "cuMemRelease")                                                       \
  X(mem_map, "cuMemMap")                                                               \
  X(mem_unmap, "cuMemUnmap")                                                           \
  X(mem_set_access, "cuMemSetAccess")                                                  \
  X(mem_address_reserve, "cuMemAddressReserve")                                        \
  X(mem_address_free, "cuMemAddressFree")                                              \
  X(mem_alloc, "cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged")                 \
  X(mem_free, "cuMemFree_v2")                                                          \
  X(mem_alloc_async, "cuMemAllocAsync, cuMemAllocFromPoolAsync (+ _ptsz)")             \
  X(mem_free_async, "cuMemFreeAsync (+ _ptsz)")                                        \
  X(event_record, "cuEventRecord, cuEventRecordWithFlags (+ _ptsz)")                   \
  X(event_query, "cuEventQuery")                                                       \
  X(stream_wait_event, "cuStreamWaitEvent (+ _ptsz)")                                  \
  X(ctx_synchronize, "cuCtxSynchronize, cuCtxSynchronize_v2")                          \
  X(stream_synchronize, "cuStreamSynchronize (+ _ptsz)")                               \
  X(event_synchronize, "cuEventSynchronize")                                           \
  X(event_create, "cuEventCreate")                                                     \
  X(event_destroy, "cuEventDestroy, cuEventDestroy_v2")                                \
  /* Every call that by its semantics makes the host wait for device work,  */        \
  /* whether or not work was outstanding: the synchronize calls, cuMemFree's */       \
  /* implicit synchronisation, synchronous copies and sets, context reset   */        \
  /* and destruction, cuModuleUnload, cuIpcCloseMemHandle. */                          \
  X(wait_calls, "host waits for the device")                                          \
  /* Those of wait_calls that found work outstanding (other than the copy or */       \
  /* set the call itself queued), and the host time they spent waiting. */            \
  X(blocked_waits, "waits that found work outstanding")                                \
  X(blocked_us, "microseconds the host spent in those waits")                          \
  /* Queued operations that touched memory no longer accessible when they   */        \
  /* ran: each made its context's error CUDA_ERROR_ILLEGAL_ADDRESS. */                 \
  X(device_faults, "device faults")                                                    \
  /* Host time charged by the cost table (SIMCUDA_COSTS), as the table says */        \
  /* (what the waits aimed at, not what the host's clock saw). */                      \
  X(charged_us, "microseconds charged by the cost table")                             \
  /* Queries of the device's graph memory (appended: older readers pass a  */        \
  /* smaller size and get the fields before). */                                       \
  X(graph_mem_attribute, "cuDeviceGetGraphMemAttribute")

typedef struct SimcudaCounters {
  unsigned long long size; /* in: bytes the caller has; out: bytes filled */
#define SIMCUDA_COUNTER_MEMBER(field, what) unsigned long long field;
  SIMCUDA_COUNTER_FIELDS(SIMCUDA_COUNTER_MEMBER)
#undef SIMCUDA_COUNTER_MEMBER
} SimcudaCounters;

/* Exported by the sim's libcuda.so.1 only: do not link against it (a
 * program would then not start on a GPU); look it up with the helpers below. */
int simcuda_counters(SimcudaCounters* out);
typedef int (*simcuda_counters_fn)(SimcudaCounters* out);

/* The sim's simcuda_counters, or NULL where the driver is not the sim. A
 * program linked to libcuda.so finds it in the global scope; a runtime-only
 * program has libcuda.so.1 loaded by the runtime with RTLD_LOCAL, so it asks
 * that already-loaded library (RTLD_NOLOAD: this never loads a driver). */
static inline simcuda_counters_fn simcuda_counters_lookup(void) {
  void* fn = dlsym(RTLD_DEFAULT, "simcuda_counters");
  if (!fn) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib) {
      fn = dlsym(lib, "simcuda_counters");
      dlclose(lib);
    }
  }
  return (simcuda_counters_fn)fn;
}

/* Fills *out; 0 where the driver is not the sim (or refused). */
static inline int simcuda_counters_read(SimcudaCounters* out) {
  simcuda_counters_fn fn = simcuda_counters_lookup();
  out->size = sizeof(*out);
  return fn && fn(out) == 0;
}

#ifdef __cplusplus
}
#endif

#endif /* SIMCUDA_COUNTERS_H */
