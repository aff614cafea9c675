// Stack capture alone, the unwinders libcumemtrace.so can use, side by
// side: libunwind's unw_backtrace (opened RTLD_LOCAL, as the preload opens
// it), libgcc's _Unwind_Backtrace, and the preload's own CFI walker
// (stacks/frame_walker.h), both walking (a different stack position each
// time, so its memo never answers) and answered from its memo (the same
// position each time, as a loop allocating from one call site).
// scripts/bench.sh reports the medians.
//
//   bench_unwind [CAPTURES]   prints "<ns unw_backtrace> <ns _Unwind_Backtrace> <frames>
//                                     <ns CFI walker, walking> <ns CFI walker, remembered>"
#include <alloca.h>
#include <dlfcn.h>
#include <unwind.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "stacks/frame_walker.h"

namespace {

constexpr int kFrames = 32;  // CUMEMTRACE_STACKS' default
using Backtrace = int (*)(void** buffer, int size);

struct Walk {
  void** out;
  int count;
};

_Unwind_Reason_Code step(_Unwind_Context* context, void* arg) {
  auto* walk = static_cast<Walk*>(arg);
  if (walk->count >= kFrames) return _URC_END_OF_STACK;
  walk->out[walk->count++] = reinterpret_cast<void*>(_Unwind_GetIP(context));
  return _URC_NO_REASON;
}

int libgcc_backtrace(void** out, int) {
  Walk walk{out, 0};
  _Unwind_Backtrace(&step, &walk);
  return walk.count;
}

volatile int g_sink = 0;

// A call chain deeper than kFrames, so each capture walks kFrames frames.
__attribute__((noinline)) int capture_at_depth(int depth, Backtrace backtrace) {
  if (depth > 0) {
    const int frames = capture_at_depth(depth - 1, backtrace);
    g_sink = g_sink + 1;  // not a tail call
    return frames;
  }
  void* ips[kFrames];
  return backtrace(ips, kFrames);
}

// The chain, started `shift` bytes lower on the stack.
__attribute__((noinline)) int capture_shifted(std::size_t shift, Backtrace backtrace) {
  volatile char* pad = static_cast<char*>(alloca(shift + 16));
  pad[0] = 0;
  const int frames = capture_at_depth(kFrames + 4, backtrace);
  g_sink = g_sink + pad[0];
  return frames;
}

// `positions` stack positions in turn: 1, the same one every time.
double ns_per_capture(Backtrace backtrace, long captures, int* frames, int positions = 1) {
  *frames = capture_shifted(0, backtrace);  // warm caches
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < captures; ++i) capture_shifted(static_cast<std::size_t>(i % positions) * 16, backtrace);
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(captures);
}

}  // namespace

int main(int argc, char** argv) {
  const long captures = argc > 1 ? std::atol(argv[1]) : 200'000;
  if (captures <= 0) {
    std::fprintf(stderr, "usage: bench_unwind [CAPTURES > 0]\n");
    return 2;
  }
  void* libunwind = dlopen(CUMEMTRACE_LIBUNWIND_SONAME, RTLD_LAZY | RTLD_LOCAL);
  const auto unw_backtrace = libunwind ? reinterpret_cast<Backtrace>(dlsym(libunwind, "unw_backtrace")) : nullptr;
  if (!unw_backtrace) {
    std::fprintf(stderr, "bench_unwind: cannot load %s\n", CUMEMTRACE_LIBUNWIND_SONAME);
    return 3;
  }
  namespace walker = cumemtrace::preload::frame_walker;
  if (!walker::available()) {
    std::fprintf(stderr, "bench_unwind: the CFI walker is not available here\n");
    return 3;
  }
  int frames_libunwind = 0, frames_libgcc = 0, frames_walked = 0, frames_remembered = 0;
  const double libunwind_ns = ns_per_capture(unw_backtrace, captures, &frames_libunwind);
  const double libgcc_ns = ns_per_capture(&libgcc_backtrace, captures / 10 + 1, &frames_libgcc);
  // More positions than the memo holds for one thread: every capture walks.
  const double walked_ns = ns_per_capture(&walker::backtrace, captures, &frames_walked, 1000);
  const double remembered_ns = ns_per_capture(&walker::backtrace, captures, &frames_remembered);
  const walker::Counters counters = walker::thread_counters();
  if (frames_walked != frames_libunwind || frames_remembered != frames_libunwind || counters.fell_back != 0) {
    std::fprintf(stderr, "bench_unwind: the walker gave %d/%d frames (libunwind %d), %llu handed on\n",
                 frames_walked, frames_remembered, frames_libunwind,
                 static_cast<unsigned long long>(counters.fell_back));
    return 4;
  }
  std::printf("%.1f %.1f %d %.1f %.1f\n", libunwind_ns, libgcc_ns,
              frames_libunwind < frames_libgcc ? frames_libunwind : frames_libgcc, walked_ns, remembered_ns);
  return 0;
}
