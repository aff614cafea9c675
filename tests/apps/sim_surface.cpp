// The sim's whole export surface (issue 20): cuGetProcAddress finds every
// function the toolkit's libcuda.so exports, at the ABI its newest symbol
// has, per-thread twins included; a function the sim does not model answers
// the documented "not supported" codes, and the runtime's unmodelled
// functions follow its last-error rule.
//
// Usage: sim_surface EXPORT_LIST, where EXPORT_LIST holds the toolkit's
// libcuda.so exports one per line (the ctest writes it with nm). The list
// comes from the toolkit, not from the sim, so a function the sim's table
// misses fails here.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "sim_test.h"

namespace {

struct Newest {
  int rank = 0;          // 1 for cuFoo, N for cuFoo_vN
  std::string symbol;    // the newest ABI's symbol
  std::string pt_symbol; // its per-thread twin, if exported
};

int check_every_export_is_found(const char* list_path) {
  std::ifstream list(list_path);
  if (!list) SIM_FAIL("cannot read %s", list_path);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!driver) SIM_FAIL("the runtime did not load libcuda.so.1");
  const std::regex parts("^(\\w+?)(_v(\\d+))?(_pt[sd][zs])?$");
  std::map<std::string, Newest> bases;
  std::string name;
  int count = 0;
  while (std::getline(list, name)) {
    std::smatch m;
    if (name.empty() || !std::regex_match(name, m, parts)) continue;
    ++count;
    if (!dlsym(driver, name.c_str())) SIM_FAIL("the sim's libcuda.so.1 lacks %s", name.c_str());
    Newest& n = bases[m[1]];
    const int rank = m[3].matched ? std::stoi(m[3]) : 1;
    if (rank < n.rank) continue;
    if (rank > n.rank) n = Newest{rank, {}, {}};
    (m[4].matched ? n.pt_symbol : n.symbol) = name;
  }
  SIM_CHECK(count > 600);  // CUDA 13's stub exports 637
  for (const auto& [base, newest] : bases) {
    // The newest ABI, legacy default stream and per-thread default stream.
    for (const bool per_thread : {false, true}) {
      void* pfn = nullptr;
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      const cuuint64_t flags =
          per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
      SIM_CU_OK(cuGetProcAddress(base.c_str(), &pfn, CUDA_VERSION, flags, &status));
      if (status != CU_GET_PROC_ADDRESS_SUCCESS || !pfn) {
        SIM_FAIL("cuGetProcAddress(\"%s\") found nothing (status %d)", base.c_str(), status);
      }
      const std::string& want =
          per_thread && !newest.pt_symbol.empty() ? newest.pt_symbol : newest.symbol;
      if (want.empty()) continue;  // only per-thread symbols of that rank
      if (pfn != dlsym(driver, want.c_str())) {
        SIM_FAIL("cuGetProcAddress(\"%s\", %s) is not %s", base.c_str(),
                 per_thread ? "per-thread" : "default", want.c_str());
      }
    }
  }
  std::printf("cuGetProcAddress finds all %d exports (%zu base names)\n", count, bases.size());
  return count;
}

typedef CUresult (*Unmodelled)(void*, void*);

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) SIM_FAIL("usage: sim_surface EXPORT_LIST");
  // A driver function the sim does not model (CUDA arrays are textures'
  // memory; nothing here needs them): before cuInit every entry point says
  // CUDA_ERROR_NOT_INITIALIZED, after it CUDA_ERROR_NOT_SUPPORTED.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (!driver) SIM_FAIL("cannot load libcuda.so.1");
  if (!simtest::mapped("sim/libcuda.so.1")) SIM_FAIL("libcuda.so.1 is not the sim's");
  auto array_create = reinterpret_cast<Unmodelled>(dlsym(driver, "cuArrayCreate_v2"));
  SIM_CHECK(array_create != nullptr);
  CUarray array = nullptr;
  CUDA_ARRAY_DESCRIPTOR desc{};
  SIM_EXPECT_CU(array_create(&array, &desc), CUDA_ERROR_NOT_INITIALIZED);
  SIM_CU_OK(cuInit(0));
  SIM_EXPECT_CU(array_create(&array, &desc), CUDA_ERROR_NOT_SUPPORTED);
  const char* text = nullptr;
  SIM_CU_OK(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &text));
  SIM_CHECK(std::strcmp(text, "CUDA_ERROR_NOT_SUPPORTED") == 0);

  simtest::require_runtime_on_sim();
  check_every_export_is_found(argv[1]);

  // A runtime function the sim does not model: cudaErrorNotSupported, which
  // becomes the last error (cudaGetLastError returns and clears it,
  // cudaPeekAtLastError only returns it), as any failed call does.
  SIM_RT_OK(cudaFree(nullptr));
  cudaChannelFormatDesc channel = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  SIM_CHECK(channel.x == 32 && channel.y == 0 && channel.f == cudaChannelFormatKindFloat);
  cudaArray_t rt_array = nullptr;
  SIM_EXPECT_RT(cudaMallocArray(&rt_array, &channel, 16, 16), cudaErrorNotSupported);
  SIM_EXPECT_RT(cudaPeekAtLastError(), cudaErrorNotSupported);
  SIM_EXPECT_RT(cudaGetLastError(), cudaErrorNotSupported);
  SIM_EXPECT_RT(cudaGetLastError(), cudaSuccess);
  // Not sticky: the next call works.
  void* p = nullptr;
  SIM_RT_OK(cudaMalloc(&p, 1024));
  SIM_RT_OK(cudaFree(p));
  std::printf("sim_surface: ok\n");
  return 0;
}
