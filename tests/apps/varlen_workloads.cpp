// Variable-length workloads for the caching pool (issue 18): each shape is a
// pattern of device allocations that a caching allocator handles badly, the
// way a real training or inference job makes it. Sizes change from one step
// to the next, so a cache sized for one step's tensors holds the wrong
// blocks for the next one.
//
//   varlen_workloads --shape NAME [--steps N] [--seed S] [--host-us N]
//   varlen_workloads --list
//
// Shapes (--list prints them):
//   padded_buckets  training on batches padded to a length bucket: B x L
//                   varies (tail batches of a bucket are short), 12 layers,
//                   attention scores, dropout masks, a large logits temporary
//   long_attention  long sequences (L up to 6144) with activation
//                   checkpointing: per-layer B x H x L x L score temporaries,
//                   of a different size every step, dominate
//   two_streams     a compute stream and a data stream, cudaMallocAsync /
//                   cudaFreeAsync: the next batch is prepared on the data
//                   stream while the current one trains; inputs are freed on
//                   the compute stream, outputs on the data stream, with
//                   events between them; the optimizer uses cudaMalloc
//   kv_cache        inference with growing context: requests arrive and
//                   finish, each with a KV cache per layer appended to in
//                   chunks of varying size, while per-step temporaries (chunked
//                   prefill, decode) come and go
//   many_layers     96 layers of varying width with saved activations and
//                   temporaries from 512 B to 20 MiB (both size classes)
//   repeat          padded_buckets' model with the same batch shape every
//                   step: a steady state (issue 30)
//
// --host-us N: busy mode (workload_device.h, issue 30): N µs of host work
// per allocation, device work around each buffer, one line per step with
// its time and what the host asked of the driver, and the steady state's
// summary.
//
// Nothing is written to the buffers (the simulated device's memory costs
// nothing until written). Prints `peak_live_bytes=N failed_mallocs=N
// steps=N` like seeds_transformer: its own peak of live bytes (the sum of
// the sizes it asked for) and how many allocations failed (a failed one is
// counted, its tensor is left out, and the step goes on). Deterministic for
// a given seed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "workload_device.h"

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = kKiB * kKiB;
constexpr std::size_t kHalf = 2;   // fp16 / bf16 activations
constexpr std::size_t kFloat = 4;  // fp32 weights, optimizer state, statistics

using Rng = std::mt19937_64;

// A number in [lo, hi], the same on every standard library.
std::size_t pick(Rng& rng, std::size_t lo, std::size_t hi) { return lo + rng() % (hi - lo + 1); }

void check(const char* call, cudaError_t rc) {
  if (rc != cudaSuccess) workload::fail("varlen_workloads", call, rc);
}

using workload::Device;

// Weights, their gradients and Adam's two moments: `copies` allocations of
// each size, made once.
std::vector<void*> model_state(Device& dev, const std::vector<std::size_t>& sizes, int copies) {
  std::vector<void*> state;
  for (int c = 0; c < copies; ++c)
    for (std::size_t bytes : sizes) state.push_back(dev.alloc(bytes));
  return state;
}

// ------------------------------------------------------------ padded_buckets

