// What a program can ask the driver about its own allocations, printed so
// that a bare run and a run under cumemtrace's caching pool compare line for
// line (addresses as offsets from the allocation they belong to): the
// base and size cuMemGetAddressRange and the range attributes give for the
// start, the middle and the last byte of each buffer; the same after the
// buffer was freed; and whether IS_LEGACY_CUDA_IPC_CAPABLE agrees with
// cuIpcGetMemHandle (its value may differ under the pool, which refuses
// handles it cannot give correctly; the agreement may not).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

const char* name(CUresult rc) {
  const char* n = nullptr;
  return cuGetErrorName(rc, &n) == CUDA_SUCCESS && n ? n : "?";
}

void describe(const char* label, CUdeviceptr alloc, std::size_t size, CUdeviceptr at) {
  CUdeviceptr base = 0;
  size_t range = 0;
  const CUresult rc = cuMemGetAddressRange(&base, &range, at);
  std::printf("%s +%llu: cuMemGetAddressRange %s", label, static_cast<unsigned long long>(at - alloc), name(rc));
  if (rc == CUDA_SUCCESS) {
    std::printf(" base %s%lld size %s", base == alloc ? "=" : "off ", static_cast<long long>(base - alloc),
                range == size ? "= asked" : std::to_string(range).c_str());
  }
  CUdeviceptr start = 0;
  size_t start_size = 0;
  const CUresult a = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, at);
  const CUresult b = cuPointerGetAttribute(&start_size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, at);
  std::printf("; RANGE_START %s%s, RANGE_SIZE %s%s", name(a), a == CUDA_SUCCESS && start == alloc ? " =" : "",
              name(b), b == CUDA_SUCCESS && start_size == size ? " =" : "");
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  CUdeviceptr start2 = 0;
  size_t size2 = 0;
  void* data[2] = {&start2, &size2};
  const CUresult c = cuPointerGetAttributes(2, attrs, data, at);
  std::printf("; plural %s%s\n", name(c),
              c == CUDA_SUCCESS && start2 == start && size2 == start_size ? " agrees" : " differs");
}

}  // namespace

int main() {
  const std::vector<std::size_t> sizes = {1000, 3000, 1 << 20, 5 << 20, 30 << 20, 1000};
  std::vector<CUdeviceptr> ptrs;
  for (std::size_t size : sizes) {
    void* p = nullptr;
    if (cudaMalloc(&p, size) != cudaSuccess) return 2;
    ptrs.push_back(reinterpret_cast<CUdeviceptr>(p));
  }
  int disagreements = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    char label[32];
    std::snprintf(label, sizeof label, "buffer %zu", i);
    describe(label, ptrs[i], sizes[i], ptrs[i]);
    describe(label, ptrs[i], sizes[i], ptrs[i] + sizes[i] / 2);
    describe(label, ptrs[i], sizes[i], ptrs[i] + sizes[i] - 1);
    int capable = -1;
    cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptrs[i]);
    CUipcMemHandle handle;
    const bool exported = cuIpcGetMemHandle(&handle, ptrs[i]) == CUDA_SUCCESS;
    if ((capable & 0xff) != (exported ? 1 : 0)) {
      ++disagreements;
      std::fprintf(stderr, "buffer %zu: IS_LEGACY_CUDA_IPC_CAPABLE %d, cuIpcGetMemHandle %s\n", i, capable,
                   exported ? "succeeded" : "failed");
    }
  }
  std::printf("IPC capability agrees with cuIpcGetMemHandle: %s\n", disagreements == 0 ? "yes" : "no");
  // Freed: the driver knows no allocation there any more.
  cudaFree(reinterpret_cast<void*>(ptrs[1]));
  describe("freed buffer 1", ptrs[1], sizes[1], ptrs[1]);
  unsigned int type = 0;
  std::printf("freed buffer 1: MEMORY_TYPE %s\n",
              name(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptrs[1])));
  return disagreements == 0 ? 0 : 1;
}
