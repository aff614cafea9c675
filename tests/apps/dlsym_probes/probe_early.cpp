// Preloaded after libcumemtrace.so, so its constructor runs before ours:
// dlsym is called before libcumemtrace.so is initialised. Exits with 7 if
// any lookup fails.
#include <dlfcn.h>
#include <unistd.h>

namespace {

__attribute__((constructor)) void look_up_early() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!dlsym(RTLD_DEFAULT, "malloc") || !dlsym(RTLD_NEXT, "free") || !libc ||
      !dlsym(libc, "printf")) {
    _exit(7);
  }
  dlclose(libc);
}

}  // namespace
