// DevicePool: the out-of-memory ladder (DESIGN.md, "Out-of-memory ladder"):
// what the pool does when neither its cache nor the upstream can serve a
// request: release whole free segments everywhere, synchronise and release
// everything cached, borrow from another sub-pool, and finally explain the
// failure (OomReport: fragmentation or capacity). Also PyTorch's
// garbage_collection_threshold, which releases before the pool grows.
#include "device_pool_impl.h"

#include <algorithm>
#include <vector>

namespace cumemtrace::pool {

// PyTorch's garbage_collection_threshold: above the fraction of the device,
// cached free segments of this sub-pool go back before the pool grows, so a
// long-running job's cache does not starve other processes on the device.
void DevicePool::Impl::garbage_collect(SubPool& sp, std::size_t needed) {
  if (config_.garbage_collection_threshold <= 0.0) return;
  const std::size_t total = device_total();
  if (total == 0 || total == kUnlimited) return;
  const auto limit = static_cast<std::size_t>(config_.garbage_collection_threshold * static_cast<double>(total));
  const std::size_t after = saturating_add(reserved_total_.load(std::memory_order_relaxed), needed);
  if (after <= limit) return;
  UpstreamResult ignored;
  release_free(sp, after - limit, &ignored, Release::wait);
}

Allocation DevicePool::Impl::out_of_memory_ladder(SubPool& sp, PoolKind kind, std::size_t size,
                                                  std::size_t rounded, bool stream_ordered,
                                                  StreamHandle stream, UpstreamResult error) {
  // One thread at a time walks the ladder: the steps below lock every
  // sub-pool in turn, and two threads releasing at once would only race
  // each other for the same memory.
  std::lock_guard slow(slow_mu_);
  // More than the whole device: no step below could help, so the cache is
  // left alone. Releasing it would change nothing a program can see but
  // the time it takes, which a program that probes for the largest buffer
  // it can get pays on every probe (tests/apps/oom_storm: every round).
  const std::size_t total = device_total();
  for (int step = 0; step < 2 && !(total != 0 && rounded > total); ++step) {
    // Step 1: whole free segments everywhere go back (the upstream's release
    // waits for the device). Step 2: synchronise first, so every pending
    // free becomes free, then release everything cached.
    if (step == 1) synchronize_device();
    release_everywhere();
    std::lock_guard lock(sp.mu);
    reclaim(sp);
    error = UpstreamResult::success();
    Block* f = fit(sp, kind, rounded, &error);
    if (!f && error.ok()) f = grow(sp, kind, rounded, &error);
    if (f) return finish(sp, f, rounded, size, stream_ordered);
    if (error.status != UpstreamStatus::out_of_memory) return Allocation{0, 0, error, {}};
  }
  if (Allocation borrowed = borrow_from_other_sub_pools(sp, kind, size, rounded, stream_ordered); borrowed.ptr) {
    return borrowed;
  }
  Allocation failed{0, 0, error, make_report(size, rounded, stream_ordered, stream, error)};
  ooms_.fetch_add(1, std::memory_order_relaxed);
  if (observer_) observer_->on_oom(*failed.oom);
  return failed;
}

// The ladder's last step: a free block in another sub-pool, in a segment
// that still holds live blocks (so no step above could give its memory
// back). Without it a program with many streams or threads runs out of
// memory while much of its device sits cached in sub-pools it cannot use,
// where the driver takes from the whole device: the soak test
// (tests/apps/soak.cpp, 16 threads with their per-thread streams on a
// 512 MiB device) failed a 1 MiB cudaMallocAsync with 300 MiB cached free,
// which the bare program never did. The block is taken under its sub-pool's
// lock after a device synchronisation, so the work done with it before its
// free has finished; it stays that sub-pool's block (a stream's free of it
// is then a free in another stream's order there, reusable once its fence
// completes). A device-wide request may take from any sub-pool (a reset
// destroys its block wherever it lies: finish(), device_reset()); a
// stream's only from another stream's, since a reset spares stream-ordered
// memory and would not spare it in a device-wide segment.
Allocation DevicePool::Impl::borrow_from_other_sub_pools(const SubPool& sp, PoolKind kind, std::size_t size,
                                                         std::size_t rounded, bool stream_ordered) {
  Allocation borrowed;
  for_each_sub_pool([&](SubPool& other) {
    if (borrowed.ptr != 0 || &other == &sp || (stream_ordered && !other.stream_ordered)) return;
    std::lock_guard lock(other.mu);
    reclaim(other);
    UpstreamResult error;
    Block* f = fit(other, kind, rounded, &error);
    if (f && synchronize_device().ok()) borrowed = finish(other, f, rounded, size, stream_ordered);
  });
  return borrowed;
}

void DevicePool::Impl::release_everywhere() {
  for_each_sub_pool([this](SubPool& other) {
    std::lock_guard lock(other.mu);
    reclaim(other);
    UpstreamResult ignored;
    release_free(other, kUnlimited, &ignored, Release::wait);
  });
}

UpstreamResult DevicePool::Impl::synchronize_device() {
  const std::uint64_t ticket = sync_begun_.fetch_add(1) + 1;
  UpstreamResult r;
  {
    std::lock_guard lock(upstream_mu_);
    r = upstream_.synchronize();
  }
  synchronizes_.fetch_add(1, std::memory_order_relaxed);
  if (r.ok()) device_synchronized(ticket);
  return r;
}

UpstreamResult DevicePool::Impl::order_device(bool* synchronized) {
  if (synchronized) *synchronized = false;
  const std::uint64_t ticket = sync_begun_.fetch_add(1) + 1;
  FenceHandle fence = 0;
  UpstreamResult r;
  {
    std::lock_guard lock(upstream_mu_);
    r = upstream_.order_device(&fence);
    if (r.ok()) {
      // Completion is what unmapping needs, and a later fence completes
      // only after the earlier ones: a long queue (a device far behind)
      // keeps its newest fences and lets the oldest go.
      constexpr std::size_t kMaxOrderings = 32;
      if (orderings_.size() == kMaxOrderings) {
        upstream_.destroy_fence(orderings_.front().fence);
        orderings_.erase(orderings_.begin());
      }
      orderings_.push_back({ticket, fence});
    }
  }
  if (!r.ok()) {
    if (synchronized) *synchronized = true;
    return synchronize_device();
  }
  orderings_made_.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t done = reuse_done_.load();
  while (done < ticket && !reuse_done_.compare_exchange_weak(done, ticket)) {
  }
  return r;
}

void DevicePool::Impl::poll_orderings() {
  std::uint64_t completed = 0;
  {
    std::lock_guard lock(upstream_mu_);
    // Newest first: its completion implies all the others'.
    std::size_t done = 0;
    for (std::size_t i = orderings_.size(); i-- > 0;) {
      if (upstream_.query_fence(orderings_[i].fence) != FenceState::complete) continue;
      completed = orderings_[i].ticket;
      done = i + 1;
      break;
    }
    for (std::size_t i = 0; i < done; ++i) upstream_.destroy_fence(orderings_[i].fence);
    orderings_.erase(orderings_.begin(), orderings_.begin() + static_cast<std::ptrdiff_t>(done));
  }
  if (completed != 0) device_synchronized(completed);
}

// The largest free block that could be handed out without new memory,
// exactly: in expandable segments only the mapped pages of a free block
// count (a free tail the ladder extended but could not map, or pages given
// back under a free block, are address space, not memory). Walks every
// block under its sub-pool's lock: for the out-of-memory report only.
std::size_t DevicePool::Impl::largest_mapped_free() const {
  std::size_t largest = 0;
  for_each_sub_pool([&](SubPool& sp) {
    std::lock_guard lock(sp.mu);
    for (const Segment* seg = sp.segments; seg; seg = seg->next_in_pool) {
      for (const Block* b = seg->first; b; b = b->next) {
        if (b->state != detail::BlockState::free) continue;
        if (!seg->expandable) {
          largest = std::max(largest, b->size);
          continue;
        }
        // The longest mapped stretch inside the block.
        const std::size_t g = vm_granularity_;
        const DevicePtr base = seg->base();
        DevicePtr run_start = b->addr;
        for (DevicePtr at = b->addr; at < b->addr + b->size;) {
          const std::size_t page = (at - base) / g;
          const DevicePtr page_end = std::min<DevicePtr>(base + (page + 1) * g, b->addr + b->size);
          if (!seg->pages[page]) run_start = page_end;
          else largest = std::max(largest, static_cast<std::size_t>(page_end - run_start));
          at = page_end;
        }
      }
    }
  });
  return largest;
}

OomReport DevicePool::Impl::make_report(std::size_t size, std::size_t rounded, bool stream_ordered,
                                        StreamHandle stream, UpstreamResult error) {
  const PoolStats s = stats();
  OomReport r;
  r.device = device_;
  r.size = size;
  r.block = rounded;
  r.allocated = s.allocated;
  r.reserved = s.reserved;
  r.cached_free = s.cached_free;
  r.largest_free = largest_mapped_free();
  {
    std::lock_guard lock(upstream_mu_);
    std::size_t free_bytes = 0, total = 0;
    if (upstream_.memory_info(&free_bytes, &total).ok()) {
      r.device_free = free_bytes;
      r.device_total = total;
    }
  }
  // Fragmentation: the memory existed in total (cached but scattered, plus
  // what the driver still had) yet no contiguous block of it fit.
  r.cause = saturating_add(r.cached_free, r.device_free) >= rounded ? OomCause::fragmentation
                                                                    : OomCause::capacity;
  r.stream_ordered = stream_ordered;
  r.stream = stream_ordered ? stream : 0;
  r.result = error;
  r.fragmentation = fragmentation_of(s);
  return r;
}

}  // namespace cumemtrace::pool
