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
  std::size_t bytes = detail::reclaim_synced(sp, reuse_done_.load(std::memory_order_acquire));
  if (!sp.fenced.empty()) bytes += reclaim_fences(sp);
  return bytes;
}

std::size_t DevicePool::Impl::reclaim_fences(SubPool& sp) {
  const std::uint64_t ordered = reuse_done_.load(std::memory_order_acquire);
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < sp.fenced.size();) {
    Block* b = sp.fenced[i];
    // A synchronisation or an ordering covered it (its pages then stay busy
    // until that completes), or its stream got past the free, and with it
    // every use the program ordered before the free: idle.
    bool safe = b->ticket < ordered;
    std::uint64_t busy_until = b->ticket + 1;
    {
      std::lock_guard lock(upstream_mu_);
      if (!safe && upstream_.query_fence(b->fence) == FenceState::complete) {
        safe = true;
        busy_until = 0;
      }
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
    detail::make_free(sp, b, busy_until);
  }
  return bytes;
}

bool DevicePool::Impl::busy_free_pages(const SubPool& sp) const {
  for (const Segment* seg = sp.segments; seg; seg = seg->next_in_pool) {
    if (!seg->expandable) continue;
    for (const Block* b = seg->first; b; b = b->next) {
      if (b->state != detail::BlockState::free) continue;
      const std::size_t g = seg->page_size;
      for (std::size_t p = (b->addr - seg->base()) / g, end = (b->addr + b->size - seg->base() + g - 1) / g; p < end;
           ++p)
        if (seg->pages[p] && !page_idle(seg, p)) return true;
    }
  }
  return false;
}

std::size_t DevicePool::Impl::whole_free_bytes(const SubPool& sp) {
  std::size_t bytes = 0;
  for (const Segment* seg = sp.segments; seg; seg = seg->next_in_pool) {
    if (seg->expandable) bytes += seg->mapped - std::min(seg->mapped, seg->used);  // about: pages shared with live blocks stay
    else if (detail::segment_is_free(seg)) bytes += seg->backed();
  }
  return bytes;
}

void DevicePool::Impl::trim_to_release_threshold(SubPool& sp, bool synchronized) {
  if (config_.release_threshold == kUnlimited) return;
  const std::size_t cached = whole_free_bytes(sp);
  if (cached <= config_.release_threshold) return;
  UpstreamResult ignored;
  // Right after a synchronisation the device is idle, and an ordinary
  // segment's cuMemFree waits for nothing; else only idle pages go.
  release_free(sp, cached - config_.release_threshold, &ignored, synchronized ? Release::wait : Release::step);
}

std::size_t DevicePool::Impl::release_free(SubPool& sp, std::size_t goal, UpstreamResult* first_error,
                                           Release how) {
  // Off the step path every free page may go: one synchronisation first if
  // some are still busy.
  if (how == Release::wait && busy_free_pages(sp)) synchronize_device();
  std::size_t released = 0;
  for (Segment* seg = sp.segments; seg && released < goal;) {
    Segment* next = seg->next_in_pool;
    if (seg->expandable) {
      // (A move's memory from another sub-pool: ordered pages only.)
      released += unmap_free_pages(sp, seg, goal - released, 0, 0, first_error, how == Release::step_keep,
                                   Alias::ordered);
    } else if (how == Release::wait && detail::segment_is_free(seg)) {
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
std::size_t DevicePool::Impl::release_elsewhere(SubPool& self, std::size_t goal, Release how) {
  std::size_t released = 0;
  UpstreamResult ignored;
  for_each_sub_pool([&](SubPool& other) {
    if (&other == &self || released >= goal) return;
    std::unique_lock lock(other.mu, std::try_to_lock);
    if (!lock) return;
    reclaim(other);
    released += release_free(other, goal - released, &ignored, how);
  });
  return released;
}

std::size_t DevicePool::Impl::make_room(SubPool& sp, std::size_t goal, Segment* seg, DevicePtr keep_begin,
                                        DevicePtr keep_end) {
  // Frees pending anywhere become free once the device is ordered, and the
  // busy pages of free blocks idle once it has run that far: without
  // waiting, the ordering helps later calls (or this one, where its work
  // is done already); where the upstream cannot order, it synchronises and
  // both hold at once. Only pages can go back on the step path, so only
  // they make it worth an ordering.
  if (vm_granularity_ != 0 && idle_pages_would_help(sp)) order_device();
  // Pages whose last use completed since we last looked are idle now.
  poll_orderings();
  // Old mappings that aliasing moves left in other sub-pools for queued
  // work go once it completed: a sub-pool that allocates no more would keep
  // them (and the memory of a page given back since) until its next move.
  if (aliasing_) {
    for_each_sub_pool([&](SubPool& other) {
      if (&other == &sp) return;
      std::unique_lock lock(other.mu, std::try_to_lock);
      if (lock && other.expandable) retire_aliases(other.expandable);
    });
  }
  UpstreamResult ignored;
  // Moving pages (seg set): their memory stays with the upstream for the
  // map that follows. Making room for an ordinary segment: it goes back to
  // the driver, which serves that segment from it.
  const Release how = seg ? Release::step_keep : Release::step;
  std::size_t released = seg ? unmap_free_pages(sp, seg, goal, keep_begin, keep_end, &ignored, true,
                                                Alias::own_sub_pool)
                             : release_free(sp, goal, &ignored, how);
  if (released < goal) released += release_elsewhere(sp, goal - released, how);
  return released;
}

bool DevicePool::Impl::idle_pages_would_help(SubPool& sp) {
  bool could_help = false;
  for_each_sub_pool([&](SubPool& other) {
    if (could_help) return;
    // Another sub-pool's lists are read under its lock (only tried: the
    // caller holds sp's).
    std::unique_lock<FutexLock> lock;
    if (&other != &sp) {
      lock = std::unique_lock(other.mu, std::try_to_lock);
      if (!lock) return;
    }
    if (!other.expandable) return;
    // Pending blocks a synchronisation or ordering covered already need
    // none: the next reclaim frees them.
    const bool uncovered = (other.pending_tail && other.pending_tail->ticket >= reuse_done_.load()) ||
                           !other.fenced.empty();
    could_help = uncovered || busy_free_pages(other);
  });
  return could_help;
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
    release_free(sp, kUnlimited, &first, Release::wait);
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
  release_free(*sp, kUnlimited, &ignored, Release::wait);
  if (sp->expandable && detail::segment_is_free(sp->expandable)) release_expandable(*sp, sp->expandable, &ignored);
}

}  // namespace cumemtrace::pool
