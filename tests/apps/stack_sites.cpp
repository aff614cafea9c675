// Two allocation sites and one release site with known names, for the call
// stack tests: each alloc/free in the trace must name its site innermost,
// then main, and show none of cumemtrace's own frames. Prints each pointer
// with the site that allocated it.
//
//   stack_sites          prints "weights PTR" / "activations PTR" lines
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace stack_sites {

void fail(const char* what, cudaError_t rc) {
  std::fprintf(stderr, "stack_sites: %s failed: %s\n", what, cudaGetErrorString(rc));
  std::exit(3);
}

// noinline, and work after the CUDA call so it is not a tail call: each
// site keeps a frame of its own in the stack.
__attribute__((noinline)) void* allocate_weights(std::size_t bytes) {
  void* p = nullptr;
  if (const cudaError_t rc = cudaMalloc(&p, bytes); rc != cudaSuccess) fail("cudaMalloc", rc);
  std::printf("weights %p\n", p);
  return p;
}

__attribute__((noinline)) void* allocate_activations(std::size_t bytes) {
  void* p = nullptr;
  if (const cudaError_t rc = cudaMalloc(&p, bytes); rc != cudaSuccess) fail("cudaMalloc", rc);
  std::printf("activations %p\n", p);
  return p;
}

__attribute__((noinline)) void release(void* p) {
  if (const cudaError_t rc = cudaFree(p); rc != cudaSuccess) fail("cudaFree", rc);
  std::fflush(stdout);
}

}  // namespace stack_sites

int main() {
  for (int step = 0; step < 3; ++step) {
    void* weights = stack_sites::allocate_weights((1u << 20) + 512u * static_cast<unsigned>(step));
    void* activations = stack_sites::allocate_activations(4096u + 7u * static_cast<unsigned>(step));
    stack_sites::release(activations);
    stack_sites::release(weights);
  }
  return 0;
}
