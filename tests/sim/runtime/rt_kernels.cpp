// Kernels in the runtime: what nvcc's host code calls (__cudaRegisterFatBinary,
// __cudaRegisterFunction, __cudaRegisterVar, __cudaPushCallConfiguration,
// __cudaLaunchKernel, ...) and the runtime's execution-control and symbol API.
//
// Kernels compute nothing on the simulated device: a launch is validated as
// the runtime does, then handed to the driver's cuLaunchKernel, which puts a
// step that does nothing on the stream, so stream order, events and
// synchronisation behave and memory traffic is exactly the program's own.
//
// Why synthetic PTX: the real runtime hands the fatbin nvcc embedded to the
// driver. That image holds SASS for one architecture and PTX that may be
// compressed, and the sim executes neither. Everything the runtime needs from
// it -- each kernel's device name and each global's name and size -- is in the
// registrations nvcc's start-up code makes. So the first time a fatbin is
// needed in a context the runtime writes a PTX text from those registrations,
// one line per entity:
//     .version 8.0 / .target sm_90 / .address_size 64
//     .visible .entry NAME() { ret; }
//     .visible .global .align 8 .b8 NAME[SIZE];
// and loads it with cuModuleLoadData, like any driver program would. Globals
// (__device__, __constant__, __managed__) then get device memory of their size
// from the driver's module, the driver's own memory, never the program's
// (cuModuleGetGlobal_v2), so they are not allocations in a trace.
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rt_internal.h"

using rt::drv;

