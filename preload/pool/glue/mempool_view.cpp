#include "pool/glue/mempool_view.h"

#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "hooks/hook_support.h"
#include "hooks/real_cuda.h"
#include "pool/glue/pool_glue.h"

namespace cumemtrace::preload {
namespace {

constexpr int kMaxDevices = 64;

// A device's figures (relaxed atomics: the program's queries read them
// while other threads allocate, as the driver's own counters are).
struct View {
  std::atomic<std::size_t> used{0};           // the program's pooled stream-ordered bytes, 512-rounded
  std::atomic<std::size_t> used_high{0};      // since the program last reset USED_MEM_HIGH
  std::atomic<std::size_t> segments{0};       // the pool's segments in the driver's pool
  std::atomic<std::size_t> segments_used_high{0};      // since the last USED_MEM_HIGH reset
  std::atomic<std::size_t> segments_reserved_high{0};  // since the last RESERVED_MEM_HIGH reset
  std::atomic<std::size_t> reserved_high{0};  // the pool's stream-ordered memory, as last seen
};
std::array<View, kMaxDevices> g_views;

View* view_of(int dev) { return dev >= 0 && dev < kMaxDevices ? &g_views[dev] : nullptr; }

void raise(std::atomic<std::size_t>& high, std::size_t value) {
  std::size_t seen = high.load(std::memory_order_relaxed);
  while (seen < value && !high.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// What the driver's pool charges an allocation of `size` (see the header).
std::size_t charged(std::size_t size) { return (size + 511) / 512 * 512; }

NextSymbol<decltype(&::cuDeviceGetMemPool)> g_device_get_mem_pool{"cuDeviceGetMemPool"};
NextSymbol<decltype(&::cuMemPoolGetAttribute)> g_pool_get_attribute{"cuMemPoolGetAttribute"};

// The pooled device whose current memory pool is `pool`, or -1.
int device_of_pool(void* pool) {
  const auto get = g_device_get_mem_pool.get();
  if (!get || !pool) return -1;
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    if (!pool_of_device(dev)) continue;
    CUmemoryPool current = nullptr;
    if (get(&current, dev) == CUDA_SUCCESS && current == pool) return dev;
  }
  return -1;
}

std::size_t real_attribute(void* pool, CUmemPool_attribute attr) {
  cuuint64_t v = 0;
  const auto get = g_pool_get_attribute.get();
  if (get) get(static_cast<CUmemoryPool>(pool), attr, &v);
  return static_cast<std::size_t>(v);
}

std::size_t less(std::size_t a, std::size_t b) { return a - std::min(a, b); }

}  // namespace

void note_pooled_stream_alloc(int dev, std::size_t size) noexcept {
  if (View* v = view_of(dev)) {
    const std::size_t now = v->used.fetch_add(charged(size), std::memory_order_relaxed) + charged(size);
    raise(v->used_high, now);
  }
}

void note_pooled_stream_free(int dev, std::size_t size) noexcept {
  View* v = view_of(dev);
  if (!v) return;
  std::size_t seen = v->used.load(std::memory_order_relaxed);
  while (!v->used.compare_exchange_weak(seen, less(seen, charged(size)), std::memory_order_relaxed)) {
  }
}

void note_driver_pool_segment(int dev, std::ptrdiff_t bytes) noexcept {
  View* v = view_of(dev);
  if (!v) return;
  const std::size_t now = v->segments.fetch_add(static_cast<std::size_t>(bytes), std::memory_order_relaxed) +
                          static_cast<std::size_t>(bytes);
  raise(v->segments_used_high, now);
  raise(v->segments_reserved_high, now);
}

void adjust_mempool_attribute(void* pool, int attr, void* value) noexcept {
  if (!value || !caching_pool()) return;
  const int dev = device_of_pool(pool);
  View* v = view_of(dev);
  pool::DevicePool* p = pool_of_device(dev);
  if (!v || !p) return;
  auto* out = static_cast<cuuint64_t*>(value);
  const std::size_t real = static_cast<std::size_t>(*out);
  const std::size_t segments = v->segments.load(std::memory_order_relaxed);
  const std::size_t used = v->used.load(std::memory_order_relaxed);
  auto used_now = [&](std::size_t real_used) { return less(real_used, segments) + used; };
  auto reserved_now = [&](std::size_t real_reserved) {
    const std::size_t ours = p->stream_ordered_reserved();
    raise(v->reserved_high, ours);
    return std::max(less(real_reserved, segments) + ours, used_now(real_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)));
  };
  std::size_t shown = real;
  switch (attr) {
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: shown = used_now(real); break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      shown = std::max(less(real, v->segments_used_high.load(std::memory_order_relaxed)) +
                           v->used_high.load(std::memory_order_relaxed),
                       used_now(real_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)));
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: shown = reserved_now(real); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: {
      const std::size_t current = reserved_now(real_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
      shown = std::max(less(real, v->segments_reserved_high.load(std::memory_order_relaxed)) +
                           v->reserved_high.load(std::memory_order_relaxed),
                       current);
      break;
    }
    default: return;
  }
  *out = shown;
}

void note_mempool_attribute_set(void* pool, int attr) noexcept {
  if (!caching_pool()) return;
  const int dev = device_of_pool(pool);
  View* v = view_of(dev);
  pool::DevicePool* p = pool_of_device(dev);
  if (!v || !p) return;
  // "The high watermark can only be reset to zero" (cuMemPoolSetAttribute):
  // from now on the highs count from the current figures.
  if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
    v->used_high.store(v->used.load(std::memory_order_relaxed), std::memory_order_relaxed);
    v->segments_used_high.store(v->segments.load(std::memory_order_relaxed), std::memory_order_relaxed);
  } else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
    v->reserved_high.store(p->stream_ordered_reserved(), std::memory_order_relaxed);
    v->segments_reserved_high.store(v->segments.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
}

}  // namespace cumemtrace::preload
