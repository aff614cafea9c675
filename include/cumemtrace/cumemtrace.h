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
 * the range it closes. C and C++. */
#ifndef CUMEMTRACE_CUMEMTRACE_H
#define CUMEMTRACE_CUMEMTRACE_H

/* libcumemtrace.so itself defines the functions (strong, no macros). */
#ifdef CUMEMTRACE_IMPLEMENTATION
#define CUMEMTRACE_WEAK
#else
#define CUMEMTRACE_WEAK __attribute__((weak))
#endif

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
#endif
#undef CUMEMTRACE_WEAK

#endif /* CUMEMTRACE_CUMEMTRACE_H */
