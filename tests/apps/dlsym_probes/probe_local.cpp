// Loaded with dlopen(RTLD_LOCAL): its dependency probe_local_dep is in its
// own scope only, where glibc's RTLD_DEFAULT lookup from here finds it.
#include <dlfcn.h>

extern "C" int probe_default_lookup() {
  return dlsym(RTLD_DEFAULT, "probe_local_only") != nullptr;
}
