// DevicePool: giving memory back. Pending frees become free once a
// synchronisation or their fence says the device is done with them
// (reclaim); wholly free segments, and the free tails of expandable ones, go
// back to the upstream (release_free, release_cached, a destroyed stream's
// sub-pool).
#include "device_pool_impl.h"

#include <algorithm>
#include <vector>

namespace cumemtrace::pool {

std::size_t DevicePool::Impl::reclaim(SubPool& sp) {
  std::size_t bytes = detail::reclaim_synced(sp, sync_done_.load(std::memory_order_acquire));
  if (!sp.fenced.empty()) bytes += reclaim_fences(sp);
  return bytes;
}

std::size_t DevicePool::Impl::reclaim_fences(SubPool& sp) {
  const std::uint64_t done = sync_done_.load(std::memory_order_acquire);
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < sp.fenced.size();) {
    Block* b = sp.fenced[i];
    bool safe = b->ticket < done;  // a synchronisation covered it
    {
      std::lock_guard lock(upstream_mu_);
      if (!safe) safe = upstream_.query_fence(b->fence) == FenceState::complete;
      if (safe) upstream_.destroy_fence(b->fence);
    }
    if (!safe) {
      ++i;
      continue;
    }
    sp.fenced[i] = sp.fenced.back();
    sp.fenced.pop_back();
    sp.pending_bytes[b->segment->kind] -= b->size;
    sp.pending.sub(b->size);
    bytes += b->size;
    detail::make_free(sp, b);
  }
  return bytes;
}

std::size_t DevicePool::Impl::whole_free_bytes(const SubPool& sp) {
  std::size_t bytes = 0;
  for (const Segment* seg = sp.segments; seg; seg = seg->next_in_pool) {
    if (seg->expandable) bytes += seg->mapped - std::min(seg->mapped, seg->used);  // about: pages shared with live blocks stay
    else if (detail::segment_is_free(seg)) bytes += seg->backed();
  }
  return bytes;
}

void DevicePool::Impl::trim_to_release_threshold(SubPool& sp) {
  if (config_.release_threshold == kUnlimited) return;
  const std::size_t cached = whole_free_bytes(sp);
  if (cached <= config_.release_threshold) return;
  UpstreamResult ignored;
  release_free(sp, cached - config_.release_threshold, &ignored);
}

std::size_t DevicePool::Impl::release_free(SubPool& sp, std::size_t goal, UpstreamResult* first_error) {
  std::size_t released = 0;
  for (Segment* seg = sp.segments; seg && released < goal;) {
    Segment* next = seg->next_in_pool;
    if (seg->expandable) {
      released += unmap_free_pages(sp, seg, goal - released, 0, 0, first_error);
    } else if (detail::segment_is_free(seg)) {
      released += seg->backed();
      release_segment(sp, seg, first_error);
    }
    seg = next;
  }
  return released;
}

// Memory cached in one sub-pool is of no use to another until it goes back
// to the upstream. Without this the tight policy's peak guard held only
// within a sub-pool, and reserved memory grew to the sum of each sub-pool's
// own peak: the small blocks' 2 MiB segments grew while the large blocks'
// range held mapped free pages, and a second stream's range grew while the
// first's sat free (issue 18: many_layers 1.074x, two_streams 1.083x of peak
// live). The caller holds `self`'s lock; another sub-pool is only tried
// (try_lock), never waited for, so two threads doing this at once cannot
// deadlock, and a busy sub-pool is simply skipped. Its pending blocks that a
// synchronisation or fence already covered are reclaimed first; the others
// stay (the caller asked for no synchronisation).
std::size_t DevicePool::Impl::release_elsewhere(SubPool& self, std::size_t goal) {
  std::size_t released = 0;
  UpstreamResult ignored;
  for_each_sub_pool([&](SubPool& other) {
    if (&other == &self || released >= goal) return;
    std::unique_lock lock(other.mu, std::try_to_lock);
    if (!lock) return;
    reclaim(other);
    released += release_free(other, goal - released, &ignored);
  });
  return released;
}

std::size_t DevicePool::Impl::make_room(SubPool& sp, std::size_t goal, Segment* seg, DevicePtr keep_begin,
                                        DevicePtr keep_end) {
  UpstreamResult ignored;
  auto release = [&](std::size_t want) {
    std::size_t got = seg ? unmap_free_pages(sp, seg, want, keep_begin, keep_end, &ignored)
                          : release_free(sp, want, &ignored);
    if (got < want) got += release_elsewhere(sp, want - got);
    return got;
  };
  std::size_t released = release(goal);
  if (released >= goal) return released;
  // Memory freed with cudaFree waits for a synchronisation; at the peak one
  // is worth it: what it frees may be whole pages or segments.
  std::size_t pending = 0;
  for_each_sub_pool([&](SubPool& other) { pending += other.pending.get(); });
  if (pending == 0 || !synchronize_device().ok()) return released;
  // Not sp's own pending blocks while a block of it is being mapped (seg
  // set): reclaiming could merge that block into a neighbour under the
  // caller's feet. Other sub-pools reclaim in release_elsewhere.
  if (!seg) reclaim(sp);
  return released + release(goal - released);
}

void DevicePool::Impl::release_segment(SubPool& sp, Segment* seg, UpstreamResult* first_error,
                                       bool freed_by_reset) {
  if (seg->expandable) return release_expandable(sp, seg, first_error);
  const DevicePtr base = seg->base();
  const std::size_t size = seg->size();
  Block* b = seg->first;
  detail::detach_free_segment(sp, seg);
  seg->owner.store(nullptr, std::memory_order_release);
  {
    std::lock_guard lock(segments_mu_);
    segment_map_.erase(seg, base, size);
  }
  {
    std::lock_guard lock(upstream_mu_);
    if (observer_) observer_->on_segment_free(device_, base, size);
    if (!freed_by_reset) {
      const UpstreamResult r = seg->stream_ordered_memory ? upstream_.release_stream_ordered(base, size)
                                                          : upstream_.release(base, size);
      upstream_frees_.fetch_add(1, std::memory_order_relaxed);
      if (!r.ok() && first_error->ok()) *first_error = r;
    }
  }
  note_reserved(-static_cast<std::ptrdiff_t>(size));
  sp.recycle(b);
  recycle_segment(seg);
}

UpstreamResult DevicePool::Impl::release_cached() {
  std::lock_guard slow(slow_mu_);
  UpstreamResult first = synchronize_device();
  for_each_sub_pool([&](SubPool& sp) {
    std::lock_guard lock(sp.mu);
    reclaim(sp);
    release_free(sp, kUnlimited, &first);
    if (sp.expandable && detail::segment_is_free(sp.expandable)) release_expandable(sp, sp.expandable, &first);
  });
  return first;
}

void DevicePool::Impl::stream_destroyed(StreamHandle stream) {
  std::lock_guard lock(streams_mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  SubPool* sp = it->second;
  streams_.erase(it);
  stream_generation_.fetch_add(1, std::memory_order_acq_rel);
  orphans_.push_back(sp);
  std::lock_guard sub_lock(sp->mu);
  sp->orphan = true;
  UpstreamResult ignored;
  release_free(*sp, kUnlimited, &ignored);
  if (sp->expandable && detail::segment_is_free(sp->expandable)) release_expandable(*sp, sp->expandable, &ignored);
}

}  // namespace cumemtrace::pool
