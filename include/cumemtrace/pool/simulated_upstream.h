// An Upstream without a device, for replaying traces (`cumemtrace replay`,
// the pool's tuning harness) and for tests: a capacity in bytes (unlimited by
// default), addresses handed out from a large fake address space, virtual
// memory with a 2 MiB granularity, and no device work (synchronise is a
// no-op, every fence and ordering is complete). Not thread-safe beyond what the pool
// guarantees (it serialises calls that change memory per device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "cumemtrace/pool/pool_config.h"
#include "cumemtrace/pool/upstream.h"

namespace cumemtrace::pool {

class SimulatedUpstream : public Upstream {
 public:
  // cudaErrorMemoryAllocation's value, so replayed failures look real.
  static constexpr int kOutOfMemoryCode = 2;
  static constexpr std::size_t kGranularity = std::size_t{2} << 20;

  // `capacity`: device bytes (kUnlimited: never out of memory). `vm`: whether
  // reserve_range/map are offered (expandable segments); `page_size`: their
  // page (PoolConfig::expandable_page_size, rounded up to kGranularity; 0:
  // kGranularity).
  explicit SimulatedUpstream(std::size_t capacity = kUnlimited, bool vm = true, std::size_t page_size = 0);

  UpstreamResult allocate(std::size_t size, DevicePtr* ptr) override;
  UpstreamResult release(DevicePtr ptr, std::size_t size) override;
  UpstreamResult memory_info(std::size_t* free_bytes, std::size_t* total_bytes) override;
  UpstreamResult synchronize() override;
  UpstreamResult record_fence(StreamHandle stream, FenceHandle* fence) override;
  FenceState query_fence(FenceHandle fence) override;
  void destroy_fence(FenceHandle fence) override;
  std::size_t vm_granularity() override;
  UpstreamResult reserve_range(std::size_t size, DevicePtr* base) override;
  UpstreamResult release_range(DevicePtr base, std::size_t size) override;
  UpstreamResult map(DevicePtr addr, std::size_t size) override;
  UpstreamResult unmap(DevicePtr addr, std::size_t size) override;
  UpstreamResult unmap_keep(DevicePtr addr, std::size_t size) override;
  void drop_kept() override;
  std::size_t kept_bytes() override { return kept_; }
  // Every fence is complete here, so an ordering is too.
  UpstreamResult order_device(FenceHandle* fence) override;

  std::size_t capacity() const { return capacity_; }
  void set_capacity(std::size_t capacity) { capacity_ = capacity; }
  std::size_t used() const { return used_; }            // bytes allocated or mapped
  std::size_t peak_used() const { return peak_used_; }
  std::uint64_t allocate_calls() const { return allocate_calls_; }  // allocate + map
  std::uint64_t release_calls() const { return release_calls_; }    // release + unmap
  std::uint64_t synchronize_calls() const { return synchronize_calls_; }
  std::uint64_t order_calls() const { return order_calls_; }
  // Bytes mapped and unmapped, and how much of the mapped memory a move
  // brought from elsewhere (unmap_keep, then map) rather than new.
  std::size_t mapped_bytes() const { return mapped_bytes_; }
  std::size_t unmapped_bytes() const { return unmapped_bytes_; }
  std::size_t moved_bytes() const { return moved_bytes_; }

 private:
  bool take(std::size_t size);
  DevicePtr carve(std::size_t size);
  void give_back_addresses(DevicePtr base, std::size_t size);

  std::size_t capacity_;
  bool vm_;
  std::size_t page_size_;
  std::size_t used_ = 0;
  std::size_t peak_used_ = 0;
  std::uint64_t allocate_calls_ = 0;
  std::uint64_t release_calls_ = 0;
  std::uint64_t synchronize_calls_ = 0;
  std::uint64_t order_calls_ = 0;
  std::size_t kept_ = 0;
  std::size_t mapped_bytes_ = 0, unmapped_bytes_ = 0, moved_bytes_ = 0;
  std::uint64_t next_fence_ = 1;
  // Free address ranges (base → size), coalesced; first fit.
  std::map<DevicePtr, std::size_t> free_addresses_;
};

}  // namespace cumemtrace::pool
