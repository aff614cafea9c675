/* cumemtrace marker API: label phases of a program (an epoch, a training
 * step, a request) so cumemtrace's reports can attribute memory to them.
 * Each call writes a `mark` event to the trace (TRACE_FORMAT.md).
 *
 *   #include <cumemtrace/cumemtrace.h>
 *   cumemtrace_range_push("epoch 3");
 *   ...
 *   cumemtrace_range_pop();
 *   cumemtrace_mark("checkpoint saved");
 *
 * Nothing to link: the functions are declared weak and defined by
 * libcumemtrace.so. Run under `cumemtrace run` (or with the library in
 * LD_PRELOAD) the calls reach it; run plainly, the symbols stay unresolved
 * and each call is skipped — the macros below test the function's address
 * first, so the program builds and runs without cumemtrace.
 *
 * The weak references must stay dynamic for the preloaded library to fill
 * them: true for position-independent executables (the default of GCC and
 * Clang on current distributions) and for shared libraries. In a non-PIE
 * executable the linker resolves them to null and the calls are skipped.
 *
 * Names are copied at the call; any bytes are accepted (invalid UTF-8
 * becomes U+FFFD in the trace). Ranges nest per thread, and a pop names
 * the range it closes. C and C++.
 *
 * The query functions further down tell a test harness running inside the
 * traced process (preload/python's pytest plugin) what the program holds,
 * without reading the trace. */
#ifndef CUMEMTRACE_CUMEMTRACE_H
#define CUMEMTRACE_CUMEMTRACE_H

/* libcumemtrace.so itself defines the functions (strong, no macros). */
#ifdef CUMEMTRACE_IMPLEMENTATION
#define CUMEMTRACE_WEAK
#else
#define CUMEMTRACE_WEAK __attribute__((weak))
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An instant event. */
void cumemtrace_mark(const char* name) CUMEMTRACE_WEAK;
/* Opens a range on the calling thread; returns its nesting level (0 for the
 * outermost), as nvtxRangePushA does. */
int cumemtrace_range_push(const char* name) CUMEMTRACE_WEAK;
/* Closes the calling thread's innermost open range; returns the level it
 * had, or a negative value when no range was open. */
int cumemtrace_range_pop(void) CUMEMTRACE_WEAK;

/* ---- Queries: what this process holds now ---------------------------------
 * Counted as `cumemtrace report` counts allocated memory: every allocation
 * the program holds (device, managed, pinned host, cuMemCreate), with the
 * size it asked for, on the device it was made on.
 *
 * Costs nothing until a query function is first called: from then on the
 * library also keeps totals and peaks per device (atomic adds on each
 * allocation and free). Call them from any thread, never from a signal
 * handler; they take only the locks an allocation takes (never the GIL).
 * Structures are extended only at their end: each call writes what the
 * caller's size says it has room for, so a program built against an older
 * header keeps working. */

/* The device argument for all devices together. */
#define CUMEMTRACE_ALL_DEVICES (-1)

struct cumemtrace_usage {
  uint32_t struct_size; /* in: sizeof(struct cumemtrace_usage) */
  int32_t device;       /* out: the device asked for */
  uint64_t live_bytes;  /* held now */
  uint64_t live_count;  /* allocations held now */
  uint64_t peak_bytes;  /* the most held at once since cumemtrace_query_reset_peak()
                           (or since the first query); for all devices
                           together, the highest sum at one moment */
};

/* Fills `*out` for `device` (0..63, or CUMEMTRACE_ALL_DEVICES); 0 on
 * success, -1 for another device, a null `out` or a struct_size under 16. */
int cumemtrace_query_usage(int device, struct cumemtrace_usage* out) CUMEMTRACE_WEAK;

/* Every peak starts again from what is held now. */
void cumemtrace_query_reset_peak(void) CUMEMTRACE_WEAK;

/* A checkpoint (never 0): allocations made after this call are made
 * "since" the value it returns, for cumemtrace_query_live_since and
 * cumemtrace_query_watch. */
uint64_t cumemtrace_query_checkpoint(void) CUMEMTRACE_WEAK;

