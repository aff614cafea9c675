#include "pool/glue/pool_glue.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <array>
#include <atomic>
#include <memory>

#include "options/config.h"
#include "hooks/hook_support.h"
#include "pool/glue/driver_upstream.h"

namespace cumemtrace::preload {
namespace {

using pool::DevicePool;
using pool::DevicePtr;

// Writes the pool's segment changes to the trace. A device reset's drops
// come through here too: DevicePool::device_reset reports each segment the
// reset freed (and nothing for what survives it).
class SegmentObserver final : public pool::PoolObserver {
 public:
  void on_segment_alloc(int dev, DevicePtr ptr, std::size_t size) override {
    try {
      recorder().on_segment_alloc(dev, ptr, size, DriverUpstream::last_segment_api());
    } catch (...) {  // out of host memory: the trace loses the event
    }
  }

  void on_segment_free(int dev, DevicePtr ptr, std::size_t size) override {
    try {
      recorder().on_segment_free(dev, ptr, size);
    } catch (...) {
    }
  }
};

struct DeviceSlot {
  DeviceSlot(int dev, std::unique_ptr<DriverUpstream> up, const pool::PoolConfig& config)
      : upstream(std::move(up)), pool(*upstream, config, dev, &observer) {}
  std::unique_ptr<DriverUpstream> upstream;
  SegmentObserver observer;
  DevicePool pool;
  std::atomic<std::uint64_t> next_sample_ns{0};
  std::atomic<bool> sampling{false};  // a thread is writing this device's sample
};

constexpr int kMaxDevices = Recorder::kMaxDevices;

// Made once and never destroyed, like the recorder: hooks run during exit.
// After fork the child starts from empty slots (the parent's pools describe
// the parent's device memory, which a child cannot use).
std::array<std::atomic<DeviceSlot*>, kMaxDevices> g_slots{};
std::array<std::atomic<bool>, kMaxDevices> g_unavailable{};
std::atomic<int> g_slot_count{0};  // highest device index made + 1
std::atomic<bool> g_creating{false};  // a spin lock: resettable in a fork child

std::uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC_COARSE is CLOCK_MONOTONIC as of the last tick: a plain
// load from the vDSO page, a few ns, so every allocation can ask it whether
// a sample may be due; only then is the precise clock read, so samples are
// exactly "at most every CUMEMTRACE_POOL_SAMPLE_MS".
std::uint64_t coarse_resolution_ns() {
  static const std::uint64_t resolution = [] {
    timespec res{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    return static_cast<std::uint64_t>(res.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(res.tv_nsec);
  }();
  return resolution;
}

void write_final_samples() {
  const int n = g_slot_count.load(std::memory_order_acquire);
  for (int dev = 0; dev < n; ++dev) {
    if (DeviceSlot* slot = g_slots[dev].load(std::memory_order_acquire)) {
      recorder().on_pool_sample(dev, slot->pool.stats());
    }
  }
}

DeviceSlot* make_slot(int dev) {
  while (g_creating.exchange(true, std::memory_order_acquire)) sched_yield();
  DeviceSlot* slot = g_slots[dev].load(std::memory_order_acquire);
  if (!slot && !g_unavailable[dev].load(std::memory_order_relaxed)) {
    try {
      const contract::Config& c = contract::config();
      if (auto up = DriverUpstream::create(dev, c.pool_config.expandable_segments,
                                             c.pool_config.expandable_page_size)) {
        slot = new DeviceSlot(dev, std::move(up), c.pool_config);
        recorder().set_before_end(&write_final_samples);
        g_slots[dev].store(slot, std::memory_order_release);
        int n = g_slot_count.load(std::memory_order_relaxed);
        while (n < dev + 1 && !g_slot_count.compare_exchange_weak(n, dev + 1)) {
        }
      } else {
        g_unavailable[dev].store(true, std::memory_order_relaxed);
      }
    } catch (...) {
      g_unavailable[dev].store(true, std::memory_order_relaxed);
    }
  }
  g_creating.store(false, std::memory_order_release);
  return slot;
}

DeviceSlot* slot_of(int dev) {
  if (dev < 0 || dev >= kMaxDevices) return nullptr;
  if (DeviceSlot* slot = g_slots[dev].load(std::memory_order_acquire)) return slot;
  if (g_unavailable[dev].load(std::memory_order_relaxed)) return nullptr;
  return make_slot(dev);
}

void forget_pools_in_child() {
  // Leaked, not destroyed: their locks may be held by parent threads that do
  // not exist here.
  for (auto& slot : g_slots) slot.store(nullptr, std::memory_order_relaxed);
  for (auto& flag : g_unavailable) flag.store(false, std::memory_order_relaxed);
  g_slot_count.store(0, std::memory_order_relaxed);
  g_creating.store(false, std::memory_order_relaxed);
}

__attribute__((constructor)) void register_pool_fork_handler() {
  pthread_atfork(nullptr, nullptr, &forget_pools_in_child);
}

}  // namespace

DevicePool* current_device_pool(int* dev) {
  if (!current_context_device(dev)) return nullptr;
  DeviceSlot* slot = slot_of(*dev);
  return slot ? &slot->pool : nullptr;
}

DevicePool* pool_of_device(int dev) {
  DeviceSlot* slot = dev >= 0 && dev < kMaxDevices ? g_slots[dev].load(std::memory_order_acquire) : nullptr;
  return slot ? &slot->pool : nullptr;
}

DevicePool* pool_owning(std::uintptr_t ptr, int* dev) {
  const int n = g_slot_count.load(std::memory_order_acquire);
  for (int d = 0; d < n; ++d) {
    DeviceSlot* slot = g_slots[d].load(std::memory_order_acquire);
    if (slot && slot->pool.owns(ptr)) {
      *dev = d;
      return &slot->pool;
    }
  }
  return nullptr;
}

DevicePool* pool_of_context(void* ctx) {
  if (!ctx) ctx = current_context();
  if (!ctx) return nullptr;
  const int n = g_slot_count.load(std::memory_order_acquire);
  for (int d = 0; d < n; ++d) {
    DeviceSlot* slot = g_slots[d].load(std::memory_order_acquire);
    if (slot && slot->upstream->primary_context() == ctx) return &slot->pool;
  }
  return nullptr;
}

bool pool_driver_memory_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes) {
  DeviceSlot* slot = dev >= 0 && dev < kMaxDevices ? g_slots[dev].load(std::memory_order_acquire) : nullptr;
  return slot && slot->upstream->memory_info(free_bytes, total_bytes).ok();
}

void for_each_pool(void (*fn)(DevicePool&, void*), void* arg) {
  const int n = g_slot_count.load(std::memory_order_acquire);
  for (int d = 0; d < n; ++d) {
    if (DeviceSlot* slot = g_slots[d].load(std::memory_order_acquire)) fn(slot->pool, arg);
  }
}

void sample_pool_if_due(int dev) {
  DeviceSlot* slot = dev >= 0 && dev < kMaxDevices ? g_slots[dev].load(std::memory_order_acquire) : nullptr;
  if (!slot) return;
  const std::uint64_t due = slot->next_sample_ns.load(std::memory_order_relaxed);
  if (now_ns(CLOCK_MONOTONIC_COARSE) + coarse_resolution_ns() < due) return;
  if (now_ns(CLOCK_MONOTONIC) < due) return;
  // One thread writes the sample; the others go on. The flag is held until
  // the line is written and the next due time is set from after it: a
  // thread preempted between deciding and writing can then never put its
  // line less than the interval after another one's.
  if (slot->sampling.exchange(true, std::memory_order_acquire)) return;
  if (now_ns(CLOCK_MONOTONIC) >= slot->next_sample_ns.load(std::memory_order_relaxed)) {
    recorder().on_pool_sample(dev, slot->pool.stats());
    // The line's `t` (trace_writer: CLOCK_MONOTONIC) was read before this.
    const std::uint64_t interval = static_cast<std::uint64_t>(contract::config().pool_sample_ms) * 1'000'000ull;
    slot->next_sample_ns.store(now_ns(CLOCK_MONOTONIC) + interval, std::memory_order_relaxed);
  }
  slot->sampling.store(false, std::memory_order_release);
}

void pool_device_reset(int dev) {
  DeviceSlot* slot = dev >= 0 && dev < kMaxDevices ? g_slots[dev].load(std::memory_order_acquire) : nullptr;
  if (!slot) return;
  slot->pool.device_reset();
}

std::uintptr_t pool_stream(std::uintptr_t recorded) {
  if (recorded == kPerThreadStream) return per_thread_stream_handle();
  constexpr std::uintptr_t kLegacyStream = 0x1;  // cudaStreamLegacy, CU_STREAM_LEGACY
  return recorded == kLegacyStream ? 0 : recorded;
}

}  // namespace cumemtrace::preload