// padded_buckets' model, or with `repeat` the same batch shape (B x L =
// 16 x 256) every step: the steady state of a job whose shapes never change.
std::size_t padded(Device& dev, Rng& rng, std::size_t steps, bool repeat) {
  constexpr std::size_t kLayers = 12, kD = 512, kHeads = 8, kVocab = 16384, kBudget = 4096;
  constexpr std::size_t kBuckets[] = {64, 96, 128, 192, 256, 320, 384, 512, 640, 768};
  std::vector<std::size_t> params = {kVocab * kD * kFloat};  // embedding
  for (std::size_t l = 0; l < kLayers; ++l)
    for (std::size_t n : {3 * kD * kD, 3 * kD, kD * kD, kD, 4 * kD * kD, 4 * kD, 4 * kD * kD, kD, 2 * kD, 2 * kD})
      params.push_back(n * kFloat);
  std::vector<void*> state = model_state(dev, params, 4);

  for (std::size_t step = 0; step < steps; ++step) {
    const workload::Step timed(dev);
    // The longest real sequence of the batch decides its bucket; a bucket's
    // last batch is short.
    const std::size_t longest = repeat ? 256 : pick(rng, 24, kBuckets[std::size(kBuckets) - 1]);
    const std::size_t L = *std::lower_bound(std::begin(kBuckets), std::end(kBuckets), longest);
    const std::size_t full = kBudget / L;
    const std::size_t B = !repeat && rng() % 4 == 0 ? pick(rng, 1, full) : full;
    const std::size_t tokens = B * L;
    const std::size_t td = tokens * kD * kHalf;
    const std::size_t scores = kHeads * B * L * L * kHalf;
    const std::size_t stats = tokens * kFloat;

    std::vector<void*> batch = {dev.alloc(tokens * 8), dev.alloc(tokens * 8), dev.alloc(tokens)};  // ids, labels, mask
    std::vector<std::vector<void*>> saved(kLayers);
    void* x = dev.alloc(td);  // embeddings
    for (std::size_t l = 0; l < kLayers; ++l) {
      std::vector<void*>& s = saved[l];
      s.push_back(dev.alloc(td));            // layer norm 1
      s.push_back(dev.alloc(stats));         // its mean
      s.push_back(dev.alloc(stats));         // its rstd
      s.push_back(dev.alloc(3 * td));        // q, k, v
      s.push_back(dev.alloc(scores));        // scores
      void* upcast = dev.alloc(2 * scores);  // fp32 softmax input, a temporary
      s.push_back(dev.alloc(scores));        // probabilities
      dev.free(upcast);
      s.push_back(dev.alloc(kHeads * B * L * L));  // attention dropout mask
      s.push_back(dev.alloc(td));                  // context
      s.push_back(dev.alloc(td));                  // output projection
      s.push_back(dev.alloc(tokens * kD));         // dropout mask
      s.push_back(x);                              // the residual stream is saved
      x = dev.alloc(td);
      s.push_back(dev.alloc(td));  // layer norm 2
      s.push_back(dev.alloc(stats));
      s.push_back(dev.alloc(stats));
      s.push_back(dev.alloc(4 * td));       // MLP up
      s.push_back(dev.alloc(4 * td));       // GELU
      s.push_back(dev.alloc(tokens * kD));  // dropout mask
      void* next = dev.alloc(td);
      s.push_back(x);
      x = next;
    }
    // Loss: logits, their fp32 log-softmax, the gradient.
    void* logits = dev.alloc(tokens * kVocab * kHalf);
    void* logsoftmax = dev.alloc(tokens * kVocab * kFloat);
    void* grad_logits = dev.alloc(tokens * kVocab * kHalf);
    dev.free(logsoftmax);
    dev.free(logits);
    void* grad = dev.alloc(td);
    dev.free(grad_logits);
    dev.free(x);
    for (std::size_t l = kLayers; l-- > 0;) {  // backward: saved tensors go as their node runs
      std::vector<void*>& s = saved[l];
      void* g_gelu = dev.alloc(4 * td);
      void* g_up = dev.alloc(4 * td);
      dev.free(g_gelu);
      for (int i = 0; i < 7; ++i) {  // the MLP block's saved tensors
        dev.free(s.back());
        s.pop_back();
      }
      void* g_ln2 = dev.alloc(td);
      dev.free(g_up);
      void* g_probs = dev.alloc(scores);
      void* g_scores = dev.alloc(scores);
      dev.free(g_probs);
      void* g_qkv = dev.alloc(3 * td);
      dev.free(g_scores);
      void* g_in = dev.alloc(td);
      dev.free(g_qkv);
      dev.free(g_ln2);
      dev.free_all(s);
      dev.free(grad);
      grad = g_in;
    }
    dev.free(grad);
    dev.free_all(batch);
  }
  dev.free_all(state);
  return steps;
}

