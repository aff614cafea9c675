// The bundled demo: a toy training loop with the memory behaviour of a real
// one. Weights live for the whole run; each step allocates activations in
// forward order and frees them in reverse after "backward"; batch shapes vary
// from step to step; and one small buffer per step (a loss kept for logging)
// is never freed: the slow leak cumemtrace is built to find.
//
//   demo_training_loop [STEPS]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  std::fprintf(stderr, "demo: %s failed: %s\n", what, cudaGetErrorString(rc));
  std::exit(1);
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  check(cudaMemset(p, 0, bytes), "cudaMemset");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  constexpr int kLayers = 6;
  constexpr size_t kHidden = 1024;

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("demo: training a %d-layer toy model for %d steps on %s\n", kLayers, steps, prop.name);

  std::vector<void*> weights;
  for (int l = 0; l < kLayers; ++l) weights.push_back(device_alloc(kHidden * kHidden * 4));

  std::vector<void*> kept_losses;  // the leak: never freed
  for (int step = 0; step < steps; ++step) {
    const size_t batch = 8 + (step * 7) % 24;  // batch sizes vary between steps
    std::vector<void*> activations;
    for (int l = 0; l < kLayers; ++l) activations.push_back(device_alloc(batch * kHidden * 4 * (l % 3 + 1)));
    void* grad = device_alloc(kHidden * kHidden * 4);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaFree(grad), "cudaFree");
    for (auto it = activations.rbegin(); it != activations.rend(); ++it) check(cudaFree(*it), "cudaFree");
    kept_losses.push_back(device_alloc(4096));
  }
  for (void* w : weights) check(cudaFree(w), "cudaFree");
  std::printf("demo: done; %zu loss buffers were never freed\n", kept_losses.size());
  return 0;
}
