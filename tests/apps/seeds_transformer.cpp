// The seeds' workload (issue 4): a transformer trained on batches whose shape
// changes from one step to the next. Every batch holds at most 4096 tokens
// (B x L <= 4096), but B and L vary and consecutive batches are shuffled, so
// the activation sizes (proportional to B*L*d, and to B*L*L for attention)
// jump around: the pattern that makes a caching allocator hold far more than
// is live. Weights, their gradients and Adam's two moments are allocated
// once; each step allocates every layer's activations in forward order, keeps
// them for backward, and frees them in reverse while backward allocates and
// frees its own temporaries.
//
//   seeds_transformer [--host-us N] [STEPS] [LAYERS] [D_MODEL]
//
// --host-us N: busy mode (workload_device.h, issue 30): N µs of host work
// per allocation, device work around each buffer, each step timed and
// counted.
//
// Prints its own peak of live bytes and how many cudaMalloc calls failed, as
// `peak_live_bytes=N failed_mallocs=N steps=N`. A failed step frees what it
// holds and the run goes on, so the count says how often memory ran out.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "workload_device.h"

namespace {

constexpr std::size_t kMaxTokens = 4096;
constexpr std::size_t kHeads = 8;
constexpr std::size_t kActivationBytes = 2;  // fp16 activations
constexpr std::size_t kParamBytes = 4;       // fp32 weights and optimizer state

using workload::Device;

struct Shape {
  std::size_t batch;
  std::size_t length;
};

// Sequence lengths from short to the whole token budget; for each, a batch
// size that fills the budget or falls short of it.
std::vector<Shape> make_shapes(std::mt19937& rng) {
  std::vector<Shape> shapes;
  for (std::size_t length : {64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096}) {
    const std::size_t most = kMaxTokens / length;
    shapes.push_back({most, length});
    shapes.push_back({std::max<std::size_t>(1, most / 2 + rng() % (most / 2 + 1)), length});
  }
  return shapes;
}

// One layer's saved activations, in the order forward makes them.
std::vector<std::size_t> layer_activations(const Shape& s, std::size_t d) {
  const std::size_t tokens = s.batch * s.length;
  const std::size_t td = tokens * d * kActivationBytes;
  const std::size_t scores = kHeads * s.batch * s.length * s.length * kActivationBytes;
  return {
      td,      // layer norm 1
      3 * td,  // q, k, v
      scores,  // attention scores
      scores,  // softmax probabilities
      td,      // attention output
      td,      // residual
      td,      // layer norm 2
      4 * td,  // MLP up projection
      4 * td,  // GELU
      td,      // MLP down projection
  };
}

// Frees what a step holds, newest first.
void free_all(Device& device, std::vector<void*>& held) {
  for (auto it = held.rbegin(); it != held.rend(); ++it) device.free(*it);
  held.clear();
}

// One training step; false when an allocation failed (the step is abandoned).
bool train_step(Device& device, const Shape& shape, std::size_t layers, std::size_t d) {
  std::vector<std::vector<void*>> saved(layers);
  auto abandon = [&] {
    for (auto l = saved.rbegin(); l != saved.rend(); ++l) free_all(device, *l);
    return false;
  };
  for (std::size_t l = 0; l < layers; ++l) {  // forward
    for (std::size_t bytes : layer_activations(shape, d)) {
      void* p = device.alloc(bytes);
      if (p == nullptr) return abandon();
      saved[l].push_back(p);
    }
  }
  const std::size_t td = shape.batch * shape.length * d * kActivationBytes;
  void* logits_grad = device.alloc(td);  // the loss's gradient flows back
  if (logits_grad == nullptr) return abandon();
  for (std::size_t l = layers; l-- > 0;) {  // backward, last layer first
    void* grad_mlp = device.alloc(4 * td);
    void* grad_scores = device.alloc(kHeads * shape.batch * shape.length * shape.length * kActivationBytes);
    void* grad_in = device.alloc(td);
    const bool ok = grad_mlp && grad_scores && grad_in;
    device.free(grad_in);
    device.free(grad_scores);
    device.free(grad_mlp);
    free_all(device, saved[l]);  // this layer's activations are done with
    if (!ok) {
      device.free(logits_grad);
      return abandon();
    }
  }
  device.free(logits_grad);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Device device("seeds_transformer");
  if (argc > 2 && std::strcmp(argv[1], "--host-us") == 0) {
    char* end = nullptr;
    const std::uint64_t host_us = std::strtoull(argv[2], &end, 10);
    if (*end != '\0') argc = 0;  // the usage below
    device.set_busy(host_us);
    argv += 2;
    argc -= 2;
  }
  const std::size_t steps = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 96;
  const std::size_t layers = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4;
  const std::size_t d = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 1024;
  if (argc < 1 || steps == 0 || layers == 0 || d == 0) {
    std::fprintf(stderr, "usage: seeds_transformer [--host-us N] [STEPS] [LAYERS] [D_MODEL]\n");
    return 2;
  }
  std::mt19937 rng(20240521);

  // Allocated once: weights, their gradients, Adam's first and second moments.
  std::vector<void*> state;
  const std::size_t layer_params = 12 * d * d;  // attention 4·d², MLP 8·d²
  for (std::size_t l = 0; l < layers; ++l) {
    for (int copy = 0; copy < 4; ++copy) {
      void* p = device.alloc(layer_params * kParamBytes);
      if (p == nullptr) {
        std::printf("peak_live_bytes=%zu failed_mallocs=%zu steps=0\n", device.peak(), device.failed());
        return 0;
      }
      state.push_back(p);
    }
  }

  std::vector<Shape> shapes = make_shapes(rng);
  std::size_t done = 0;
  while (done < steps) {
    std::shuffle(shapes.begin(), shapes.end(), rng);  // a new epoch, a new order
    for (const Shape& shape : shapes) {
      if (done == steps) break;
      const workload::Step timed(device);
      train_step(device, shape, layers, d);
      ++done;
    }
  }
  free_all(device, state);
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  device.report();
  std::printf("peak_live_bytes=%zu failed_mallocs=%zu steps=%zu\n", device.peak(), device.failed(), done);
  return 0;
}
