// A small training-like loop with real kernels, built by nvcc as users build
// theirs (issue 20, item 6): weights and activations from cudaMalloc,
// per-step temporaries from cudaMallocAsync on two streams joined by events,
// a __device__ learning rate set with cudaMemcpyToSymbol, a __managed__ step
// counter, and a few buffers leaked on purpose. On the simulated device the
// kernels compute nothing; every allocation, copy and stream step is the
// program's own. It writes a manifest of what it allocated
// (route_manifest.h), which the trace must match exactly.
//
// The same object is linked twice (tests/apps/kernel_apps.cmake):
// kernel_train_shared (-cudart shared: libcudart.so.13, which the sim
// replaces) and kernel_train_static (the sim's runtime as a static archive,
// so cumemtrace sees only the driver calls it makes through
// cuGetProcAddress). The program tells which from where the runtime's
// __cudaRegisterFatBinary lives, and names the api accordingly.
//
//   kernel_train_{shared,static} MANIFEST
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstring>

#include "route_manifest.h"

using route::addr;
using route::check;

namespace {

constexpr int kSteps = 4;
constexpr int kHidden = 1 << 18;  // floats per layer (1 MiB)

__device__ float g_lr;
__device__ float g_moments[64];
__managed__ int g_steps_done;

__global__ void init_weights(float* w, int n, unsigned seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] = static_cast<float>((i * 2654435761u + seed) % 1000) * 1e-3f;
}

__global__ void forward(float* out, const float* w, const float* in, float* scratch, int n) {
  extern __shared__ float tile[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  if (i < n) {
    float v = w[i] * tile[threadIdx.x];
    scratch[i] = v;
    out[i] = v > 0.f ? v : 0.f;
  }
}

__global__ void backward(float* grad, const float* act, const float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) grad[i] = act[i] > 0.f ? scratch[i] : 0.f;
}

template <typename T>
__global__ void sgd(T* w, const T* grad, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= g_lr * grad[i] + g_moments[i % 64];
}

bool runtime_is_shared() {
  void* f = dlsym(RTLD_DEFAULT, "__cudaRegisterFatBinary");
  Dl_info info{};
  return f && dladdr(f, &info) && info.dli_fname && std::strstr(info.dli_fname, "libcudart.so");
}

