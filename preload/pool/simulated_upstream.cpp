// A device without a device: capacity accounting and fake addresses.
#include "cumemtrace/pool/simulated_upstream.h"

#include <algorithm>

namespace cumemtrace::pool {
namespace {
// Fake device addresses start high and 2 MiB-aligned, like the driver's,
// and never include 0 (a null pointer means "no allocation").
constexpr DevicePtr kAddressBase = DevicePtr{0x7f0000000000};
constexpr std::size_t kAddressSpace = std::size_t{1} << 46;  // 64 TiB
}  // namespace

SimulatedUpstream::SimulatedUpstream(std::size_t capacity, bool vm, std::size_t page_size)
    : capacity_(capacity),
      vm_(vm),
      page_size_(std::max(kGranularity, (page_size + kGranularity - 1) / kGranularity * kGranularity)) {
  free_addresses_.emplace(kAddressBase, kAddressSpace);
}

bool SimulatedUpstream::take(std::size_t size) {
  if (capacity_ != kUnlimited && (size > capacity_ || used_ > capacity_ - size)) return false;
  used_ += size;
  peak_used_ = std::max(peak_used_, used_);
  ++allocate_calls_;
  return true;
}

// First fit over free address ranges, every range kept 2 MiB-aligned like
// the driver's large allocations.
DevicePtr SimulatedUpstream::carve(std::size_t size) {
  size = (size + kGranularity - 1) / kGranularity * kGranularity;
  for (auto it = free_addresses_.begin(); it != free_addresses_.end(); ++it) {
    if (it->second < size) continue;
    const DevicePtr base = it->first;
    const std::size_t rest = it->second - size;
    free_addresses_.erase(it);
    if (rest) free_addresses_.emplace(base + size, rest);
    return base;
  }
  return 0;
}

void SimulatedUpstream::give_back_addresses(DevicePtr base, std::size_t size) {
  size = (size + kGranularity - 1) / kGranularity * kGranularity;
  auto next = free_addresses_.lower_bound(base);
  if (next != free_addresses_.end() && base + size == next->first) {
    size += next->second;
    next = free_addresses_.erase(next);
  }
  if (next != free_addresses_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == base) {
      prev->second += size;
      return;
    }
  }
  free_addresses_.emplace(base, size);
}

UpstreamResult SimulatedUpstream::allocate(std::size_t size, DevicePtr* ptr) {
  if (size == 0 || !take(size)) return UpstreamResult::out_of_memory(kOutOfMemoryCode);
  *ptr = carve(size);
  if (*ptr == 0) {  // the fake address space is exhausted: treat as full
    used_ -= size;
    --allocate_calls_;
    return UpstreamResult::out_of_memory(kOutOfMemoryCode);
  }
  return UpstreamResult::success();
}

UpstreamResult SimulatedUpstream::release(DevicePtr ptr, std::size_t size) {
  used_ -= std::min(used_, size);
  ++release_calls_;
  give_back_addresses(ptr, size);
  return UpstreamResult::success();
}

UpstreamResult SimulatedUpstream::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  *total_bytes = capacity_;
  *free_bytes = capacity_ == kUnlimited ? kUnlimited : capacity_ - used_;
  return UpstreamResult::success();
}

UpstreamResult SimulatedUpstream::synchronize() {
  ++synchronize_calls_;
  return UpstreamResult::success();
}

UpstreamResult SimulatedUpstream::record_fence(StreamHandle, FenceHandle* fence) {
  *fence = next_fence_++;
  return UpstreamResult::success();
}

FenceState SimulatedUpstream::query_fence(FenceHandle) { return FenceState::complete; }
void SimulatedUpstream::destroy_fence(FenceHandle) {}

std::size_t SimulatedUpstream::vm_granularity() { return vm_ ? page_size_ : 0; }

UpstreamResult SimulatedUpstream::reserve_range(std::size_t size, DevicePtr* base) {
  if (!vm_) return UpstreamResult::failure(1);
  *base = carve(size);
  return *base ? UpstreamResult::success() : UpstreamResult::out_of_memory(kOutOfMemoryCode);
}

UpstreamResult SimulatedUpstream::release_range(DevicePtr base, std::size_t size) {
  if (!vm_) return UpstreamResult::failure(1);
  give_back_addresses(base, size);
  return UpstreamResult::success();
}

UpstreamResult SimulatedUpstream::map(DevicePtr, std::size_t size) {
  if (!vm_) return UpstreamResult::failure(1);
  // Memory a move kept serves first (it is counted as used already).
  const std::size_t reused = std::min(kept_, size);
  if (reused < size && !take(size - reused)) return UpstreamResult::out_of_memory(kOutOfMemoryCode);
  if (reused == size) ++allocate_calls_;
  kept_ -= reused;
  moved_bytes_ += reused;
  mapped_bytes_ += size;
  return UpstreamResult::success();
}

UpstreamResult SimulatedUpstream::unmap(DevicePtr, std::size_t size) {
  if (!vm_) return UpstreamResult::failure(1);
  used_ -= std::min(used_, size);
  ++release_calls_;
  unmapped_bytes_ += size;
  return UpstreamResult::success();
}

UpstreamResult SimulatedUpstream::unmap_keep(DevicePtr, std::size_t size) {
  if (!vm_) return UpstreamResult::failure(1);
  kept_ += size;
  ++release_calls_;
  unmapped_bytes_ += size;
  return UpstreamResult::success();
}

void SimulatedUpstream::drop_kept() {
  used_ -= std::min(used_, kept_);
  kept_ = 0;
}

UpstreamResult SimulatedUpstream::order_device(FenceHandle* fence) {
  ++order_calls_;
  *fence = next_fence_++;
  return UpstreamResult::success();
}

}  // namespace cumemtrace::pool
