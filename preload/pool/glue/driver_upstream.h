// The caching pool's door to a real device (pool/upstream.h) inside
// libcumemtrace.so: the real driver's functions, called directly (never
// through our hooks, so the pool's own segments are not recorded as the
// program's allocations, and never through the runtime, so the runtime's
// last-error state is the program's alone: driver calls do not touch it).
//
// Every call runs in the device's primary context, retained once: the
// runtime allocates there, and the pool then works whatever context the
// calling thread has current (pushed and popped around the call when it is
// not current already). Retaining it also keeps the context, and so every
// pool segment, alive while a program releases its own references.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cumemtrace/pool/upstream.h"

namespace cumemtrace::preload {

// The device of the calling thread's current context; false when no context
// is current (or the driver is not loaded yet).
bool current_context_device(int* dev);

// The calling thread's current context (a CUcontext), null if none.
void* current_context();

// The per-thread default stream in the pool's stream handles: a value
// unique to the calling thread (the pool keys sub-pools by handle, and
// cudaStreamPerThread names a different stream on every thread). Odd, so it
// never equals a real stream handle (pointers) nor the legacy stream (0).
std::uintptr_t per_thread_stream_handle();

class DriverUpstream final : public pool::Upstream {
 public:
  // Null when the driver's functions are not all loaded or the primary
  // context of `dev` cannot be retained. `vmm`: offer virtual memory
  // (expandable segments) when the device supports it and a one-page probe
  // succeeds; vm_granularity() is 0 otherwise, and the pool uses ordinary
  // segments. `page_size`: the bytes of one physical handle (the pool's
  // page, PoolConfig::expandable_page_size), rounded up to a multiple of the
  // device's granularity; 0: the granularity.
  static std::unique_ptr<DriverUpstream> create(int dev, bool vmm, std::size_t page_size = 0);
  ~DriverUpstream() override;

  pool::UpstreamResult allocate(std::size_t size, pool::DevicePtr* ptr) override;
  pool::UpstreamResult release(pool::DevicePtr ptr, std::size_t size) override;
  pool::UpstreamResult memory_info(std::size_t* free_bytes, std::size_t* total_bytes) override;
  bool has_stream_ordered_segments() override;
  pool::UpstreamResult allocate_stream_ordered(std::size_t size, pool::StreamHandle stream,
                                               pool::DevicePtr* ptr) override;
  pool::UpstreamResult release_stream_ordered(pool::DevicePtr ptr, std::size_t size) override;
  pool::UpstreamResult synchronize() override;
  pool::UpstreamResult record_fence(pool::StreamHandle stream, pool::FenceHandle* fence) override;
  pool::FenceState query_fence(pool::FenceHandle fence) override;
  void destroy_fence(pool::FenceHandle fence) override;

  std::size_t vm_granularity() override { return granularity_; }
  pool::UpstreamResult reserve_range(std::size_t size, pool::DevicePtr* base) override;
  pool::UpstreamResult release_range(pool::DevicePtr base, std::size_t size) override;
  pool::UpstreamResult map(pool::DevicePtr addr, std::size_t size) override;
  pool::UpstreamResult unmap(pool::DevicePtr addr, std::size_t size) override;
  pool::UpstreamResult unmap_keep(pool::DevicePtr addr, std::size_t size) override;
  void drop_kept() override;
  std::size_t kept_bytes() override { return kept_.size() * granularity_; }
  bool supports_aliasing() override { return true; }
  pool::UpstreamResult alias_keep(pool::DevicePtr addr, std::size_t size) override;
  pool::UpstreamResult unmap_alias(pool::DevicePtr addr, std::size_t size) override;
  pool::UpstreamResult order_device(pool::FenceHandle* fence) override;

  // The driver call that made the calling thread's latest segment:
  // "cuMemAlloc_v2", "cuMemAllocAsync" or "cuMemMap" (the segment_alloc
  // event's `api`).
  static const char* last_segment_api();

  void* primary_context() const { return primary_; }

 private:
  DriverUpstream(int dev, int cu_device, void* primary) : dev_(dev), cu_device_(cu_device), primary_(primary) {}
  // cuMemUnmap page by page, then the page's memory: released, kept for the
  // next map(), or (an alias's old mapping) left to its new mapping.
  enum class Unmapped : std::uint8_t { release, keep, alias };
  pool::UpstreamResult unmap_pages(pool::DevicePtr addr, std::size_t size, Unmapped what);
  std::size_t usable_vm_granularity();  // in the primary context
  void find_peers();
  // An event for a fence: a destroyed fence's, or a new one.
  pool::UpstreamResult new_fence_event(void** event);

  const int dev_;
  const int cu_device_;  // the CUdevice
  void* const primary_;  // the retained CUcontext
  std::size_t granularity_ = 0;  // the page, one handle; 0: no expandable segments
  std::size_t alignment_ = 0;    // the device's granularity: reservations align to it
  // Devices (CUdevice) that may access this one's memory, mapped for them too.
  static constexpr int kMaxPeers = 31;
  int peers_[kMaxPeers] = {};
  int peer_count_ = 0;
  std::atomic<bool> refusal_reported_{false};
  // The physical memory (a CUmemGenericAllocationHandle) behind each mapped
  // page, held until the page is unmapped for good: a move unmaps a page
  // (unmap_keep) and maps the same memory elsewhere, with no cuMemRelease
  // and cuMemCreate between (issue 30). The pool makes one call at a time
  // per upstream (upstream.h), so these need no lock.
  std::unordered_map<pool::DevicePtr, unsigned long long> handles_;
  std::vector<unsigned long long> kept_;
  // Old mappings of pages an aliasing move took (alias_keep), until
  // unmap_alias; and those of their handles already released elsewhere
  // (dropped from kept_), released when their last mapping goes.
  std::unordered_map<pool::DevicePtr, unsigned long long> aliases_;
  std::vector<unsigned long long> release_at_unmap_;
  // Events of destroyed fences, recorded again for the next (cuEventCreate
  // and cuEventDestroy per fence cost more than a record).
  std::vector<void*> spare_events_;
};

}  // namespace cumemtrace::preload