namespace {

struct Fatbin;

// One __global__ function; a cudaKernel_t is a pointer to one of these.
struct Kernel {
  Fatbin* fatbin = nullptr;
  std::string name;  // the device (mangled) name
};

// One __device__ / __constant__ / __managed__ variable.
struct Var {
  Fatbin* fatbin = nullptr;
  std::string name;
  std::size_t size = 0;
  void** managed_host = nullptr;  // __managed__: the host's pointer to fill in
};

// What the fatbin became in one context.
struct Loaded {
  CUmodule module = nullptr;
  std::unordered_map<const Kernel*, CUfunction> functions;
};

struct Fatbin {
  std::vector<Kernel*> kernels;
  std::vector<Var*> vars;
  std::map<CUcontext, Loaded> loaded;
};

// Never destroyed, and built on first use: nvcc's registration runs in
// static constructors, possibly before this library's own.
struct Registry {
  std::mutex mu;
  std::vector<Fatbin*> fatbins;
  std::unordered_map<const void*, Kernel*> by_host;  // host stub -> kernel
  std::unordered_set<const Kernel*> kernels;         // valid cudaKernel_t values
  std::unordered_map<const void*, Var*> vars;        // host shadow -> variable
};
Registry& R() {
  static auto* r = new Registry;
  return *r;
}

// A pushed <<<grid, block, shared, stream>>> waiting for its stub's pop.
struct CallConfig {
  dim3 grid, block;
  std::size_t shared = 0;
  cudaStream_t stream = nullptr;
};
thread_local std::vector<CallConfig> tl_configs;

// Driver codes of module loading and launching, as the runtime reports them;
// `not_found` is what a missing name means to the caller.
cudaError_t kmap(CUresult r, cudaError_t not_found = cudaErrorInvalidDeviceFunction) {
  switch (r) {
    case CUDA_ERROR_NOT_FOUND: return not_found;
    case CUDA_ERROR_INVALID_IMAGE: return cudaErrorInvalidKernelImage;
    case CUDA_ERROR_INVALID_PTX: return cudaErrorInvalidPtx;
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return cudaErrorUnsupportedPtxVersion;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return cudaErrorNoKernelImageForDevice;
    case CUDA_ERROR_SHARED_OBJECT_INIT_FAILED: return cudaErrorSharedObjectInitFailed;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return cudaErrorLaunchOutOfResources;
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: return cudaErrorCooperativeLaunchTooLarge;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    default: return rt::map(r);
  }
}

// The launch limits of a device (cudaErrorInvalidConfiguration beyond them).
struct Limits {
  int max_threads_per_block, max_block[3], max_grid[3];
};
Limits limits_of(int dev) {
  auto A = [dev](CUdevice_attribute a) {
    int v = 0;
    drv().cuDeviceGetAttribute(&v, a, dev);
    return v;
  };
  Limits l{};
  l.max_threads_per_block = A(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  l.max_block[0] = A(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  l.max_block[1] = A(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  l.max_block[2] = A(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  l.max_grid[0] = A(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  l.max_grid[1] = A(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  l.max_grid[2] = A(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  return l;
}

std::string synthetic_ptx(const Fatbin& fb) {
  std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n";
  for (const Kernel* k : fb.kernels) ptx += ".visible .entry " + k->name + "() { ret; }\n";
  // __constant__ variables are declared .global too: the driver gives both
  // device memory, which is what constant memory is on the GPU.
  for (const Var* v : fb.vars) {
    ptx += ".visible .global .align 8 .b8 " + v->name + "[" + std::to_string(v->size) + "];\n";
  }
  return ptx;
}

// The fatbin's module in the current context, loaded on first use. Called
// with R().mu held.
cudaError_t load_locked(Fatbin* fb, CUcontext ctx, Loaded** out) {
  auto it = fb->loaded.find(ctx);
  if (it == fb->loaded.end()) {
    const std::string ptx = synthetic_ptx(*fb);
    CUmodule m = nullptr;
    if (CUresult r = drv().cuModuleLoadData(&m, ptx.c_str())) return kmap(r);
    it = fb->loaded.emplace(ctx, Loaded{m, {}}).first;
    // A __managed__ variable's host code reads it through a pointer the
    // runtime fills in when the module is loaded (crt/host_runtime.h,
    // __cudaInitModule). One variable for the process: the first load wins.
    // Host code names such a variable by its memory (`&g` is the managed
    // address: cudaMemcpyToSymbol(g, ...) passes it), so that is a key too.
    for (Var* v : fb->vars) {
      if (!v->managed_host || *v->managed_host) continue;
      CUdeviceptr p = 0;
      std::size_t n = 0;
      if (drv().cuModuleGetGlobal_v2(&p, &n, m, v->name.c_str()) == CUDA_SUCCESS) {
        *v->managed_host = reinterpret_cast<void*>(p);
        R().vars.emplace(*v->managed_host, v);
      }
    }
  }
  *out = &it->second;
  return cudaSuccess;
}

// rt::ctx() and the current context's handle.
cudaError_t current(CUcontext* c) {
  if (cudaError_t e = rt::ctx()) return e;
  *c = nullptr;
  if (CUresult r = drv().cuCtxGetCurrent(c)) return rt::map(r);
  return cudaSuccess;
}

// `func` as a host stub registered by nvcc, or as a cudaKernel_t
// ("If the specified function does not exist, then it is assumed to be a
// cudaKernel_t", cuda_runtime_api.h). R().mu held.
Kernel* kernel_locked(const void* func, bool accept_handle = true) {
  Registry& r = R();
  if (auto it = r.by_host.find(func); it != r.by_host.end()) return it->second;
  if (accept_handle) {
    auto* k = static_cast<const Kernel*>(func);
    if (r.kernels.count(k)) return const_cast<Kernel*>(k);
  }
  return nullptr;
}

// The kernel and its CUfunction in the current context (module loaded).
cudaError_t resolve(const void* func, Kernel** kernel, CUfunction* fn, bool accept_handle = true) {
  CUcontext ctx = nullptr;
  if (cudaError_t e = current(&ctx)) return e;
  std::lock_guard<std::mutex> lk(R().mu);
  Kernel* k = func ? kernel_locked(func, accept_handle) : nullptr;
  if (!k) return cudaErrorInvalidDeviceFunction;
  Loaded* l = nullptr;
  if (cudaError_t e = load_locked(k->fatbin, ctx, &l)) return e;
  auto it = l->functions.find(k);
  if (it == l->functions.end()) {
    CUfunction f = nullptr;
    if (CUresult r = drv().cuModuleGetFunction(&f, l->module, k->name.c_str())) return kmap(r);
    it = l->functions.emplace(k, f).first;
  }
  *kernel = k;
  *fn = it->second;
  return cudaSuccess;
}

// A variable's device memory in the current context.
cudaError_t symbol(const void* sym, CUdeviceptr* ptr, std::size_t* size) {
  CUcontext ctx = nullptr;
  if (cudaError_t e = current(&ctx)) return e;
  std::lock_guard<std::mutex> lk(R().mu);
  auto it = sym ? R().vars.find(sym) : R().vars.end();
  if (it == R().vars.end()) return cudaErrorInvalidSymbol;
  Var* v = it->second;
  Loaded* l = nullptr;
  if (cudaError_t e = load_locked(v->fatbin, ctx, &l)) return e;
  std::size_t n = 0;
  if (CUresult r = drv().cuModuleGetGlobal_v2(ptr, &n, l->module, v->name.c_str())) {
    return kmap(r, cudaErrorInvalidSymbol);
  }
  *size = v->size;
  return cudaSuccess;
}

bool fits(const dim3& d, const int* max) {
  return d.x >= 1 && d.y >= 1 && d.z >= 1 && d.x <= static_cast<unsigned>(max[0]) &&
         d.y <= static_cast<unsigned>(max[1]) && d.z <= static_cast<unsigned>(max[2]);
}

// The runtime checks the configuration (cudaErrorInvalidConfiguration, where
// the driver answers CUDA_ERROR_INVALID_VALUE); the driver checks the rest
// (dynamic shared memory against the function's limit, registers,
// cooperative grid size) and queues the launch.
cudaError_t check_config(dim3 grid, dim3 block) {
  const Limits l = limits_of(rt::current_device());
  const unsigned long long threads =
      static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (!fits(grid, l.max_grid) || !fits(block, l.max_block) ||
      threads > static_cast<unsigned long long>(l.max_threads_per_block)) {
    return cudaErrorInvalidConfiguration;
  }
  return cudaSuccess;
}

cudaError_t launch(const void* func, dim3 grid, dim3 block, void** args, std::size_t shared,
                   cudaStream_t stream, bool pt, bool cooperative) {
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  if (cudaError_t e = check_config(grid, block)) return rt::ret(e);
  if (shared > UINT_MAX) return rt::ret(cudaErrorInvalidValue);
  const auto& d = drv();
  const auto h = reinterpret_cast<CUstream>(stream);
  const auto smem = static_cast<unsigned>(shared);
  CUresult r =
      cooperative
          ? (pt ? d.cuLaunchCooperativeKernel_ptsz : d.cuLaunchCooperativeKernel)(
                f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, h, args)
          : (pt ? d.cuLaunchKernel_ptsz : d.cuLaunchKernel)(
                f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, h, args, nullptr);
  return rt::ret(kmap(r));
}

// cudaLaunchAttribute and CUlaunchAttribute share layout and numbering
// (driver_types.h / cuda.h), as cudaLaunchConfig_t's fields map onto
// CUlaunchConfig's.
static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(static_cast<int>(cudaLaunchAttributeCooperative) ==
              static_cast<int>(CU_LAUNCH_ATTRIBUTE_COOPERATIVE));
CUlaunchConfig driver_config(const cudaLaunchConfig_t& c) {
  CUlaunchConfig d{};
  d.gridDimX = c.gridDim.x;
  d.gridDimY = c.gridDim.y;
  d.gridDimZ = c.gridDim.z;
  d.blockDimX = c.blockDim.x;
  d.blockDimY = c.blockDim.y;
  d.blockDimZ = c.blockDim.z;
  d.sharedMemBytes = static_cast<unsigned>(c.dynamicSmemBytes);
  d.hStream = reinterpret_cast<CUstream>(c.stream);
  d.attrs = reinterpret_cast<CUlaunchAttribute*>(c.attrs);
  d.numAttrs = c.numAttrs;
  return d;
}

cudaError_t launch_ex(const cudaLaunchConfig_t* config, const void* func, void** args, bool pt) {
  if (!config || (config->numAttrs && !config->attrs)) return rt::ret(cudaErrorInvalidValue);
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  if (cudaError_t e = check_config(config->gridDim, config->blockDim)) return rt::ret(e);
  if (config->dynamicSmemBytes > UINT_MAX) return rt::ret(cudaErrorInvalidValue);
  const CUlaunchConfig c = driver_config(*config);
  return rt::ret(kmap((pt ? drv().cuLaunchKernelEx_ptsz : drv().cuLaunchKernelEx)(&c, f, args,
                                                                                    nullptr)));
}

// cudaMemcpyToSymbol / FromSymbol and their async and per-thread variants.
cudaError_t symbol_copy(bool to_symbol, void* host_side, const void* sym, std::size_t count,
                        std::size_t offset, cudaMemcpyKind kind, bool async, cudaStream_t s,
                        bool pt) {
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (cudaError_t e = symbol(sym, &base, &size)) return rt::ret(e);
  // "kind can be either cudaMemcpyHostToDevice, cudaMemcpyDeviceToDevice, or
  //  cudaMemcpyDefault" (to), DeviceToHost/DeviceToDevice/Default (from).
  const cudaMemcpyKind host_kind = to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  if (kind != host_kind && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) {
    return rt::ret(cudaErrorInvalidMemcpyDirection);
  }
  if (offset > size || count > size - offset) return rt::ret(cudaErrorInvalidValue);
  if (count == 0) return cudaSuccess;
  const auto& d = drv();
  const CUdeviceptr dev = base + offset;
  const auto other = reinterpret_cast<CUdeviceptr>(host_side);
  CUstream h = reinterpret_cast<CUstream>(s);
  CUresult r;
  if (kind == cudaMemcpyDefault) {
    // Unified addressing: the driver infers the other side from the pointer.
    const CUdeviceptr dst = to_symbol ? dev : other, src = to_symbol ? other : dev;
    r = async ? (pt ? d.cuMemcpyAsync_ptsz : d.cuMemcpyAsync)(dst, src, count, h)
              : (pt ? d.cuMemcpy_ptds : d.cuMemcpy)(dst, src, count);
  } else if (kind == cudaMemcpyDeviceToDevice) {
    const CUdeviceptr dst = to_symbol ? dev : other, src = to_symbol ? other : dev;
    r = async ? (pt ? d.cuMemcpyDtoDAsync_v2_ptsz : d.cuMemcpyDtoDAsync_v2)(dst, src, count, h)
              : (pt ? d.cuMemcpyDtoD_v2_ptds : d.cuMemcpyDtoD_v2)(dst, src, count);
  } else if (to_symbol) {
    r = async ? (pt ? d.cuMemcpyHtoDAsync_v2_ptsz : d.cuMemcpyHtoDAsync_v2)(dev, host_side, count, h)
              : (pt ? d.cuMemcpyHtoD_v2_ptds : d.cuMemcpyHtoD_v2)(dev, host_side, count);
  } else {
    r = async ? (pt ? d.cuMemcpyDtoHAsync_v2_ptsz : d.cuMemcpyDtoHAsync_v2)(host_side, dev, count, h)
              : (pt ? d.cuMemcpyDtoH_v2_ptds : d.cuMemcpyDtoH_v2)(host_side, dev, count);
  }
  return rt::ret(r);
}

}  // namespace

namespace rt {
void forget_modules(CUcontext ctx) {
  std::lock_guard<std::mutex> lk(R().mu);
  for (Fatbin* fb : R().fatbins) fb->loaded.erase(ctx);
}
}  // namespace rt

// ---- what nvcc's host code calls (crt/host_runtime.h) ---------------------------------

extern "C" {

__attribute__((visibility("default"))) void** __cudaRegisterFatBinary(void* fatCubin) {
  (void)fatCubin;  // the image itself is not used (see the top of this file)
  auto* fb = new Fatbin;
  std::lock_guard<std::mutex> lk(R().mu);
  R().fatbins.push_back(fb);
  return reinterpret_cast<void**>(fb);
}

__attribute__((visibility("default"))) void __cudaRegisterFatBinaryEnd(void** handle) {
  // Modules are loaded lazily, on first use in each context (as CUDA's
  // default CUDA_MODULE_LOADING=LAZY does).
  (void)handle;
}

__attribute__((visibility("default"))) void __cudaUnregisterFatBinary(void** handle) {
  // Runs from atexit. The driver may be going away too: nothing is unloaded,
  // the entities just stop being found. The records stay (a thread may still
  // hold a cudaKernel_t).
  auto* fb = reinterpret_cast<Fatbin*>(handle);
  if (!fb) return;
  Registry& r = R();
  std::lock_guard<std::mutex> lk(r.mu);
  for (Kernel* k : fb->kernels) {
    r.kernels.erase(k);
    std::erase_if(r.by_host, [k](const auto& e) { return e.second == k; });
  }
  for (Var* v : fb->vars) std::erase_if(r.vars, [v](const auto& e) { return e.second == v; });
}

__attribute__((visibility("default"))) void __cudaRegisterFunction(
    void** handle, const char* hostFun, char* deviceFun, const char* deviceName, int thread_limit,
    uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize) {
  (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
  auto* fb = reinterpret_cast<Fatbin*>(handle);
  if (!fb || !hostFun || !deviceName) return;
  auto* k = new Kernel;
  k->fatbin = fb;
  k->name = deviceName;
  Registry& r = R();
  std::lock_guard<std::mutex> lk(r.mu);
  fb->kernels.push_back(k);
  r.kernels.insert(k);
  r.by_host.emplace(hostFun, k);  // the first registration of a stub wins
}

namespace {
void register_var(void** handle, const void* key, void** managed, const char* name,
                  std::size_t size) {
  auto* fb = reinterpret_cast<Fatbin*>(handle);
  if (!fb || !key || !name) return;
  auto* v = new Var;
  v->fatbin = fb;
  v->name = name;
  v->size = size;
  v->managed_host = managed;
  Registry& r = R();
  std::lock_guard<std::mutex> lk(r.mu);
  fb->vars.push_back(v);
  r.vars.emplace(key, v);
}
}  // namespace

__attribute__((visibility("default"))) void __cudaRegisterVar(void** handle, char* hostVar,
                                                              char* deviceAddress,
                                                              const char* deviceName, int ext,
                                                              size_t size, int constant,
                                                              int global) {
  (void)deviceAddress, (void)ext, (void)constant, (void)global;
  register_var(handle, hostVar, nullptr, deviceName, size);
}

__attribute__((visibility("default"))) void __cudaRegisterManagedVar(
    void** handle, void** hostVarPtrAddress, char* deviceAddress, const char* deviceName, int ext,
    size_t size, int constant, int global) {
  (void)deviceAddress, (void)ext, (void)constant, (void)global;
  // The host's copy of a __managed__ variable is a pointer (in section
  // __nv_managed_data__) that the runtime points at the managed memory;
  // cudaMemcpyToSymbol & co. name the variable by that pointer's address.
  register_var(handle, hostVarPtrAddress, hostVarPtrAddress, deviceName, size);
}

__attribute__((visibility("default"))) char __cudaInitModule(void** handle) {
  // Host code touching a __managed__ variable calls this first; nonzero:
  // loaded (its callers retry while it returns 0).
  auto* fb = reinterpret_cast<Fatbin*>(handle);
  CUcontext ctx = nullptr;
  if (!fb || current(&ctx) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lk(R().mu);
  Loaded* l = nullptr;
  return load_locked(fb, ctx, &l) == cudaSuccess ? 1 : 0;
}

__attribute__((visibility("default"))) unsigned __cudaPushCallConfiguration(
    dim3 gridDim, dim3 blockDim, size_t sharedMem, CUstream_st* stream) {
  tl_configs.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;  // 0: go on and call the stub
}

__attribute__((visibility("default"))) cudaError_t __cudaPopCallConfiguration(
    dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  if (tl_configs.empty()) return cudaErrorMissingConfiguration;
  const CallConfig c = tl_configs.back();
  tl_configs.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

__attribute__((visibility("default"))) cudaError_t __cudaGetKernel(cudaKernel_t* kernel,
                                                                   const void* func) {
  if (!kernel) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lk(R().mu);
  Kernel* k = kernel_locked(func);
  if (!k) return cudaErrorInvalidDeviceFunction;
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return cudaSuccess;
}

__attribute__((visibility("default"))) cudaError_t __cudaLaunchKernel(
    cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
    cudaStream_t stream) {
  return launch(kernel, gridDim, blockDim, args, sharedMem, stream, false, false);
}

__attribute__((visibility("default"))) cudaError_t __cudaLaunchKernel_ptsz(
    cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
    cudaStream_t stream) {
  return launch(kernel, gridDim, blockDim, args, sharedMem, stream, true, false);
}

}  // extern "C"

// ---- execution control ---------------------------------------------------------------

cudaError_t CUDARTAPI cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                       size_t sharedMem, cudaStream_t stream) {
  return launch(func, gridDim, blockDim, args, sharedMem, stream, false, false);
}
cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim,
                                            void** args, size_t sharedMem, cudaStream_t stream) {
  return launch(func, gridDim, blockDim, args, sharedMem, stream, true, false);
}
cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim,
                                                  void** args, size_t sharedMem,
                                                  cudaStream_t stream) {
  return launch(func, gridDim, blockDim, args, sharedMem, stream, false, true);
}
cudaError_t CUDARTAPI cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim,
                                                       dim3 blockDim, void** args,
                                                       size_t sharedMem, cudaStream_t stream) {
  return launch(func, gridDim, blockDim, args, sharedMem, stream, true, true);
}
cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func,
                                          void** args) {
  return launch_ex(config, func, args, false);
}
cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                               void** args) {
  return launch_ex(config, func, args, true);
}

// The function attributes are the driver's (cuFuncGetAttribute /
// cuFuncSetAttribute), so a launch sees what the program set; the two
// enumerations share their numbering.
cudaError_t CUDARTAPI cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (!attr) return rt::ret(cudaErrorInvalidValue);
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  int v[16] = {};
  for (int a = CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
       a <= CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE; ++a) {
    if (CUresult r = drv().cuFuncGetAttribute(&v[a], static_cast<CUfunction_attribute>(a), f)) {
      return rt::ret(kmap(r));
    }
  }
  std::memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = v[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
  attr->sharedSizeBytes = static_cast<std::size_t>(v[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES]);
  attr->constSizeBytes = static_cast<std::size_t>(v[CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES]);
  attr->localSizeBytes = static_cast<std::size_t>(v[CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES]);
  attr->numRegs = v[CU_FUNC_ATTRIBUTE_NUM_REGS];
  attr->ptxVersion = v[CU_FUNC_ATTRIBUTE_PTX_VERSION];
  attr->binaryVersion = v[CU_FUNC_ATTRIBUTE_BINARY_VERSION];
  attr->cacheModeCA = v[CU_FUNC_ATTRIBUTE_CACHE_MODE_CA];
  attr->maxDynamicSharedSizeBytes = v[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES];
  attr->preferredShmemCarveout = v[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT];
  attr->clusterDimMustBeSet = v[CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET];
  attr->requiredClusterWidth = v[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
  attr->requiredClusterHeight = v[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT];
  attr->requiredClusterDepth = v[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH];
  attr->nonPortableClusterSizeAllowed = v[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED];
  attr->clusterSchedulingPolicyPreference =
      v[CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr,
                                           int value) {
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  // Only these are writable ("If the specified attribute cannot be written,
  // or if the value is incorrect, then cudaErrorInvalidValue is returned").
  if (attr < cudaFuncAttributeMaxDynamicSharedMemorySize ||
      attr > cudaFuncAttributeClusterSchedulingPolicyPreference ||
      attr == cudaFuncAttributeClusterDimMustBeSet) {
    return rt::ret(cudaErrorInvalidValue);
  }
  return rt::ret(kmap(drv().cuFuncSetAttribute(f, static_cast<CUfunction_attribute>(attr), value)));
}

cudaError_t CUDARTAPI cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache cacheConfig) {
  // "This API does not accept a cudaKernel_t casted as void*."
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f, false)) return rt::ret(e);
  // cudaFuncCache and CUfunc_cache share their numbering.
  return rt::ret(kmap(drv().cuFuncSetCacheConfig(f, static_cast<CUfunc_cache>(cacheConfig))));
}

cudaError_t CUDARTAPI cudaFuncGetName(const char** name, const void* func) {
  if (!name) return rt::ret(cudaErrorInvalidValue);
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  *name = k->name.c_str();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  if (!functionPtr) return rt::ret(cudaErrorInvalidValue);
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(symbolPtr, &k, &f, false)) return rt::ret(e);
  *functionPtr = reinterpret_cast<cudaFunction_t>(f);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  if (!kernelPtr) return rt::ret(cudaErrorInvalidValue);
  if (cudaError_t e = rt::ctx()) return rt::ret(e);
  return rt::ret(__cudaGetKernel(kernelPtr, entryFuncAddr));
}

// ---- occupancy (the driver's cuOccupancy* on the function) -----------------------------

cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* numBlocks, const void* func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
  if (!numBlocks) return rt::ret(cudaErrorInvalidValue);
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  // cudaOccupancyDefault / cudaOccupancyDisableCachingOverride ==
  // CU_OCCUPANCY_DEFAULT / CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE.
  return rt::ret(kmap(drv().cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      numBlocks, f, blockSize, dynamicSMemSize, flags)));
}
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks,
                                                                    const void* func,
                                                                    int blockSize,
                                                                    size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dynamicSMemSize,
                                                                cudaOccupancyDefault);
}

