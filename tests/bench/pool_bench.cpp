// Google Benchmark of the caching pool on a simulated device (no device
// work, so the figures are the pool's own cost):
// - a cache-hit alloc+free pair, stream-ordered (cudaMallocAsync/FreeAsync)
//   and device-wide (cudaMalloc/cudaFree, whose frees wait for a batched
//   synchronisation), on 1 and 8 threads. Times are wall-clock (UseRealTime):
//   with 8 threads Google Benchmark divides the wall time by the pairs of all
//   threads, so `Time` is the wall time per pair of the whole process (the
//   inverse of its throughput); the label says how many CPUs the threads had,
//   so 8 threads on a 2-CPU machine are not read as 8-way scaling;
// - the miss path: a request that needs a new segment from the upstream.
#include <benchmark/benchmark.h>

#include <sched.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cumemtrace/pool/device_pool.h"
#include "cumemtrace/pool/simulated_upstream.h"

using namespace cumemtrace::pool;

namespace {

// Irregular small sizes (512 B – 100 KB), like a framework's tensors.
constexpr std::array<std::size_t, 8> kSizes = {512, 4000, 1 << 16, 100'000, 2048, 777, 30'000, 8192};

// One pool shared by all threads of a benchmark, as in a process.
DevicePool& shared_pool() {
  static SimulatedUpstream upstream;
  static DevicePool pool(upstream, PoolConfig{});
  return pool;
}

// "8 threads on 2 CPUs": the CPUs this process may run on (taskset), of
// those online.
void label_threads(benchmark::State& state) {
  if (state.thread_index() != 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  const unsigned online = std::thread::hardware_concurrency();
  std::string label = std::to_string(state.threads()) + (state.threads() == 1 ? " thread" : " threads") +
                      " on " + std::to_string(usable) + " of " + std::to_string(online) + " CPUs";
  if (state.threads() > 1) label += "; Time = wall time per pair, all threads together";
  state.SetLabel(label);
}

void BM_HitPairStreamOrdered(benchmark::State& state) {
  DevicePool& pool = shared_pool();
  const StreamHandle stream = 0x1000 + static_cast<StreamHandle>(state.thread_index());
  std::size_t i = 0;
  for (auto _ : state) {
    const Allocation a = pool.allocate_async(kSizes[i++ % kSizes.size()], stream);
    benchmark::DoNotOptimize(a.ptr);
    pool.free_async(a.ptr, stream);
  }
  state.SetItemsProcessed(state.iterations());
  label_threads(state);
}

void BM_HitPairDeviceWide(benchmark::State& state) {
  DevicePool& pool = shared_pool();
  std::size_t i = 0;
  for (auto _ : state) {
    const Allocation a = pool.allocate(kSizes[i++ % kSizes.size()]);
    benchmark::DoNotOptimize(a.ptr);
    pool.free(a.ptr);
  }
  state.SetItemsProcessed(state.iterations());
  label_threads(state);
}

// Every request needs a fresh segment: grow, split, later release. The pool
// is trimmed outside the timed region.
void BM_MissPath(benchmark::State& state) {
  SimulatedUpstream upstream;
  DevicePool pool(upstream, PoolConfig{});
  constexpr StreamHandle stream = 0x42;
  for (auto _ : state) {
    const Allocation a = pool.allocate_async(24 << 20, stream);
    benchmark::DoNotOptimize(a.ptr);
    pool.free_async(a.ptr, stream);
    state.PauseTiming();
    pool.release_cached();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations());
}

// A steady mix of live blocks (a working set of 256) with random-order frees:
// the hit path with real tree work (splits and merges that move in the index).
void BM_WorkingSetChurn(benchmark::State& state) {
  SimulatedUpstream upstream;
  DevicePool pool(upstream, PoolConfig{});
  constexpr StreamHandle stream = 0x43;
  std::array<DevicePtr, 256> live{};
  std::uint64_t x = 88172645463325252ull;
  for (auto& p : live) p = pool.allocate_async(kSizes[x++ % kSizes.size()], stream).ptr;
  for (auto _ : state) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: which slot to replace
    DevicePtr& slot = live[x % live.size()];
    pool.free_async(slot, stream);
    slot = pool.allocate_async(kSizes[(x >> 8) % kSizes.size()] + (x >> 20) % 4096, stream).ptr;
    benchmark::DoNotOptimize(slot);
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_HitPairStreamOrdered)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK(BM_HitPairDeviceWide)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK(BM_MissPath);
BENCHMARK(BM_WorkingSetChurn);

BENCHMARK_MAIN();
