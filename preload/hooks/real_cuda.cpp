#include "hooks/real_cuda.h"

#include <dlfcn.h>
#include <link.h>

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "text/diagnostics.h"

// glibc's dlsym, shared with the dlsym hook's entry stub (hooks/dlsym.cpp),
// which jumps to it for RTLD_DEFAULT / RTLD_NEXT lookups. Plain C symbols so
// the stub can reach them; accessed with __atomic builtins here.
extern "C" {
__attribute__((visibility("hidden"))) void* cumemtrace_glibc_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* cumemtrace_resolve_glibc_dlsym();
}

namespace cumemtrace::preload {
namespace {

void* no_dlsym(void*, const char*) { return nullptr; }

// Our own extent, so a pointer into libcumemtrace.so is never wrapped again
// and never taken for a real CUDA function.
struct Extent {
  std::uintptr_t lo = 0;
  std::uintptr_t hi = 0;
};

int find_own_extent(dl_phdr_info* info, std::size_t, void* data) {
  auto* extent = static_cast<Extent*>(data);
  const auto marker = reinterpret_cast<std::uintptr_t>(&find_own_extent);
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    const std::uintptr_t end = start + ph.p_memsz;
    lo = std::min(lo, start);
    hi = std::max(hi, end);
    mine |= marker >= start && marker < end;
  }
  if (!mine) return 0;
  *extent = Extent{lo, hi};
  return 1;
}

const Extent& own_extent() {
  // dl_iterate_phdr touches no dlerror state and takes no lock we hold.
  static const Extent extent = [] {
    Extent e;
    dl_iterate_phdr(&find_own_extent, &e);
    return e;
  }();
  return extent;
}

int collect_loaded_paths(dl_phdr_info* info, std::size_t, void* data) {
  // Only objects with a path: the main program ("") is searched before us
  // already, and the vDSO ("linux-vdso.so.1") cannot be opened by name. A
  // library found through a relative LD_LIBRARY_PATH entry is named by a
  // relative path ("build/sim/libcuda.so.1"), which dlopen resolves as the
  // loader did (from the working directory): it counts too.
  if (info->dlpi_name && std::strchr(info->dlpi_name, '/') != nullptr) {
    static_cast<std::vector<std::string>*>(data)->emplace_back(info->dlpi_name);
  }
  return 0;
}

void* find_in_loaded_objects(const char* name) {
  std::vector<std::string> paths;
  // dlopen is not called from inside the iteration (it holds the loader's
  // list lock); the paths are collected first, in load order.
  dl_iterate_phdr(&collect_loaded_paths, &paths);
  const DlsymFn lookup = real_dlsym();
  for (const auto& path : paths) {
    void* handle = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    void* fn = lookup(handle, name);
    ::dlclose(handle);  // drops only the reference NOLOAD took
    if (fn && !inside_cumemtrace(fn)) return fn;
  }
  return nullptr;
}

}  // namespace

DlsymFn real_dlsym() {
  void* fn = __atomic_load_n(&cumemtrace_glibc_dlsym, __ATOMIC_ACQUIRE);
  if (!fn) fn = cumemtrace_resolve_glibc_dlsym();
  return reinterpret_cast<DlsymFn>(fn);
}

void* find_real_symbol(const char* name) {
  const DlsymFn lookup = real_dlsym();
  // Called from here, glibc's dlsym resolves RTLD_NEXT relative to us.
  if (void* fn = lookup(RTLD_NEXT, name); fn && !inside_cumemtrace(fn)) return fn;
  void* fn = find_in_loaded_objects(name);
  // Our failed lookups must not leave an error for the program's next
  // dlerror() (it made no failing call).
  ::dlerror();
  return fn;
}

void* sibling_symbol(const void* fn, const char* name) {
  Dl_info info{};
  if (!::dladdr(fn, &info) || !info.dli_fname) return nullptr;
  void* handle = ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) {
    ::dlerror();
    return nullptr;
  }
  void* sibling = real_dlsym()(handle, name);
  ::dlclose(handle);
  if (!sibling) ::dlerror();
  return sibling;
}

bool inside_cumemtrace(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const Extent& e = own_extent();
  return a >= e.lo && a < e.hi;
}

void wrap_failed(const char* what) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) contract::warn("%s: some allocations are not traced", what);
}

int current_device() {
  static NextSymbol<CUresult (*)(CUdevice*)> ctx_get_device{"cuCtxGetDevice"};
  CUdevice dev = 0;
  const auto fn = ctx_get_device.get();
  if (!fn || fn(&dev) != CUDA_SUCCESS) return 0;
  return dev;
}

int device_of_pointer(std::uintptr_t ptr) {
  static NextSymbol<CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)> get_attribute{
      "cuPointerGetAttribute"};
  int ordinal = 0;
  const auto fn = get_attribute.get();
  if (fn && fn(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) == CUDA_SUCCESS) return ordinal;
  return current_device();
}

bool query_device_from_driver(int ordinal, DeviceDescription& out) {
  static NextSymbol<CUresult (*)(CUdevice*, int)> device_get{"cuDeviceGet"};
  static NextSymbol<CUresult (*)(char*, int, CUdevice)> device_get_name{"cuDeviceGetName"};
  static NextSymbol<CUresult (*)(size_t*, CUdevice)> device_total_mem{"cuDeviceTotalMem_v2"};
  const auto get = device_get.get();
  const auto get_name = device_get_name.get();
  const auto total_mem = device_total_mem.get();
  if (!get || !get_name || !total_mem) return false;
  CUdevice dev{};
  if (get(&dev, ordinal) != CUDA_SUCCESS) return false;
  char name[256] = {};
  if (get_name(name, sizeof name - 1, dev) != CUDA_SUCCESS) return false;
  size_t total = 0;
  if (total_mem(&total, dev) != CUDA_SUCCESS) return false;
  out.name = name;
  out.total_bytes = total;
  return true;
}

}  // namespace cumemtrace::preload

extern "C" void* cumemtrace_resolve_glibc_dlsym() {
  // RTLD_NEXT from here: the definition after ours, glibc's (or that of an
  // interposer loaded after us, which is what the program would reach too).
  void* fn = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!fn) {
    fn = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");  // glibc before 2.34 (libdl)
    ::dlerror();  // the failed first attempt must not show in the program's dlerror()
  }
  if (!fn) fn = reinterpret_cast<void*>(&cumemtrace::preload::no_dlsym);
  __atomic_store_n(&cumemtrace_glibc_dlsym, fn, __ATOMIC_RELEASE);
  return fn;
}
