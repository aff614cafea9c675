// Defines probe_value() and looks up "the next" probe_value with RTLD_NEXT,
// as an interposer looks up the function it wraps. Linked before probe_b.
#include <dlfcn.h>

extern "C" int probe_value() { return 'A'; }

extern "C" int probe_next_value() {
  const auto next = reinterpret_cast<int (*)()>(dlsym(RTLD_NEXT, "probe_value"));
  return next ? next() : 0;
}