std::size_t padded_buckets(Device& dev, Rng& rng, std::size_t steps) { return padded(dev, rng, steps, false); }
std::size_t repeat(Device& dev, Rng& rng, std::size_t steps) { return padded(dev, rng, steps, true); }

// ------------------------------------------------------------ long_attention

std::size_t long_attention(Device& dev, Rng& rng, std::size_t steps) {
  constexpr std::size_t kLayers = 8, kD = 768, kHeads = 8, kBudget = 6144;
  std::vector<std::size_t> params;
  for (std::size_t l = 0; l < kLayers; ++l)
    for (std::size_t n : {3 * kD * kD, kD * kD, 4 * kD * kD, 4 * kD * kD, 2 * kD, 2 * kD}) params.push_back(n * kFloat);
  std::vector<void*> state = model_state(dev, params, 4);

  for (std::size_t step = 0; step < steps; ++step) {
    const workload::Step timed(dev);
    const std::size_t L = 64 * pick(rng, 8, kBudget / 64);  // any multiple of 64, no buckets
    const std::size_t B = std::max<std::size_t>(1, kBudget / L - (rng() % 3 == 0 ? rng() % (kBudget / L) : 0));
    const std::size_t tokens = B * L;
    const std::size_t td = tokens * kD * kHalf;
    const std::size_t scores = kHeads * B * L * L * kHalf;

    // One layer's attention and MLP; `keep` receives what backward needs
    // (nothing in the checkpointed forward pass).
    auto layer = [&](std::vector<void*>* keep) {
      std::vector<void*> t;
      t.push_back(dev.alloc(td));      // layer norm
      t.push_back(dev.alloc(3 * td));  // q, k, v
      void* s = dev.alloc(scores);
      void* p = dev.alloc(scores);
      dev.free(s);
      t.push_back(p);
      t.push_back(dev.alloc(td));  // context
      t.push_back(dev.alloc(td));  // layer norm 2
      t.push_back(dev.alloc(4 * td));
      t.push_back(dev.alloc(4 * td));
      void* out = dev.alloc(td);
      if (keep) {
        keep->insert(keep->end(), t.begin(), t.end());
      } else {
        dev.free_all(t);
      }
      return out;
    };

    std::vector<void*> checkpoints = {dev.alloc(td)};  // layer inputs, the only thing kept
    for (std::size_t l = 0; l < kLayers; ++l) checkpoints.push_back(layer(nullptr));
    void* grad = dev.alloc(td);
    for (std::size_t l = kLayers; l-- > 0;) {
      dev.free(checkpoints.back());  // this layer's output: its gradient is `grad`
      checkpoints.pop_back();
      std::vector<void*> saved;
      void* out = layer(&saved);  // recomputed, everything kept
      dev.free(out);
      void* g_mlp = dev.alloc(4 * td);
      void* g_ctx = dev.alloc(td);
      dev.free(g_mlp);
      void* g_probs = dev.alloc(scores);
      void* g_scores = dev.alloc(scores);
      dev.free(g_probs);
      void* g_qkv = dev.alloc(3 * td);
      dev.free(g_scores);
      dev.free_all(saved);
      void* g_in = dev.alloc(td);
      dev.free(g_qkv);
      dev.free(g_ctx);
      dev.free(grad);
      grad = g_in;
    }
    dev.free(grad);
    dev.free_all(checkpoints);
  }
  dev.free_all(state);
  return steps;
}

// --------------------------------------------------------------- two_streams