struct cumemtrace_allocation {
  uint64_t ptr;   /* the address (for cuMemCreate memory, its handle) */
  uint64_t size;  /* what the program asked for */
  int32_t device;
  uint32_t stack; /* its call stack: the trace's stack id, 0 when none */
};

/* The allocations held now that were made since `checkpoint`, largest
 * first: up to `capacity` of them written to `out`, `element_size` bytes
 * apart (sizeof(struct cumemtrace_allocation)). Returns how many there are
 * in all, which may exceed `capacity`. */
size_t cumemtrace_query_live_since(uint64_t checkpoint, struct cumemtrace_allocation* out, size_t capacity,
                                   size_t element_size) CUMEMTRACE_WEAK;

/* Arms the watch: the first allocation after which all devices together
 * hold more than `above_bytes` makes the library keep the largest
 * allocations made since `checkpoint` and held at that moment (up to 64),
 * so a limit's failure can say what held the memory when it was crossed,
 * though it was freed since. Arming again forgets what the last watch
 * kept; UINT64_MAX disarms. */
void cumemtrace_query_watch(uint64_t checkpoint, uint64_t above_bytes) CUMEMTRACE_WEAK;

/* What the watch kept, as cumemtrace_query_live_since gives it; returns how
 * many allocations made since the checkpoint were held when the line was
 * crossed (0: it was not crossed). */
size_t cumemtrace_query_watched(struct cumemtrace_allocation* out, size_t capacity,
                                size_t element_size) CUMEMTRACE_WEAK;

/* The frames of call stack `stack`, innermost first, one line each, fields
 * separated by tabs (a tab or newline in a name becomes a space):
 *   py<TAB>FILE<TAB>LINE<TAB>FUNCTION          a Python frame (LINE 0: unknown)
 *   native<TAB>MODULE<TAB>0xOFFSET<TAB>FUNCTION  a native frame (unknown fields empty)
 * Written to `buf` NUL-terminated, cut to `capacity` - 1 bytes; returns the
 * length of the whole text without its NUL (0: no such stack). Names are
 * looked up in the process at the call: not cheap, never on an allocation. */
size_t cumemtrace_query_stack(uint32_t stack, char* buf, size_t capacity) CUMEMTRACE_WEAK;

#ifdef __cplusplus
}
#endif

/* A function-like macro is not expanded inside its own expansion, so each
 * macro calls the real function when it is there and does nothing
 * otherwise. (`&cumemtrace_mark`, without a call, still names the
 * function.) */
#ifndef CUMEMTRACE_IMPLEMENTATION
#define cumemtrace_mark(name) (cumemtrace_mark ? cumemtrace_mark(name) : (void)0)
#define cumemtrace_range_push(name) (cumemtrace_range_push ? cumemtrace_range_push(name) : -1)
#define cumemtrace_range_pop() (cumemtrace_range_pop ? cumemtrace_range_pop() : -1)
#define cumemtrace_query_usage(device, out) (cumemtrace_query_usage ? cumemtrace_query_usage(device, out) : -1)
#define cumemtrace_query_reset_peak() (cumemtrace_query_reset_peak ? cumemtrace_query_reset_peak() : (void)0)
#define cumemtrace_query_checkpoint() (cumemtrace_query_checkpoint ? cumemtrace_query_checkpoint() : (uint64_t)0)
#define cumemtrace_query_live_since(checkpoint, out, capacity, element_size) \
  (cumemtrace_query_live_since ? cumemtrace_query_live_since(checkpoint, out, capacity, element_size) : (size_t)0)
#define cumemtrace_query_watch(checkpoint, above_bytes) \
  (cumemtrace_query_watch ? cumemtrace_query_watch(checkpoint, above_bytes) : (void)0)
#define cumemtrace_query_watched(out, capacity, element_size) \
  (cumemtrace_query_watched ? cumemtrace_query_watched(out, capacity, element_size) : (size_t)0)
#define cumemtrace_query_stack(stack, buf, capacity) \
  (cumemtrace_query_stack ? cumemtrace_query_stack(stack, buf, capacity) : (size_t)0)
#endif
#undef CUMEMTRACE_WEAK

#endif /* CUMEMTRACE_CUMEMTRACE_H */
