// Modules, libraries, functions and the occupancy model (the linker is in
// drv_link.cpp, the launches and occupancy queries in drv_launch.cpp). A module is
// what its image declares (drv_image.cpp): kernels that compute nothing
// (drv_launch.cpp) and globals that are real device memory. Functions and
// their attributes are as documented in cuda.h (CUDA 13), the "doc" cited
// below unless another source is named.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <shared_mutex>
#include <string>

#include "drv_image.h"
#include "drv_internal.h"

namespace sim {

struct Library;
struct Module;

struct Function {
  Module* mod = nullptr;
  std::string name;
  // Settable with cuFuncSetAttribute (cuda.h, CUfunction_attribute).
  int max_dynamic_shared = 0;
  int carveout = -1;
  int cluster[3] = {0, 0, 0};
  int non_portable_cluster = 0;
  int cluster_policy = 0;
  CUfunc_cache cache = CU_FUNC_CACHE_PREFER_NONE;
};

struct Global {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
};

struct Module {
  Context* ctx = nullptr;
  Library* lib = nullptr;  // set for a library's per-context module
  Image image;
  std::vector<std::unique_ptr<Function>> funcs;  // image order
  std::map<std::string, Global> globals;
};

struct Kernel {
  Library* lib = nullptr;
  std::string name;
};

struct Library {
  Image image;
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::map<Context*, Module*> modules;  // loaded on first use in a context
};

namespace {

// Every live handle; a handle not found here is invalid (unloaded or never
// made). Guards the objects' contents too.
struct Registry {
  std::mutex mu;
  std::set<Module*> modules;
  std::unordered_map<Function*, Module*> functions;
  std::set<Library*> libraries;
  std::unordered_map<Kernel*, Library*> kernels;
};
Registry& R() {
  static auto* r = new Registry;  // never destroyed, see drv_internal.h
  return *r;
}

// The simulated device's numbers (drv_device.cpp), read through its
// attribute query so both stay one.
int dev_attr(Context* c, CUdevice_attribute a) {
  int v = 0;
  cuDeviceGetAttribute(&v, a, c->dev->ordinal);
  return v;
}

// A register count for every kernel: the sim compiles nothing, and 32 per
// thread lets a 1024-thread block fit (65536 registers per block).
constexpr int kNumRegs = 32;
constexpr int kDefaultDynamicShared = 48 * 1024;  // "48 KB" without opt-in (Programming Guide)

// Frees a module's globals and forgets it and its functions. R().mu held.
void unload_locked(Module* m) {
  for (auto& g : m->globals) {
    if (g.second.ptr) free_device(g.second.ptr, false);
  }
  for (auto& f : m->funcs) R().functions.erase(f.get());
  if (m->lib) m->lib->modules.erase(m->ctx);
  R().modules.erase(m);
  delete m;
}

// Loads an image into ctx: one device allocation per global, zero-filled.
// R().mu held.
CUresult load_locked(Context* c, Image img, Library* lib, Module** out) {
  auto m = std::make_unique<Module>();
  m->ctx = c;
  m->lib = lib;
  for (const auto& g : img.globals) {
    if (m->globals.count(g.first)) continue;
    Global gl;
    gl.size = g.second;
    // The driver's memory, through the internal path: not cuMemAlloc, so a
    // tool hooking the allocation entry points does not see it.
    CUresult r = alloc_device(c, g.second ? g.second : 1, AllocKind::Module, nullptr, &gl.ptr);
    if (r != CUDA_SUCCESS) {
      for (auto& done : m->globals) free_device(done.second.ptr, false);
      return r;
    }
    {
      std::shared_lock<std::shared_mutex> lk(remap_lock());
      std::memset(reinterpret_cast<void*>(gl.ptr), 0, gl.size);
    }
    m->globals[g.first] = gl;
  }
  for (const std::string& e : img.entries) {
    bool dup = false;
    for (auto& f : m->funcs) dup |= f->name == e;
    if (dup) continue;
    auto f = std::make_unique<Function>();
    f->mod = m.get();
    f->name = e;
    f->max_dynamic_shared = kDefaultDynamicShared;
    R().functions[f.get()] = m.get();
    m->funcs.push_back(std::move(f));
  }
  m->image = std::move(img);
  Module* raw = m.release();
  R().modules.insert(raw);
  if (lib) lib->modules[c] = raw;
  *out = raw;
  return CUDA_SUCCESS;
}

CUresult load_module(CUmodule* out, const void* data, std::size_t size) {
  if (!out || !data) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  Image img;
  if (CUresult r = parse_image(data, size, &img)) return r;
  std::lock_guard<std::mutex> lk(R().mu);
  Module* m = nullptr;
  if (CUresult r = load_locked(c, std::move(img), nullptr, &m)) return r;
  *out = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

bool read_file(const char* path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

bool valid_options(unsigned n, const void* keys, const void* values) {
  return n == 0 || (keys && values);
}

Module* find_module(CUmodule h) {
  auto* m = reinterpret_cast<Module*>(h);
  return R().modules.count(m) ? m : nullptr;
}

// The shape of the entry points on a module, library or kernel handle: the
// driver initialised, the registry locked, a live handle (find gives null
// for any other: CUDA_ERROR_INVALID_HANDLE), then fn on what it names.
template <typename Find, typename Handle, typename F>
CUresult with_live(Find find, Handle h, F fn) {
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(R().mu);
  auto* object = find(h);
  if (!object) return CUDA_ERROR_INVALID_HANDLE;
  return fn(*object);
}

// cuModuleEnumerateFunctions and cuLibraryEnumerateKernels: "a maximum of
// numFunctions" handles, in the image's order.
template <typename Handle, typename Owned>
CUresult enumerate_into(Handle* out, unsigned n, const std::vector<std::unique_ptr<Owned>>& items) {
  for (unsigned i = 0; i < n && i < items.size(); ++i) out[i] = reinterpret_cast<Handle>(items[i].get());
  return CUDA_SUCCESS;
}

// cuModuleGetGlobal and cuLibraryGetGlobal: either output may be null.
CUresult global_of(const Module& m, const char* name, CUdeviceptr* dptr, size_t* bytes) {
  auto it = m.globals.find(name);
  if (it == m.globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = it->second.ptr;
  if (bytes) *bytes = it->second.size;
  return CUDA_SUCCESS;
}

// A library's module in the current context, loaded on first use (CUDA 12
// context-independent loading: "the library's module is loaded into a
// context when needed"). R().mu held.
CUresult library_module_locked(Library* lib, Module** out, Context* c = nullptr) {
  if (!c) {
    if (CUresult r = current_ctx(&c)) return r;
  }
  auto it = lib->modules.find(c);
  if (it != lib->modules.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  return load_locked(c, lib->image, lib, out);
}

Function* find_in(Module* m, const char* name) {
  for (auto& f : m->funcs) {
    if (f->name == name) return f.get();
  }
  return nullptr;
}

// A CUfunction, or a CUkernel cast to one (cuLaunchKernel and the occupancy
// queries take either: "the API can also be used with context-less kernel
// CUkernel by querying the handle using cuLibraryGetKernel() and then
// passing it to the API by casting to CUfunction"). R().mu held.
CUresult resolve_function_locked(CUfunction h, Function** out, Context* ctx = nullptr) {
  auto* f = reinterpret_cast<Function*>(h);
  if (R().functions.count(f)) {
    *out = f;
    return CUDA_SUCCESS;
  }
  auto* k = reinterpret_cast<Kernel*>(h);
  if (!R().kernels.count(k)) return CUDA_ERROR_INVALID_HANDLE;
  Module* m = nullptr;
  if (CUresult r = library_module_locked(k->lib, &m, ctx)) return r;
  Function* fn = find_in(m, k->name.c_str());
  if (!fn) return CUDA_ERROR_NOT_FOUND;
  *out = fn;
  return CUDA_SUCCESS;
}

LaunchInfo info_of(const Function& f) {
  LaunchInfo i;
  i.ctx = f.mod->ctx;
  i.max_threads_per_block = dev_attr(i.ctx, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  i.num_regs = kNumRegs;
  i.static_shared = 0;
  i.max_dynamic_shared = f.max_dynamic_shared;
  return i;
}

CUresult func_attribute(const Function& f, CUfunction_attribute a, int* pi) {
  const LaunchInfo i = info_of(f);
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = i.max_threads_per_block; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = i.num_regs; break;
    // "the major PTX version * 10 + the minor PTX version ... may return
    // the undefined value of 0 for cubins compiled prior to CUDA 3.0".
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = f.mod->image.ptx_version; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = f.mod->image.binary_version; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f.max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f.carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *pi = f.cluster[0]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *pi = f.cluster[1]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = f.cluster[2]; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = f.non_portable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = f.cluster_policy; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// The attributes cuFuncSetAttribute accepts (the others are read-only).
CUresult set_func_attribute(Function& f, CUfunction_attribute a, int v) {
  Context* c = f.mod->ctx;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      // Up to the opt-in maximum per block less the static shared memory.
      if (v < 0 || v > dev_attr(c, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      f.max_dynamic_shared = v;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      // "a percentage of the total shared memory" or -1 (no preference).
      if (v < -1 || v > 100) return CUDA_ERROR_INVALID_VALUE;
      f.carveout = v;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      if (v < 0) return CUDA_ERROR_INVALID_VALUE;
      f.cluster[a - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = v;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      if (v != 0 && v != 1) return CUDA_ERROR_INVALID_VALUE;
      f.non_portable_cluster = v;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      if (v < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT || v > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      f.cluster_policy = v;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

CUresult function_launch_info(CUfunction h, Context* ctx_hint, LaunchInfo* out) {
  if (!h) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(R().mu);
  Function* f = nullptr;
  // A CUkernel launches in "the context ... taken from the specified stream
  // hStream or the current context in case of NULL stream" (cuLaunchKernel).
  if (CUresult r = resolve_function_locked(h, &f, ctx_hint)) return r;
  *out = info_of(*f);
  return CUDA_SUCCESS;
}

// Occupancy as the CUDA Occupancy Calculator reasons: blocks per SM are
// limited by the SM's block slots, its threads (whole warps), its registers
// (allocated per warp in units of 256) and its shared memory (each block
// also takes the reserved 1 KiB, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK).
int active_blocks_per_sm(const LaunchInfo& f, int threads, std::size_t dyn_shared) {
  Context* c = f.ctx;
  if (threads <= 0 || threads > f.max_threads_per_block) return 0;
  if (dyn_shared > static_cast<std::size_t>(f.max_dynamic_shared)) return 0;
  const int warp = dev_attr(c, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  const int warps = (threads + warp - 1) / warp;
  int blocks = dev_attr(c, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  blocks = std::min(blocks, dev_attr(c, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) / (warps * warp));
  const int regs_per_warp = (f.num_regs * warp + 255) / 256 * 256;
  blocks = std::min(blocks, dev_attr(c, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR) / (regs_per_warp * warps));
  const std::size_t smem = f.static_shared + dyn_shared +
                           static_cast<std::size_t>(dev_attr(c, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK));
  const std::size_t sm_smem = static_cast<std::size_t>(dev_attr(c, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  blocks = std::min<long long>(blocks, static_cast<long long>(sm_smem / smem));
  return blocks < 0 ? 0 : blocks;
}

void drop_context_modules(Context* ctx) {
  std::lock_guard<std::mutex> lk(R().mu);
  std::vector<Module*> mine;
  for (Module* m : R().modules) {
    if (m->ctx == ctx) mine.push_back(m);
  }
  for (Module* m : mine) unload_locked(m);
}

}  // namespace sim

using namespace sim;

// ---- modules ----------------------------------------------------------------------

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) { return load_module(module, image, 0); }

// The JIT options (log buffers, optimisation level...) change nothing here:
// nothing is compiled.
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  if (!valid_options(numOptions, options, optionValues)) return CUDA_ERROR_INVALID_VALUE;
  return load_module(module, image, 0);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return load_module(module, fatCubin, 0);
}

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  std::string bytes;
  if (!read_file(fname, &bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  if (bytes.empty()) return CUDA_ERROR_INVALID_IMAGE;
  return load_module(module, bytes.c_str(), bytes.size());  // c_str: PTX ends with its NUL
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  if (CUresult r = check_init()) return r;
  Context* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    Module* m = find_module(hmod);
    if (!m || m->lib) return CUDA_ERROR_INVALID_HANDLE;  // a library's module goes with cuLibraryUnload
    ctx = m->ctx;
  }
  // Work still queued may copy to or from the module's globals.
  sync_context(ctx);
  std::lock_guard<std::mutex> lk(R().mu);
  Module* m = find_module(hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  unload_locked(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_module, hmod, [&](Module& m) {
    Function* f = find_in(&m, name);
    if (!f) return CUDA_ERROR_NOT_FOUND;  // "If no function of that name exists"
    *hfunc = reinterpret_cast<CUfunction>(f);
    return CUDA_SUCCESS;
  });
}

// "Returns in *dptr and *bytes the base pointer and size of the global of
// name name ... If no variable of that name exists, cuModuleGetGlobal()
// returns CUDA_ERROR_NOT_FOUND. One of the parameters dptr or bytes (not
// both) can be NULL in which case it is ignored."
CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  if ((!dptr && !bytes) || !name) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_module, hmod, [&](Module& m) { return global_of(m, name, dptr, bytes); });
}

CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_module, mod, [&](Module& m) {
    *count = static_cast<unsigned>(m.funcs.size());
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction* functions, unsigned int numFunctions, CUmodule mod) {
  if (!functions && numFunctions) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_module, mod, [&](Module& m) { return enumerate_into(functions, numFunctions, m.funcs); });
}

// Lazy loading is the default since CUDA 12.2; CUDA_MODULE_LOADING=EAGER
// turns it off (CUDA C++ Programming Guide, "Lazy Loading").
CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  const char* env = std::getenv("CUDA_MODULE_LOADING");
  *mode = env && std::strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

// ---- libraries -----------------------------------------------------------------------

namespace {

CUresult load_library(CUlibrary* out, const void* data, std::size_t size, unsigned nj, const void* jk,
                      const void* jv, unsigned nl, const void* lk_, const void* lv) {
  if (!out || !data) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_options(nj, jk, jv) || !valid_options(nl, lk_, lv)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  auto lib = std::make_unique<Library>();
  if (CUresult r = parse_image(data, size, &lib->image)) return r;
  std::lock_guard<std::mutex> lk(R().mu);
  for (const std::string& e : lib->image.entries) {
    auto k = std::make_unique<Kernel>();
    k->lib = lib.get();
    k->name = e;
    R().kernels[k.get()] = lib.get();
    lib->kernels.push_back(std::move(k));
  }
  Library* raw = lib.release();
  R().libraries.insert(raw);
  *out = reinterpret_cast<CUlibrary>(raw);
  return CUDA_SUCCESS;
}

Library* find_library(CUlibrary h) {
  auto* l = reinterpret_cast<Library*>(h);
  return R().libraries.count(l) ? l : nullptr;
}

Kernel* find_kernel(CUkernel h) {
  auto* k = reinterpret_cast<Kernel*>(h);
  return R().kernels.count(k) ? k : nullptr;
}

}  // namespace

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  return load_library(library, code, 0, numJitOptions, jitOptions, jitOptionsValues, numLibraryOptions,
                      libraryOptions, libraryOptionValues);
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                       void** jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                       unsigned int numLibraryOptions) {
  if (!library || !fileName) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::string bytes;
  if (!read_file(fileName, &bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  if (bytes.empty()) return CUDA_ERROR_INVALID_IMAGE;
  return load_library(library, bytes.c_str(), bytes.size(), numJitOptions, jitOptions, jitOptionsValues,
                      numLibraryOptions, libraryOptions, libraryOptionValues);
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  if (CUresult r = check_init()) return r;
  std::vector<Context*> ctxs;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    Library* l = find_library(library);
    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    for (auto& e : l->modules) ctxs.push_back(e.first);
  }
  for (Context* c : ctxs) sync_context(c);
  std::lock_guard<std::mutex> lk(R().mu);
  Library* l = find_library(library);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  while (!l->modules.empty()) unload_locked(l->modules.begin()->second);
  for (auto& k : l->kernels) R().kernels.erase(k.get());
  R().libraries.erase(l);
  delete l;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  if (!pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_library, library, [&](Library& l) {
    for (auto& k : l.kernels) {
      if (k->name == name) {
        *pKernel = reinterpret_cast<CUkernel>(k.get());
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_NOT_FOUND;
  });
}

CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_library, lib, [&](Library& l) {
    *count = static_cast<unsigned>(l.kernels.size());
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels, CUlibrary lib) {
  if (!kernels && numKernels) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_library, lib, [&](Library& l) { return enumerate_into(kernels, numKernels, l.kernels); });
}

// "Returns in pMod the module handle associated with the current context
// located in library library."
CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  if (!pMod) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_library, library, [&](Library& l) {
    Module* m = nullptr;
    if (CUresult r = library_module_locked(&l, &m)) return r;
    *pMod = reinterpret_cast<CUmodule>(m);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  if ((!dptr && !bytes) || !name) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_library, library, [&](Library& l) {
    Module* m = nullptr;
    if (CUresult r = library_module_locked(&l, &m)) return r;
    return global_of(*m, name, dptr, bytes);
  });
}

// "Returns in pFunc the handle of the function for the requested kernel
// kernel and the current context."
CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(R().mu);
  if (!find_kernel(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  Function* f = nullptr;
  if (CUresult r = resolve_function_locked(reinterpret_cast<CUfunction>(kernel), &f)) return r;
  *pFunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  if (!pLib) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_kernel, kernel, [&](Kernel& k) {
    *pLib = reinterpret_cast<CUlibrary>(k.lib);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  return with_live(find_kernel, hfunc, [&](Kernel& k) {
    *name = k.name.c_str();
    return CUDA_SUCCESS;
  });
}

// The attribute of the kernel's function in dev's primary context, loaded
// there for the question (the primary context must be active, as the
// driver needs a context on dev to load into).
CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(R().mu);
  Kernel* k = find_kernel(kernel);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  // Current context on dev, else any context of the library on dev.
  Function* f = nullptr;
  Context* cur = nullptr;
  if (current_ctx(&cur) == CUDA_SUCCESS && cur->dev == d) {
    if (CUresult r = resolve_function_locked(reinterpret_cast<CUfunction>(kernel), &f)) return r;
  } else {
    for (auto& e : k->lib->modules) {
      if (e.first->dev == d) f = find_in(e.second, k->name.c_str());
    }
    if (!f) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return func_attribute(*f, attrib, pi);
}

// ---- functions -----------------------------------------------------------------------

namespace {
template <typename F>
CUresult with_function(CUfunction h, F fn) {
  if (!h) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(R().mu);
  Function* f = nullptr;
  if (CUresult r = resolve_function_locked(h, &f)) return r;
  return fn(*f);
}
}  // namespace

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  return with_function(hfunc, [&](Function& f) { return func_attribute(f, attrib, pi); });
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return with_function(hfunc, [&](Function& f) { return set_func_attribute(f, attrib, value); });
}

// A preference only ("the driver will use the requested configuration if
// possible"); it is kept, nothing reads it.
CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  return with_function(hfunc, [&](Function& f) {
    f.cache = config;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  return with_function(hfunc, [&](Function& f) {
    *name = f.name.c_str();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  if (!hmod) return CUDA_ERROR_INVALID_VALUE;
  return with_function(hfunc, [&](Function& f) {
    *hmod = reinterpret_cast<CUmodule>(f.mod);
    return CUDA_SUCCESS;
  });
}

// Every function is loaded as soon as its module is: there is no code to load.
CUresult CUDAAPI cuFuncLoad(CUfunction function) {
  return with_function(function, [](Function&) { return CUDA_SUCCESS; });
}

CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  return with_function(function, [&](Function&) {
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
  });
}