cudaError_t CUDARTAPI cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize,
                                                                const void* func, int numBlocks,
                                                                int blockSize) {
  if (!dynamicSmemSize) return rt::ret(cudaErrorInvalidValue);
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  return rt::ret(kmap(
      drv().cuOccupancyAvailableDynamicSMemPerBlock(dynamicSmemSize, f, numBlocks, blockSize)));
}

cudaError_t CUDARTAPI cudaOccupancyMaxActiveClusters(int* numClusters, const void* func,
                                                     const cudaLaunchConfig_t* config) {
  if (!numClusters || !config || (config->numAttrs && !config->attrs)) {
    return rt::ret(cudaErrorInvalidValue);
  }
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  const CUlaunchConfig c = driver_config(*config);
  return rt::ret(kmap(drv().cuOccupancyMaxActiveClusters(numClusters, f, &c)));
}

cudaError_t CUDARTAPI cudaOccupancyMaxPotentialClusterSize(int* clusterSize, const void* func,
                                                           const cudaLaunchConfig_t* config) {
  if (!clusterSize || !config) return rt::ret(cudaErrorInvalidValue);
  Kernel* k = nullptr;
  CUfunction f = nullptr;
  if (cudaError_t e = resolve(func, &k, &f)) return rt::ret(e);
  // 8 blocks is the portable cluster size, 16 with the non-portable opt-in
  // on sm_90 (CUDA C++ Programming Guide, Thread Block Clusters).
  int non_portable = 0;
  drv().cuFuncGetAttribute(&non_portable, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, f);
  *clusterSize = non_portable ? 16 : 8;
  return cudaSuccess;
}

