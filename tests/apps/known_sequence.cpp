// A fixed, irregular sequence of cudaMalloc/cudaFree with a known peak and
// two known leaks. The integration test checks the trace against the
// manifest this program writes (what it did, with the pointers it got) and
// the report against numbers worked out by hand in the test.
//
//   known_sequence MANIFEST_PATH
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace {

std::FILE* manifest = nullptr;
std::map<char, void*> live;

void fail(const char* what, cudaError_t rc) {
  std::fprintf(stderr, "known_sequence: %s failed: %s\n", what, cudaGetErrorString(rc));
  std::exit(3);
}

void alloc(char name, size_t size) {
  void* p = nullptr;
  if (const cudaError_t rc = cudaMalloc(&p, size); rc != cudaSuccess) fail("cudaMalloc", rc);
  live[name] = p;
  std::fprintf(manifest, "alloc %c %zu %p\n", name, size, p);
}

void release(char name) {
  void* p = live.at(name);
  std::fprintf(manifest, "free %c %p\n", name, p);
  std::fflush(manifest);  // the free is recorded before the real free runs
  if (const cudaError_t rc = cudaFree(p); rc != cudaSuccess) fail("cudaFree", rc);
  live.erase(name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: known_sequence MANIFEST_PATH\n");
    return 2;
  }
  manifest = std::fopen(argv[1], "w");
  if (!manifest) {
    std::perror(argv[1]);
    return 2;
  }
  // Creates the context; must reach the runtime and record nothing.
  if (const cudaError_t rc = cudaFree(nullptr); rc != cudaSuccess) fail("cudaFree(NULL)", rc);

  alloc('a', 1'000'000);
  alloc('b', 4'097);
  alloc('c', 33'554'433);  // 32 MiB + 1
  release('b');
  alloc('d', 123'457);
  alloc('e', 7);           // leaked
  release('a');
  alloc('f', 10'485'760);  // the peak: 44,163,657 bytes live
  release('c');
  alloc('g', 2'500'000);   // leaked
  release('d');
  release('f');
  std::fclose(manifest);
  return 0;  // 'e' and 'g' are still allocated
}
