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

constexpr int kLayers = 6;
constexpr size_t kHidden = 1024;

// The steps of a training loop, each allocating through device_alloc as a
// framework's tensors all go through one allocator: the report tells them
// apart by their callers. noinline keeps each a frame of its own at -O2.
[[gnu::noinline]] std::vector<void*> load_weights() {
  std::vector<void*> weights;
  for (int l = 0; l < kLayers; ++l) weights.push_back(device_alloc(kHidden * kHidden * 4));
  return weights;
}

[[gnu::noinline]] std::vector<void*> forward(size_t batch) {
  std::vector<void*> activations;
  for (int l = 0; l < kLayers; ++l) activations.push_back(device_alloc(batch * kHidden * 4 * (l % 3 + 1)));
  return activations;
}

[[gnu::noinline]] void backward(std::vector<void*>& activations) {
  void* grad = device_alloc(kHidden * kHidden * 4);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaFree(grad), "cudaFree");
  for (auto it = activations.rbegin(); it != activations.rend(); ++it) check(cudaFree(*it), "cudaFree");
  activations.clear();
}

// The leak: the loss of every step kept for logging, never freed.
[[gnu::noinline]] void keep_loss_for_logging(std::vector<void*>& kept_losses) {
  kept_losses.push_back(device_alloc(4096));
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("demo: training a %d-layer toy model for %d steps on %s\n", kLayers, steps, prop.name);

  std::vector<void*> weights = load_weights();
  std::vector<void*> kept_losses;
  for (int step = 0; step < steps; ++step) {
    const size_t batch = 8 + (step * 7) % 24;  // batch sizes vary between steps
    std::vector<void*> activations = forward(batch);
    backward(activations);
    keep_loss_for_logging(kept_losses);
  }
  for (void* w : weights) check(cudaFree(w), "cudaFree");
  std::printf("demo: done; %zu loss buffers were never freed\n", kept_losses.size());
  return 0;
}
