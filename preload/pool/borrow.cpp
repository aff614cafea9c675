// DevicePool: memory cached in one sub-pool serving a request of another,
// in device order. Each stream's stream-ordered calls (and the device-wide
// calls) have a sub-pool of their own, so that a block freed in a stream's
// order is reusable at once on that stream (PyTorch's allocator keeps such
// per-stream pools for the same reason). Across sub-pools the tight policy
// used to move pages: unmapped in one range, mapped in the other (on
// varlen_workloads two_streams, about 25 pages a step each way between the
// compute and the data stream's ranges, under the h100 cost table). An
// ordering of the device (Upstream::order_device) makes any free memory
// safe for any stream without waiting: whatever uses it next runs after
// whatever used it before. So before a range grows or takes pages from
// elsewhere, a free stretch already mapped in another sub-pool's range is
// taken where it lies; the block stays that sub-pool's (its free in another
// stream's order then waits for its fence, as the ladder's borrowed blocks
// do).
#include "device_pool_impl.h"

#include <algorithm>

namespace cumemtrace::pool {

namespace {

// The highest busy stamp of the pages under [addr, addr+size).
std::uint64_t busiest(const Segment* seg, DevicePtr addr, std::size_t size) {
  const std::size_t g = seg->page_size;
  std::uint64_t stamp = 0;
  for (std::size_t p = (addr - seg->base()) / g, end = (addr + size - seg->base() + g - 1) / g; p < end; ++p)
    stamp = std::max(stamp, seg->page_busy[p]);
  return stamp;
}

}  // namespace

Allocation DevicePool::Impl::borrow_in_order(SubPool& sp, PoolKind kind, std::size_t rounded, std::size_t size,
                                             bool stream_ordered) {
  if (config_.segment_policy != SegmentPolicy::tight || !expandable_for(kind)) return {};
  Allocation out;
  for_each_sub_pool([&](SubPool& other) {
    // A stream's request takes only another stream's memory: a device reset
    // spares stream-ordered memory, and would not spare it in a device-wide
    // range (device_pool.h); a device-wide request may take any (finish()
    // marks it as one a reset destroys). A destroyed stream's sub-pool is
    // on its way back to the driver.
    // (stream_ordered is fixed when a sub-pool is made; the rest is read
    // under its lock, only tried: the caller holds sp's.)
    if (out.ptr || &other == &sp || (stream_ordered && !other.stream_ordered)) return;
    std::unique_lock lock(other.mu, std::try_to_lock);
    if (!lock || !other.expandable || other.orphan) return;
    reclaim(other);
    DevicePtr at = 0;
    Block* b = find_mapped_stretch(other, kind, rounded, &at);
    if (!b) return;
    // Freed in its own stream's order a moment ago, its last use may still
    // be queued on that stream: an ordering begun after the free puts this
    // request's work behind it.
    if (busiest(b->segment, at, rounded) > reuse_done_.load(std::memory_order_acquire) && !order_device().ok())
      return;
    out = finish(other, detail::split_free(other, b, at), rounded, size, stream_ordered);
  });
  return out;
}

}  // namespace cumemtrace::pool