void ok(cudaError_t e, const char* what) { check(e == cudaSuccess, what, e); }
// After a <<<...>>> launch: the launch's own error is the last error.
void launched(const char* what) { ok(cudaGetLastError(), what); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);
  const bool shared = runtime_is_shared();
  // The api cumemtrace names: the runtime's own entry point when the
  // program links libcudart.so.13, else the driver function behind it.
  const char* malloc_api = shared ? "cudaMalloc" : "cuMemAlloc_v2";
  const char* free_api = shared ? "cudaFree" : "cuMemFree_v2";
  const char* malloc_async_api = shared ? "cudaMallocAsync" : "cuMemAllocAsync";
  const char* free_async_api = shared ? "cudaFreeAsync" : "cuMemFreeAsync";

  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const bool on_sim = std::strstr(prop.name, "SimCUDA") != nullptr;

  const std::size_t bytes = kHidden * sizeof(float);
  float* w = nullptr;
  float* act = nullptr;
  float* grad = nullptr;
  ok(cudaMalloc(&w, bytes), "cudaMalloc w");
  m.alloc(malloc_api, "device", 0, addr(w), bytes);
  ok(cudaMalloc(&act, bytes), "cudaMalloc act");
  m.alloc(malloc_api, "device", 0, addr(act), bytes);
  ok(cudaMalloc(&grad, bytes), "cudaMalloc grad");
  m.alloc(malloc_api, "device", 0, addr(grad), bytes);

  // Block size from the occupancy API (cuda_runtime.h's template, which
  // asks cudaFuncGetAttributes and cudaOccupancy*WithFlags).
  int min_grid = 0, block = 0;
  ok(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, forward), "occupancy");
  check(block > 0 && block <= 1024 && min_grid > 0, "occupancy block size", block);
  block = 256;  // the tile below is sized for 256
  const int grid = (kHidden + block - 1) / block;

  init_weights<<<grid, block>>>(w, kHidden, 7u);
  launched("init_weights");

  // Host -> device through the symbols; device memory of the module, not
  // an allocation of the program.
  const float lr = 0.01f;
  ok(cudaMemcpyToSymbol(g_lr, &lr, sizeof lr), "cudaMemcpyToSymbol g_lr");
  float moments[64];
  for (int i = 0; i < 64; ++i) moments[i] = static_cast<float>(i);
  ok(cudaMemcpyToSymbol(g_moments, moments, sizeof moments), "cudaMemcpyToSymbol g_moments");
  check(cudaMemcpyToSymbol(g_moments, moments, 8, sizeof moments - 4) == cudaErrorInvalidValue,
        "copy past the symbol's end");
  check(cudaGetLastError() == cudaErrorInvalidValue, "last error after a bad symbol copy");
  // Past a 4-byte variable, though the module's next global may follow it.
  const float two[2] = {lr, lr};
  check(cudaMemcpyToSymbol(g_lr, two, sizeof two) == cudaErrorInvalidValue, "copy past g_lr");
  check(cudaGetLastError() == cudaErrorInvalidValue, "last error after copy past g_lr");
  check(cudaMemcpyToSymbol(&lr, &lr, sizeof lr) == cudaErrorInvalidSymbol, "not a symbol");
  check(cudaGetLastError() == cudaErrorInvalidSymbol, "last error after not a symbol");
  std::size_t symbol_size = 0;
  ok(cudaGetSymbolSize(&symbol_size, g_moments), "cudaGetSymbolSize");
  check(symbol_size == sizeof moments, "symbol size", static_cast<long>(symbol_size));

  cudaStream_t compute = nullptr, update = nullptr;
  ok(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "stream compute");
  ok(cudaStreamCreateWithFlags(&update, cudaStreamNonBlocking), "stream update");
  cudaEvent_t forward_done = nullptr, update_done = nullptr;
  ok(cudaEventCreateWithFlags(&forward_done, cudaEventDisableTiming), "event");
  ok(cudaEventCreateWithFlags(&update_done, cudaEventDisableTiming), "event");
  ok(cudaDeviceSynchronize(), "sync after init");  // init_weights ran on the legacy stream

  const std::size_t tile = block * sizeof(float);
  for (int step = 0; step < kSteps; ++step) {
    // Forward on `compute`, with a scratch buffer of its own.
    float* scratch = nullptr;
    const std::size_t scratch_bytes = bytes / (step + 1);
    ok(cudaMallocAsync(&scratch, scratch_bytes, compute), "cudaMallocAsync scratch");
    m.alloc(malloc_async_api, "device", 0, addr(scratch), scratch_bytes, addr(compute));
    forward<<<grid, block, tile, compute>>>(act, w, act, scratch, kHidden / (step + 1));
    launched("forward");
    ok(cudaEventRecord(forward_done, compute), "record forward_done");

    // Backward and the update on `update`, after the forward.
    ok(cudaStreamWaitEvent(update, forward_done, 0), "wait forward_done");
    float* g = nullptr;
    ok(cudaMallocAsync(&g, bytes, update), "cudaMallocAsync grad tmp");
    m.alloc(malloc_async_api, "device", 0, addr(g), bytes, addr(update));
    backward<<<grid, block, 0, update>>>(g, act, scratch, kHidden / (step + 1));
    launched("backward");
    sgd<float><<<grid, block, 0, update>>>(w, g, kHidden);
    launched("sgd");
    ok(cudaMemcpyAsync(grad, g, bytes, cudaMemcpyDeviceToDevice, update), "keep grad");
    ok(cudaFreeAsync(g, update), "cudaFreeAsync grad tmp");
    m.free(free_async_api, "device", 0, addr(g), bytes, addr(update));
    ok(cudaEventRecord(update_done, update), "record update_done");

    // The scratch buffer is free once backward (on the other stream) read it.
    ok(cudaStreamWaitEvent(compute, update_done, 0), "wait update_done");
    ok(cudaFreeAsync(scratch, compute), "cudaFreeAsync scratch");
    m.free(free_async_api, "device", 0, addr(scratch), scratch_bytes, addr(compute));
    ok(cudaStreamSynchronize(compute), "sync compute");
    ++g_steps_done;  // managed: host code reads and writes it directly
  }
  check(g_steps_done == kSteps, "managed step counter", g_steps_done);
  // A __managed__ variable's symbol is its memory, which the host reads.
  void* steps_symbol = nullptr;
  ok(cudaGetSymbolAddress(&steps_symbol, g_steps_done), "cudaGetSymbolAddress managed");
  check(steps_symbol == &g_steps_done, "managed symbol address");
  const int zero = 0;
  ok(cudaMemcpyToSymbol(g_steps_done, &zero, sizeof zero), "cudaMemcpyToSymbol managed");
  check(g_steps_done == 0, "managed variable written through its symbol", g_steps_done);

  // A launch the runtime refuses is the last error, once.
  forward<<<grid, 2048, 0, compute>>>(act, w, act, act, 1);
  check(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block");
  check(cudaGetLastError() == cudaSuccess, "the error is cleared");
  // More than 48 KiB of dynamic shared memory needs the opt-in.
  const std::size_t big_tile = 64 * 1024;
  forward<<<1, block, big_tile, compute>>>(act, w, act, act, 1);
  check(cudaGetLastError() == cudaErrorInvalidValue, "64 KiB shared memory without opt-in");
  ok(cudaFuncSetAttribute(forward, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(big_tile)),
     "opt in");
  forward<<<1, block, big_tile, compute>>>(act, w, act, act, 1);
  launched("64 KiB shared memory with opt-in");
  cudaFuncAttributes attrs{};
  ok(cudaFuncGetAttributes(&attrs, forward), "cudaFuncGetAttributes");
  check(attrs.maxDynamicSharedSizeBytes == static_cast<int>(big_tile), "attribute kept",
        attrs.maxDynamicSharedSizeBytes);
  // A host function is no kernel.
  void* no_args[] = {nullptr};
  check(cudaLaunchKernel(reinterpret_cast<const void*>(&runtime_is_shared), dim3(1), dim3(1),
                         no_args, 0, compute) == cudaErrorInvalidDeviceFunction,
        "launch of a host function");
  check(cudaGetLastError() == cudaErrorInvalidDeviceFunction, "last error after it");
  // The same kernel launched through the runtime API, by its cudaKernel_t.
  cudaKernel_t handle = nullptr;
  ok(cudaGetKernel(&handle, backward), "cudaGetKernel");
  const float* cact = act;
  int n = 1;
  void* bw_args[] = {&grad, &cact, &cact, &n};
  ok(cudaLaunchKernel(reinterpret_cast<const void*>(handle), dim3(1), dim3(32), bw_args, 0,
                      compute),
     "cudaLaunchKernel by cudaKernel_t");

  // The learning rate comes back as it was written: the symbol's memory is
  // real device memory, and kernels do not touch it on the sim.
  float lr_back = 0.f;
  ok(cudaMemcpyFromSymbol(&lr_back, g_lr, sizeof lr_back), "cudaMemcpyFromSymbol");
  check(lr_back == lr, "g_lr round trip");
  if (on_sim) {
    // Kernels compute nothing on the sim: the weights are still zero-filled
    // device memory (the sim's fresh pages), the update did not change them.
    float first = -1.f;
    ok(cudaMemcpy(&first, w, sizeof first, cudaMemcpyDeviceToHost), "read back w");
    check(first == 0.f, "kernels compute nothing on the sim");
  }

  ok(cudaStreamSynchronize(update), "sync update");
  ok(cudaEventDestroy(forward_done), "event destroy");
  ok(cudaEventDestroy(update_done), "event destroy");

  // Leaked on purpose: a stream-ordered buffer, and the activations and
  // gradients; only the weights are freed.
  float* leaked = nullptr;
  ok(cudaMallocAsync(&leaked, 4096, compute), "cudaMallocAsync leaked");
  m.alloc(malloc_async_api, "device", 0, addr(leaked), 4096, addr(compute));
  ok(cudaStreamSynchronize(compute), "final sync");
  ok(cudaFree(w), "cudaFree w");
  m.free(free_api, "device", 0, addr(w), bytes);
  ok(cudaStreamDestroy(compute), "stream destroy");
  ok(cudaStreamDestroy(update), "stream destroy");
  return 0;
}
