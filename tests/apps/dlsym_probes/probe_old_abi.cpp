// A library built against glibc before 2.34, where dlsym lives in libdl
// with version GLIBC_2.2.5 (NVIDIA's own libraries reference that version).
#include <dlfcn.h>

__asm__(".symver dlsym, dlsym@GLIBC_2.2.5");

extern "C" void* probe_old_dlsym(void* handle, const char* name) { return dlsym(handle, name); }