// ---- symbols ---------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaGetSymbolAddress(void** devPtr, const void* sym) {
  if (!devPtr) return rt::ret(cudaErrorInvalidValue);
  CUdeviceptr p = 0;
  std::size_t n = 0;
  if (cudaError_t e = symbol(sym, &p, &n)) return rt::ret(e);
  *devPtr = reinterpret_cast<void*>(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetSymbolSize(size_t* size, const void* sym) {
  if (!size) return rt::ret(cudaErrorInvalidValue);
  CUdeviceptr p = 0;
  if (cudaError_t e = symbol(sym, &p, size)) return rt::ret(e);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyToSymbol(const void* sym, const void* src, size_t count,
                                         size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(true, const_cast<void*>(src), sym, count, offset, kind, false, nullptr, false);
}
cudaError_t CUDARTAPI cudaMemcpyToSymbol_ptds(const void* sym, const void* src, size_t count,
                                              size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(true, const_cast<void*>(src), sym, count, offset, kind, false, nullptr, true);
}
cudaError_t CUDARTAPI cudaMemcpyFromSymbol(void* dst, const void* sym, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind) {
  return symbol_copy(false, dst, sym, count, offset, kind, false, nullptr, false);
}
cudaError_t CUDARTAPI cudaMemcpyFromSymbol_ptds(void* dst, const void* sym, size_t count,
                                                size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(false, dst, sym, count, offset, kind, false, nullptr, true);
}
cudaError_t CUDARTAPI cudaMemcpyToSymbolAsync(const void* sym, const void* src, size_t count,
                                              size_t offset, enum cudaMemcpyKind kind,
                                              cudaStream_t s) {
  return symbol_copy(true, const_cast<void*>(src), sym, count, offset, kind, true, s, false);
}
cudaError_t CUDARTAPI cudaMemcpyToSymbolAsync_ptsz(const void* sym, const void* src, size_t count,
                                                   size_t offset, enum cudaMemcpyKind kind,
                                                   cudaStream_t s) {
  return symbol_copy(true, const_cast<void*>(src), sym, count, offset, kind, true, s, true);
}
cudaError_t CUDARTAPI cudaMemcpyFromSymbolAsync(void* dst, const void* sym, size_t count,
                                                size_t offset, enum cudaMemcpyKind kind,
                                                cudaStream_t s) {
  return symbol_copy(false, dst, sym, count, offset, kind, true, s, false);
}
cudaError_t CUDARTAPI cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* sym, size_t count,
                                                     size_t offset, enum cudaMemcpyKind kind,
                                                     cudaStream_t s) {
  return symbol_copy(false, dst, sym, count, offset, kind, true, s, true);
}
