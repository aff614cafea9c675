// Stack capture alone, the two unwinders libcumemtrace.so can use, side by
// side: libunwind's unw_backtrace (opened RTLD_LOCAL, as the preload opens
// it) and libgcc's _Unwind_Backtrace. scripts/bench.sh reports the medians.
//
//   bench_unwind [CAPTURES]   prints "<ns unw_backtrace> <ns _Unwind_Backtrace> <frames>"
#include <dlfcn.h>
#include <unwind.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

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

double ns_per_capture(Backtrace backtrace, long captures, int* frames) {
  *frames = capture_at_depth(kFrames + 4, backtrace);  // warm caches
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < captures; ++i) capture_at_depth(kFrames + 4, backtrace);
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
  int frames_libunwind = 0, frames_libgcc = 0;
  const double libunwind_ns = ns_per_capture(unw_backtrace, captures, &frames_libunwind);
  const double libgcc_ns = ns_per_capture(&libgcc_backtrace, captures / 10 + 1, &frames_libgcc);
  std::printf("%.1f %.1f %d\n", libunwind_ns, libgcc_ns, frames_libunwind < frames_libgcc ? frames_libunwind : frames_libgcc);
  return 0;
}
