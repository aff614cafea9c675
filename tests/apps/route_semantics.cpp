// Semantics that must be the same with and without cumemtrace: real error
// codes, the last-error state after an out-of-memory, cudaFree(NULL),
// frees of pointers that were never allocated or are freed twice, a free
// with the wrong function, and consistent memory information. Every result
// is printed (the test compares the output of a traced and an untraced
// run); what cumemtrace must record goes to the manifest. Run it on a
// device of 1 GiB.
//
//   route_semantics MANIFEST
#include <cuda_runtime_api.h>

#include <cstdio>

#include "route_manifest.h"

using route::addr;
using route::check;

namespace {

void say(const char* what, cudaError_t rc) { std::printf("%s: %s\n", what, cudaGetErrorName(rc)); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  route::Manifest m(argv[1]);

  say("cudaFree(NULL)", cudaFree(nullptr));

  // Out of memory: the real code, the last error set once, no allocation.
  void* huge = nullptr;
  say("cudaMalloc(4 GiB)", cudaMalloc(&huge, std::size_t{4} << 30));
  std::printf("pointer after the failure: %s\n", huge ? "set" : "NULL");
  say("cudaPeekAtLastError", cudaPeekAtLastError());
  say("cudaGetLastError", cudaGetLastError());
  say("cudaGetLastError again", cudaGetLastError());

  void* a = nullptr;
  say("cudaMalloc(1 MiB)", cudaMalloc(&a, 1 << 20));
  check(a != nullptr, "cudaMalloc(1 MiB)");
  m.alloc("cudaMalloc", "device", 0, addr(a), 1 << 20);
  say("cudaGetLastError after a success", cudaGetLastError());

  // Consistent memory information: free ≤ total, our megabyte in use.
  std::size_t free_bytes = 0, total_bytes = 0;
  say("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("free <= total: %d, in use: %zu\n", free_bytes <= total_bytes, total_bytes - free_bytes);

  // The wrong free function: CUDA refuses it and nothing changes.
  say("cudaFreeHost(device memory)", cudaFreeHost(a));
  say("cudaGetLastError", cudaGetLastError());

  say("cudaFree", cudaFree(a));
  m.free("cudaFree", "device", 0, addr(a), 1 << 20);
  // Freed twice: forwarded (CUDA reports it) and recorded as a double free.
  say("cudaFree again", cudaFree(a));
  m.error("cudaFree", addr(a), "double_free");
  say("cudaGetLastError", cudaGetLastError());

  // Never allocated: forwarded and recorded as an unknown pointer.
  void* bogus = reinterpret_cast<void*>(0x7e57000);
  say("cudaFree(never allocated)", cudaFree(bogus));
  m.error("cudaFree", addr(bogus), "unknown_pointer");
  say("cudaGetLastError", cudaGetLastError());
  say("cudaFreeHost(never allocated)", cudaFreeHost(bogus));
  m.error("cudaFreeHost", addr(bogus), "unknown_pointer");
  say("cudaGetLastError", cudaGetLastError());

  // Accounting is intact: a new allocation is recorded normally and is the
  // only one left at the end.
  void* b = nullptr;
  say("cudaMalloc(4 KiB)", cudaMalloc(&b, 4096));
  m.alloc("cudaMalloc", "device", 0, addr(b), 4096);
  say("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("free <= total: %d, in use: %zu\n", free_bytes <= total_bytes, total_bytes - free_bytes);
  return 0;
}
