// The device as the pool's workload programs use it (seeds_transformer,
// varlen_workloads): every allocation goes through here, which keeps the
// live total and its peak, and counts failed allocations.
//
// Busy mode (--host-us N, issue 30): a training loop whose host runs ahead
// of a busy device, which is where a step's time is decided. Each
// allocation is an operation whose host part spins N µs and whose device
// part writes the buffer's first and last bytes on its stream (a memset
// that, like a kernel, takes SIMCUDA_ASYNC_LATENCY_US on the sim); each free
// is preceded by one more such touch, the buffer's last reader, so a pool
// that hands the memory out, or gives its pages back, before that work ran
// is caught (a reuse by data, an unmap by the sim's device fault). At the
// end of each step the program reads one value back (loss.item()) on the
// stream that computed it: the only wait for the device the program itself
// makes (a copy into pageable memory, which returns when it is done).
// Each step is marked in the trace ("step N", cumemtrace_mark) and timed,
// and, on the simulated device, what the host asked of the driver during
// the step is counted (simcuda_counters): one line per step, and a summary
// of the steady state (the steps after the first quarter).
#pragma once

#include <cuda_runtime_api.h>
#include <cumemtrace/cumemtrace.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "simcuda_counters.h"

namespace workload {

[[noreturn]] inline void fail(const char* program, const char* call, cudaError_t rc) {
  std::fprintf(stderr, "%s: %s failed: %s\n", program, call, cudaGetErrorString(rc));
  std::exit(2);
}

class Device {
 public:
  explicit Device(const char* program) : program_(program) {}
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Busy mode: `host_us` of host work per allocation, and device work as
  // described above. 0: plain allocations (what the memory tests replay).
  void set_busy(std::uint64_t host_us) {
    busy_ = true;
    host_us_ = host_us;
  }
  bool busy() const { return busy_; }
  // The stream whose result each step reads back (loss.item()); the legacy
  // stream unless set.
  void set_step_stream(cudaStream_t stream) { step_stream_ = stream; }

  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, bytes);
    return note(rc, "cudaMalloc", p, bytes, nullptr);
  }
  void* alloc_async(std::size_t bytes, cudaStream_t stream) {
    void* p = nullptr;
    const cudaError_t rc = cudaMallocAsync(&p, bytes, stream);
    return note(rc, "cudaMallocAsync", p, bytes, stream);
  }
  void free(void* p) {
    if (p == nullptr) return;
    forget(p, nullptr);
    check("cudaFree", cudaFree(p));
  }
  void free_async(void* p, cudaStream_t stream) {
    if (p == nullptr) return;
    forget(p, stream);
    check("cudaFreeAsync", cudaFreeAsync(p, stream));
  }
  // Frees what `held` holds, newest first, and empties it.
  void free_all(std::vector<void*>& held) {
    for (auto it = held.rbegin(); it != held.rend(); ++it) free(*it);
    held.clear();
  }
  void free_all_async(std::vector<void*>& held, cudaStream_t stream) {
    for (auto it = held.rbegin(); it != held.rend(); ++it) free_async(*it, stream);
    held.clear();
  }

  // A training step's bounds (busy mode: marked, timed, counted).
  void step_begin() {
    if (!busy_) return;
    const std::string name = "step " + std::to_string(steps_.size());
    cumemtrace_mark(name.c_str());
    // Looked up once the runtime has loaded the driver (its first call).
    if (steps_.empty()) counters_ = simcuda_counters_lookup();
    read_counters(&at_start_);
    start_ = std::chrono::steady_clock::now();
  }
  void step_end() {
    if (!busy_) return;
    // loss.item(): a value read back, after everything the step queued.
    // (Counted as the program's: its peak of live bytes is the trace's.)
    if (!loss_ && !(loss_ = alloc(64))) fail(program_, "cudaMalloc", cudaErrorMemoryAllocation);
    unsigned char host[4] = {};
    // Into pageable memory: done when the call returns, after the stream's
    // earlier work (CUDA Runtime API, "API synchronization behavior").
    check("cudaMemcpyAsync", cudaMemcpyAsync(host, loss_, sizeof host, cudaMemcpyDeviceToHost, step_stream_));
    Step s;
    s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    if (counters_) {
      SimcudaCounters now;
      read_counters(&now);
      s.counted = true;
      // The read-back is the program's own wait, not the pool's.
      s.waits = now.wait_calls - at_start_.wait_calls - 1;
      s.blocked_us = now.blocked_us - at_start_.blocked_us;
      s.creates = now.mem_create - at_start_.mem_create;
      s.releases = now.mem_release - at_start_.mem_release;
      s.maps = now.mem_map - at_start_.mem_map;
      s.unmaps = now.mem_unmap - at_start_.mem_unmap;
      s.set_access = now.mem_set_access - at_start_.mem_set_access;
      s.mallocs = now.mem_alloc - at_start_.mem_alloc;
      s.frees = now.mem_free - at_start_.mem_free;
      s.records = now.event_record - at_start_.event_record;
      s.stream_waits = now.stream_wait_event - at_start_.stream_wait_event;
      s.faults = now.device_faults - at_start_.device_faults;
    }
    steps_.push_back(s);
  }

  std::size_t peak() const { return peak_; }
  std::size_t failed() const { return failed_; }

  // Busy mode: a line per step, then the steady state's summary.
  void report() const {
    if (!busy_ || steps_.empty()) return;
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      std::printf("step %zu ms=%.3f", i, s.ms);
      if (s.counted)
        std::printf(" waits=%llu blocked_us=%llu create=%llu release=%llu map=%llu unmap=%llu set_access=%llu "
                    "malloc=%llu free=%llu record=%llu stream_wait=%llu faults=%llu",
                    s.waits, s.blocked_us, s.creates, s.releases, s.maps, s.unmaps, s.set_access, s.mallocs,
                    s.frees, s.records, s.stream_waits, s.faults);
      std::printf("\n");
    }
    const std::size_t warmup = std::max<std::size_t>(1, steps_.size() / 4);
    std::vector<double> ms;
    Step sum;
    for (std::size_t i = warmup; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      ms.push_back(s.ms);
      sum.waits += s.waits;
      sum.creates += s.creates;
      sum.releases += s.releases;
      sum.maps += s.maps;
      sum.unmaps += s.unmaps;
      sum.faults += s.faults;
    }
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return ms.empty() ? 0.0 : ms[static_cast<std::size_t>(q * double(ms.size() - 1))]; };
    std::printf("steady_state steps=%zu warmup=%zu median_ms=%.3f p90_ms=%.3f", ms.size(), warmup, at(0.5), at(0.9));
    if (steps_.front().counted)
      std::printf(" waits=%llu create=%llu release=%llu map=%llu unmap=%llu faults=%llu", sum.waits, sum.creates,
                  sum.releases, sum.maps, sum.unmaps, sum.faults);
    std::printf("\n");
  }

 private:
  struct Step {
    double ms = 0;
    bool counted = false;
    unsigned long long waits = 0, blocked_us = 0, creates = 0, releases = 0, maps = 0, unmaps = 0, set_access = 0,
                       mallocs = 0, frees = 0, records = 0, stream_waits = 0, faults = 0;
  };

  void read_counters(SimcudaCounters* c) const {
    c->size = sizeof *c;
    if (counters_) counters_(c);
  }

  void check(const char* call, cudaError_t rc) const {
    if (rc != cudaSuccess) fail(program_, call, rc);
  }

  void spin(std::uint64_t us) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    while (std::chrono::steady_clock::now() < until) {
    }
  }

  // The buffer's first and last bytes, in one operation on `stream` (a
  // 2-row memset whose pitch spans the buffer).
  void touch(void* p, std::size_t bytes, cudaStream_t stream) const {
    constexpr std::size_t kEdge = 64;
    if (bytes < 2 * kEdge) {
      check("cudaMemsetAsync", cudaMemsetAsync(p, 0, bytes, stream));
      return;
    }
    check("cudaMemset2DAsync", cudaMemset2DAsync(p, bytes - kEdge, 0, kEdge, 2, stream));
  }

  void* note(cudaError_t rc, const char* call, void* p, std::size_t bytes, cudaStream_t stream) {
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // the failure is counted, not left for the next check
      ++failed_;
      return nullptr;
    }
    if (rc != cudaSuccess) fail(program_, call, rc);
    sizes_.emplace(p, bytes);
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    if (busy_) {
      spin(host_us_);
      touch(p, bytes, stream);
    }
    return p;
  }

  void forget(void* p, cudaStream_t stream) {
    const auto it = sizes_.find(p);
    if (it == sizes_.end()) {
      std::fprintf(stderr, "%s: freeing %p, which is not live\n", program_, p);
      std::exit(2);
    }
    if (busy_) touch(p, it->second, stream);  // its last reader
    live_ -= it->second;
    sizes_.erase(it);
  }

  const char* const program_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::size_t live_ = 0;
  std::size_t peak_ = 0;
  std::size_t failed_ = 0;
  bool busy_ = false;
  std::uint64_t host_us_ = 0;
  simcuda_counters_fn counters_ = nullptr;
  SimcudaCounters at_start_{};
  std::chrono::steady_clock::time_point start_;
  void* loss_ = nullptr;
  cudaStream_t step_stream_ = nullptr;
  std::vector<Step> steps_;
};

// One training step, as a scope: begun at its construction, ended at its
// destruction.
class Step {
 public:
  explicit Step(Device& device) : device_(device) { device_.step_begin(); }
  ~Step() { device_.step_end(); }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

 private:
  Device& device_;
};

}  // namespace workload
