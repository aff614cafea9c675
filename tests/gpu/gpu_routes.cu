// An ordinary nvcc-built CUDA program (issue 7): built by nvcc twice, with
// its default static runtime (gpu_routes_static: the runtime is inside the
// program, so only the dlsym/cuGetProcAddress route sees its calls) and with
// -cudart shared (gpu_routes_shared: symbol interposition sees them). It
// allocates with every runtime allocator a user reaches for, touches the
// memory with a kernel, writes a manifest of what it did
// (tests/apps/route_manifest.h), prints its own counts, and at three points
// writes a cumemtrace mark "sample N" with its own count of live device
// bytes beside it (SAMPLES, JSON); gpu-check.sh checks the trace against all
// three.
//
// Built as host C++ (nvcc -x c++, no __CUDACC__) it has no kernel and no fat
// binary to register, so it also runs on the simulated device, which
// implements no modules (tests/sim/README.md): that is how CI proves the
// manifest and the checker before the GPU run.
//
//   gpu_routes MANIFEST SAMPLES
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "../../include/cumemtrace/cumemtrace.h"
#include "../apps/route_manifest.h"

using route::addr;
using route::check;

namespace {

#if defined(__CUDACC__)
__global__ void fill(unsigned char* p, unsigned char value, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = value;
}
#endif

// Writes `value` into the first `n` bytes of device memory `p` on `stream`.
void touch(void* p, unsigned char value, std::size_t n, cudaStream_t stream) {
#if defined(__CUDACC__)
  fill<<<64, 256, 0, stream>>>(static_cast<unsigned char*>(p), value, n);
  check(cudaGetLastError() == cudaSuccess, "kernel launch");
#else
  check(cudaMemsetAsync(p, value, n, stream) == cudaSuccess, "cudaMemsetAsync");
#endif
}

struct Counts {
  int allocs = 0;
  int frees = 0;
  std::size_t live_bytes = 0;
  std::size_t device_bytes = 0;  // device and managed memory, not pinned host memory
  std::string samples;           // JSON objects, comma-separated
};

// Marks this moment in the trace ("sample N", a no-op without cumemtrace)
// and records the program's own count of device bytes for it.
void sample(Counts& counts) {
  static int step = 0;
  const std::string name = "sample " + std::to_string(step);
  cumemtrace_mark(name.c_str());
  if (!counts.samples.empty()) counts.samples += ',';
  counts.samples += "{\"step\":" + std::to_string(step++) +
                    ",\"allocated\":" + std::to_string(counts.device_bytes) + "}";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  route::Manifest m(argv[1]);
  Counts counts;
  const auto device_side = [](const char* kind) { return std::string(kind) != "host_pinned"; };
  const auto allocated = [&](const char* api, const char* kind, void* p, std::size_t size,
                             std::optional<std::uintptr_t> stream = std::nullopt) {
    m.alloc(api, kind, 0, addr(p), size, stream);
    ++counts.allocs;
    counts.live_bytes += size;
    if (device_side(kind)) counts.device_bytes += size;
  };
  const auto freed = [&](const char* api, const char* kind, void* p, std::size_t size,
                         std::optional<std::uintptr_t> stream = std::nullopt) {
    m.free(api, kind, 0, addr(p), size, stream);
    ++counts.frees;
    counts.live_bytes -= size;
    if (device_side(kind)) counts.device_bytes -= size;
  };

  check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");

  // Plain device memory, small and large, and one kept to the end.
  void* small = nullptr;
  check(cudaMalloc(&small, 1000) == cudaSuccess, "cudaMalloc(1000)");
  allocated("cudaMalloc", "device", small, 1000);
  void* large = nullptr;
  check(cudaMalloc(&large, 64u << 20) == cudaSuccess, "cudaMalloc(64 MiB)");
  allocated("cudaMalloc", "device", large, 64u << 20);
  void* kept = nullptr;
  check(cudaMalloc(&kept, 3u << 20) == cudaSuccess, "cudaMalloc(3 MiB)");
  allocated("cudaMalloc", "device", kept, 3u << 20);
  touch(large, 0x5a, 64u << 20, s);
  touch(kept, 0x11, 3u << 20, s);

  // Stream-ordered: allocated, used and freed on the stream.
  void* async = nullptr;
  check(cudaMallocAsync(&async, 5u << 20, s) == cudaSuccess, "cudaMallocAsync");
  allocated("cudaMallocAsync", "device", async, 5u << 20, addr(s));
  touch(async, 0x22, 5u << 20, s);
  sample(counts);
  check(cudaFreeAsync(async, s) == cudaSuccess, "cudaFreeAsync");
  freed("cudaFreeAsync", "device", async, 5u << 20, addr(s));

  // Managed memory: small (never ask for more than the device has free).
  void* managed = nullptr;
  check(cudaMallocManaged(&managed, 1u << 16, cudaMemAttachGlobal) == cudaSuccess, "cudaMallocManaged");
  allocated("cudaMallocManaged", "managed", managed, 1u << 16);
  touch(managed, 0x33, 1u << 16, s);

  // Pinned host memory, both allocators.
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, 10'000) == cudaSuccess, "cudaMallocHost");
  allocated("cudaMallocHost", "host_pinned", pinned, 10'000);
  void* mapped = nullptr;
  check(cudaHostAlloc(&mapped, 1u << 20, cudaHostAllocMapped) == cudaSuccess, "cudaHostAlloc");
  allocated("cudaHostAlloc", "host_pinned", mapped, 1u << 20);

  sample(counts);

  check(cudaMemcpyAsync(pinned, large, 10'000, cudaMemcpyDeviceToHost, s) == cudaSuccess, "copy back");
  check(cudaStreamSynchronize(s) == cudaSuccess, "sync");
  check(static_cast<unsigned char*>(pinned)[9'999] == 0x5a, "the device wrote the memory",
        static_cast<unsigned char*>(pinned)[9'999]);

  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && free_bytes <= total_bytes,
        "cudaMemGetInfo");

  check(cudaFree(small) == cudaSuccess, "cudaFree(small)");
  freed("cudaFree", "device", small, 1000);
  check(cudaFree(large) == cudaSuccess, "cudaFree(large)");
  freed("cudaFree", "device", large, 64u << 20);
  check(cudaFree(managed) == cudaSuccess, "cudaFree(managed)");
  freed("cudaFree", "managed", managed, 1u << 16);
  check(cudaFreeHost(pinned) == cudaSuccess, "cudaFreeHost(pinned)");
  freed("cudaFreeHost", "host_pinned", pinned, 10'000);
  check(cudaFreeHost(mapped) == cudaSuccess, "cudaFreeHost(mapped)");
  freed("cudaFreeHost", "host_pinned", mapped, 1u << 20);
  check(cudaStreamDestroy(s) == cudaSuccess, "stream destroy");
  sample(counts);
  std::FILE* samples = std::fopen(argv[2], "w");
  check(samples != nullptr, "cannot write the samples");
  std::fprintf(samples, "{\"samples\":[%s]}\n", counts.samples.c_str());
  std::fclose(samples);

  // `kept` stays allocated: the trace's end must count it.
  std::printf("gpu_routes: allocs=%d frees=%d live_bytes=%zu\n", counts.allocs, counts.frees,
              counts.live_bytes);
  return 0;
}