std::size_t two_streams(Device& dev, Rng& rng, std::size_t steps) {
  constexpr std::size_t kLayers = 6, kD = 1024, kHeads = 4, kBudget = 4096, kClasses = 4096;
  cudaStream_t compute = nullptr, data = nullptr;
  check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&data, cudaStreamNonBlocking));
  dev.set_step_stream(compute);  // the loss is computed there

  std::vector<std::size_t> params;
  for (std::size_t l = 0; l < kLayers; ++l)
    for (std::size_t n : {3 * kD * kD, kD * kD, 4 * kD * kD, 4 * kD * kD, kD, kD}) params.push_back(n * kFloat);
  params.push_back(kD * kClasses * kFloat);
  std::vector<void*> state = model_state(dev, params, 4);  // cudaMalloc: device-wide

  struct Batch {
    std::size_t B = 0, L = 0;
    void* features = nullptr;  // on the data stream, freed on the compute stream
    void* labels = nullptr;
    cudaEvent_t ready = nullptr;
  };
  // The data stream decodes raw input into features: its own temporaries
  // come and go on it.
  auto prepare = [&]() {
    Batch b;
    b.L = 16 * pick(rng, 8, 128);  // 128 .. 2048
    b.B = std::max<std::size_t>(1, kBudget / b.L - rng() % 2);
    const std::size_t tokens = b.B * b.L;
    void* raw = dev.alloc_async(tokens * pick(rng, 8, 24) * kKiB, data);  // compressed frames
    void* decoded = dev.alloc_async(tokens * 12 * kKiB, data);
    dev.free_async(raw, data);
    void* augmented = dev.alloc_async(tokens * 12 * kKiB, data);
    dev.free_async(decoded, data);
    b.features = dev.alloc_async(tokens * kD * kHalf, data);
    b.labels = dev.alloc_async(b.B * 8, data);
    dev.free_async(augmented, data);
    check("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&b.ready, cudaEventDisableTiming));
    check("cudaEventRecord", cudaEventRecord(b.ready, data));
    return b;
  };

  Batch next = prepare();
  std::vector<cudaEvent_t> events;
  for (std::size_t step = 0; step < steps; ++step) {
    const workload::Step timed(dev);
    Batch cur = next;
    next = prepare();  // prefetch, overlapping this step
    check("cudaStreamWaitEvent", cudaStreamWaitEvent(compute, cur.ready, 0));
    const std::size_t tokens = cur.B * cur.L;
    const std::size_t td = tokens * kD * kHalf;
    const std::size_t scores = kHeads * cur.B * cur.L * cur.L * kHalf;

    void* x = dev.alloc_async(td, compute);  // input projection
    dev.free_async(cur.features, compute);   // another stream's memory, freed here
    std::vector<std::vector<void*>> saved(kLayers);
    for (std::size_t l = 0; l < kLayers; ++l) {
      std::vector<void*>& s = saved[l];
      s.push_back(x);
      s.push_back(dev.alloc_async(3 * td, compute));
      s.push_back(dev.alloc_async(scores, compute));
      s.push_back(dev.alloc_async(scores, compute));
      s.push_back(dev.alloc_async(td, compute));
      s.push_back(dev.alloc_async(4 * td, compute));
      s.push_back(dev.alloc_async(4 * td, compute));
      x = dev.alloc_async(td, compute);
    }
    // Predictions go to the host from the data stream, which frees them.
    void* predictions = dev.alloc_async(cur.B * kClasses * kFloat, compute);
    void* grad = dev.alloc_async(td, compute);
    dev.free_async(x, compute);
    cudaEvent_t done = nullptr;
    check("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    check("cudaEventRecord", cudaEventRecord(done, compute));
    check("cudaStreamWaitEvent", cudaStreamWaitEvent(data, done, 0));
    dev.free_async(predictions, data);
    events.push_back(done);
    for (std::size_t l = kLayers; l-- > 0;) {
      void* g_mlp = dev.alloc_async(4 * td, compute);
      void* g_scores = dev.alloc_async(scores, compute);
      void* g_in = dev.alloc_async(td, compute);
      dev.free_async(g_scores, compute);
      dev.free_async(g_mlp, compute);
      dev.free_all_async(saved[l], compute);
      dev.free_async(grad, compute);
      grad = g_in;
    }
    dev.free_async(grad, compute);
    dev.free_async(cur.labels, compute);
    events.push_back(cur.ready);
    // The optimizer: a flat buffer of gradients and a norm, with cudaMalloc.
    void* flat = dev.alloc(pick(rng, 20, 40) * kMiB);
    void* norm = dev.alloc(pick(rng, 1, 8) * 512);
    dev.free(norm);
    dev.free(flat);
  }
  dev.free_async(next.features, data);
  dev.free_async(next.labels, data);
  events.push_back(next.ready);
  check("cudaDeviceSynchronize", cudaDeviceSynchronize());
  dev.set_step_stream(nullptr);
  for (cudaEvent_t e : events) check("cudaEventDestroy", cudaEventDestroy(e));
  check("cudaStreamDestroy", cudaStreamDestroy(data));
  check("cudaStreamDestroy", cudaStreamDestroy(compute));
  dev.free_all(state);
  return steps;
}

// ------------------------------------------------------------------ kv_cache

std::size_t kv_cache(Device& dev, Rng& rng, std::size_t steps) {
  constexpr std::size_t kLayers = 12, kD = 2048, kHeads = 16, kKvHeads = 4, kHeadDim = 128, kFfn = 5632;
  constexpr std::size_t kVocab = 32000;
  constexpr std::size_t kKvPerToken = 2 * kKvHeads * kHeadDim * kHalf;  // K and V, one layer
  constexpr std::size_t kMaxRequests = 8, kMaxContext = 8192, kPrefillChunk = 1024, kDecodeTokens = 16;
  std::vector<std::size_t> params = {kVocab * kD * kHalf, kVocab * kD * kHalf};  // embedding, head
  for (std::size_t l = 0; l < kLayers; ++l)
    for (std::size_t n : {kD * kD, 2 * kKvHeads * kHeadDim * kD, kD * kD, kD * kFfn, kD * kFfn, kFfn * kD, kD, kD})
      params.push_back(n * kHalf);
  std::vector<void*> weights = model_state(dev, params, 1);

  struct Request {
    std::size_t prompt = 0, target = 0;  // tokens to prefill; total length when done
    std::size_t length = 0, capacity = 0;
    std::vector<std::vector<void*>> chunks = std::vector<std::vector<void*>>(kLayers);
  };
  std::vector<Request> active;
  // Adds a chunk of at least `tokens` tokens to every layer's cache.
  auto grow = [&](Request& r, std::size_t tokens) {
    for (std::vector<void*>& layer : r.chunks) layer.push_back(dev.alloc(tokens * kKvPerToken));
    r.capacity += tokens;
  };
  // One forward pass over `n` new tokens per request (of `contexts`).
  auto forward = [&](const std::vector<std::size_t>& news, const std::vector<std::size_t>& contexts) {
    std::size_t n = 0;
    for (std::size_t k : news) n += k;
    void* x = dev.alloc(n * kD * kHalf);
    for (std::size_t l = 0; l < kLayers; ++l) {
      void* h = dev.alloc(n * kD * kHalf);
      void* q = dev.alloc(n * kD * kHalf);
      std::vector<void*> scores;
      for (std::size_t i = 0; i < news.size(); ++i)
        scores.push_back(dev.alloc(kHeads * news[i] * contexts[i] * kFloat));
      void* ctx = dev.alloc(n * kD * kHalf);
      dev.free_all(scores);
      dev.free(q);
      void* gate = dev.alloc(n * kFfn * kHalf);
      void* up = dev.alloc(n * kFfn * kHalf);
      void* act = dev.alloc(n * kFfn * kHalf);
      dev.free(up);
      dev.free(gate);
      void* out = dev.alloc(n * kD * kHalf);
      dev.free(act);
      dev.free(ctx);
      dev.free(h);
      dev.free(x);
      x = out;
    }
    void* logits = dev.alloc(news.size() * kVocab * kFloat);  // last token of each request
    dev.free(logits);
    dev.free(x);
  };

  for (std::size_t step = 0; step < steps; ++step) {
    const workload::Step timed(dev);
    // Admission: a new request is prefilled in chunks, its cache growing by
    // each chunk.
    if (active.size() < kMaxRequests && (active.size() < 2 || rng() % 3 == 0)) {
      Request r;
      r.prompt = pick(rng, 64, 4096);
      r.target = std::min(kMaxContext, r.prompt + pick(rng, 32, 3072));
      while (r.length < r.prompt) {
        const std::size_t chunk = std::min(r.prompt - r.length, pick(rng, kPrefillChunk / 4, kPrefillChunk));
        grow(r, chunk);
        r.length += chunk;
        forward({chunk}, {r.length});
      }
      active.push_back(std::move(r));
    }
    // Decode: every request gains up to kDecodeTokens tokens; a full cache
    // gets a new chunk of a size the scheduler picks.
    std::vector<std::size_t> news, contexts;
    for (Request& r : active) {
      const std::size_t n = std::min(kDecodeTokens, r.target - r.length);
      if (r.length + n > r.capacity) grow(r, std::max(n, 16 * pick(rng, 2, 32)));
      r.length += n;
      news.push_back(n);
      contexts.push_back(r.length);
    }
    forward(news, contexts);
    // Finished requests give their whole cache back.
    for (auto it = active.begin(); it != active.end();) {
      if (it->length < it->target) {
        ++it;
        continue;
      }
      for (std::vector<void*>& layer : it->chunks) dev.free_all(layer);
      it = active.erase(it);
    }
  }
  for (Request& r : active)
    for (std::vector<void*>& layer : r.chunks) dev.free_all(layer);
  dev.free_all(weights);
  return steps;
}

// --------------------------------------------------------------- many_layers

std::size_t many_layers(Device& dev, Rng& rng, std::size_t steps) {
  constexpr std::size_t kLayers = 96, kMaxTokens = 4096;
  // Widths of a U-Net-like stack: down, up, down, ...
  constexpr std::size_t kWidths[] = {64, 128, 192, 256, 384, 512, 640, 512, 384, 256, 192, 128};
  auto width = [&](std::size_t l) { return kWidths[l % std::size(kWidths)]; };
  std::vector<std::size_t> params;
  for (std::size_t l = 0; l < kLayers; ++l) {
    const std::size_t in = width(l), out = width(l + 1);
    params.push_back(in * out * kFloat);     // weight
    params.push_back(out * kFloat);          // bias: 256 B .. 2.5 KiB
    params.push_back(2 * out * kFloat);      // norm scale and shift
    params.push_back(3 * 3 * out * kFloat);  // a depthwise kernel
  }
  std::vector<void*> state = model_state(dev, params, 4);
  constexpr std::size_t kWorkspaces[] = {32 * kKiB, 256 * kKiB, kMiB, 4 * kMiB, 8 * kMiB};

  for (std::size_t step = 0; step < steps; ++step) {
    const workload::Step timed(dev);
    const std::size_t L = 8 * pick(rng, 16, 512);  // 128 .. 4096
    const std::size_t B = std::max<std::size_t>(1, pick(rng, 1, kMaxTokens / L));
    const std::size_t T = B * L;
    std::vector<std::vector<void*>> saved(kLayers);
    void* x = dev.alloc(T * width(0) * kHalf);
    for (std::size_t l = 0; l < kLayers; ++l) {
      const std::size_t w = width(l + 1);
      std::vector<void*>& s = saved[l];
      s.push_back(x);
      void* ws = dev.alloc(kWorkspaces[rng() % std::size(kWorkspaces)]);  // a GEMM's workspace
      s.push_back(dev.alloc(T * w * kHalf));                              // linear out
      dev.free(ws);
      void* partial = dev.alloc(pick(rng, 1, 8) * 512);  // a reduction's partial sums
      s.push_back(dev.alloc(T * kFloat));                // norm mean
      s.push_back(dev.alloc(T * kFloat));                // norm rstd
      dev.free(partial);
      s.push_back(dev.alloc(T * w * kHalf));      // normalised
      s.push_back(dev.alloc(T * 4 * w * kHalf));  // expansion: up to 20 MiB
      s.push_back(dev.alloc(T * w / 8));          // a bit mask
      void* transposed = dev.alloc(T * w * kHalf);
      x = dev.alloc(T * w * kHalf);
      dev.free(transposed);
    }
    void* grad = dev.alloc(T * width(kLayers) * kHalf);
    dev.free(x);
    for (std::size_t l = kLayers; l-- > 0;) {
      const std::size_t w = width(l + 1), in = width(l);
      void* g_expand = dev.alloc(T * 4 * w * kHalf);
      void* g_w = dev.alloc(in * w * kFloat);  // a weight gradient before accumulation
      void* partial = dev.alloc(pick(rng, 1, 8) * 512);
      dev.free(partial);
      void* g_norm = dev.alloc(T * w * kHalf);
      dev.free(g_expand);
      void* g_in = dev.alloc(T * in * kHalf);
      dev.free(g_w);
      dev.free(g_norm);
      dev.free_all(saved[l]);
      dev.free(grad);
      grad = g_in;
    }
    dev.free(grad);
  }
  dev.free_all(state);
  return steps;
}

struct ShapeInfo {
  const char* name;
  std::size_t (*run)(Device&, Rng&, std::size_t);
  std::size_t default_steps;
};

constexpr ShapeInfo kShapes[] = {
    {"padded_buckets", padded_buckets, 48}, {"long_attention", long_attention, 40},
    {"two_streams", two_streams, 60},       {"kv_cache", kv_cache, 600},
    {"many_layers", many_layers, 40},       {"repeat", repeat, 48},
};

int usage() {
  std::fprintf(stderr,
               "usage: varlen_workloads --shape NAME [--steps N] [--seed S] [--host-us N]\n"
               "       varlen_workloads --list\nshapes:");
  for (const ShapeInfo& s : kShapes) std::fprintf(stderr, " %s", s.name);
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const ShapeInfo* shape = nullptr;
  std::size_t steps = 0;
  std::uint64_t seed = 20240618;
  std::uint64_t host_us = 0;
  bool busy = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--list") {
      for (const ShapeInfo& s : kShapes) std::printf("%s\n", s.name);
      return 0;
    }
    if (i + 1 == argc) return usage();
    const char* value = argv[++i];
    char* end = nullptr;
    if (arg == "--shape") {
      for (const ShapeInfo& s : kShapes)
        if (std::strcmp(s.name, value) == 0) shape = &s;
      if (!shape) return usage();
    } else if (arg == "--steps") {
      steps = std::strtoull(value, &end, 10);
      if (*end != '\0' || steps == 0) return usage();
    } else if (arg == "--seed") {
      seed = std::strtoull(value, &end, 10);
      if (*end != '\0') return usage();
    } else if (arg == "--host-us") {
      host_us = std::strtoull(value, &end, 10);
      if (*end != '\0') return usage();
      busy = true;
    } else {
      return usage();
    }
  }
  if (!shape) return usage();
  Rng rng(seed);
  Device dev("varlen_workloads");
  if (busy) dev.set_busy(host_us);
  const std::size_t done = shape->run(dev, rng, steps ? steps : shape->default_steps);
  check("cudaDeviceSynchronize", cudaDeviceSynchronize());
  dev.report();
  std::printf("peak_live_bytes=%zu failed_mallocs=%zu steps=%zu\n", dev.peak(), dev.failed(), done);
  return 0;
}
