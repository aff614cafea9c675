// DevicePool: cudaDeviceReset / cuDevicePrimaryCtxReset. What the reset
// destroyed leaves the pool's records; what survives it (stream-ordered
// memory, cuMemCreate'd pages of a stream's range) stays.
#include "device_pool_impl.h"

#include <algorithm>
#include <vector>

namespace cumemtrace::pool {

void DevicePool::Impl::device_reset() {
  std::lock_guard slow(slow_mu_);
  std::lock_guard streams(streams_mu_);
  {
    // The reset ended the work the orderings waited for and destroyed their
    // events: dropped, not destroyed, and no memory is busy any more.
    std::lock_guard lock(upstream_mu_);
    orderings_.clear();
  }
  device_synchronized(sync_begun_.fetch_add(1) + 1);
  for_each_sub_pool([&](SubPool& sp) {
    std::lock_guard lock(sp.mu);
    // Nothing is left to wait for: the reset tore down the device work that
    // pending frees waited for, and destroyed the events of their fences
    // (so they are dropped, not destroyed).
    detail::reclaim_synced(sp, ~std::uint64_t{0});
    for (Block* b : sp.fenced) {
      sp.pending_bytes[b->segment->kind] -= b->size;
      sp.pending.sub(b->size);
      detail::make_free(sp, b, 0);
    }
    sp.fenced.clear();
    UpstreamResult ignored;
    for (Segment* seg = sp.segments; seg;) {
      Segment* next = seg->next_in_pool;
      // (An expandable range never grown holds nothing; it stays for reuse.)
      if (seg->first && !survives_reset(sp, seg)) {
        // The application's blocks here died with the reset (cudaMalloc
        // memory): out of the live table, then the whole segment goes.
        std::vector<Block*> live;
        for (Block* b = seg->first; b; b = b->next)
          if (b->state == detail::BlockState::allocated) live.push_back(b);
        for (Block* b : live) {
          detail::unaccount_live(sp, b);
          detail::make_free(sp, b, 0);
        }
        // Ordinary segments were freed by the reset itself; an expandable
        // range was not, so the pool unmaps and returns it.
        release_segment(sp, seg, &ignored, /*freed_by_reset=*/!seg->expandable);
      } else if (sp.stream_ordered) {
        // Surviving stream memory: device-wide blocks borrowed into it by
        // the ladder were cudaMalloc's, which the reset destroyed.
        std::vector<Block*> borrowed;
        for (Block* b = seg->first; b; b = b->next)
          if (b->state == detail::BlockState::allocated && !b->stream_ordered) borrowed.push_back(b);
        for (Block* b : borrowed) {
          detail::unaccount_live(sp, b);
          detail::make_free(sp, b, 0);
        }
      }
      seg = next;
    }
    if (!sp.stream_ordered) return;
    // Every stream of the context was destroyed: what survives in a stream's
    // sub-pool is freed in no stream's order any more (stream_destroyed).
    if (!sp.orphan) {
      sp.orphan = true;
      orphans_.push_back(&sp);
    }
    release_free(sp, kUnlimited, &ignored, Release::wait);
    if (sp.expandable && detail::segment_is_free(sp.expandable)) release_expandable(sp, sp.expandable, &ignored);
  });
  streams_.clear();
  stream_generation_.fetch_add(1, std::memory_order_acq_rel);
  peak_reserved_.store(reserved_total_.load());
}

}  // namespace cumemtrace::pool
