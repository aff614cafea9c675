// Expandable segments: large blocks of a sub-pool live in one reserved
// address range that grows in place (cuMemAddressReserve + cuMemCreate/
// cuMemMap through the upstream), so
// - a request that fits nowhere extends the free tail by the shortfall only,
//   instead of taking a whole new segment;
// - physical pages under free blocks can be unmapped and mapped again where
//   they are needed, so memory scattered over many free holes is not lost
//   to fragmentation. By default the pool does this only when mapping would
//   otherwise raise the peak of reserved memory: steady-state iterations
//   that fit in the cache cost no map/unmap calls.
#include "device_pool_impl.h"

#include <algorithm>

namespace cumemtrace::pool {

namespace {
std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
}  // namespace

bool DevicePool::Impl::note_map_refusal(UpstreamResult* error) {
  if (error->ok() || error->status == UpstreamStatus::out_of_memory) return false;
  vmm_refused_.store(true, std::memory_order_relaxed);
  *error = UpstreamResult::success();
  return true;
}

Block* DevicePool::Impl::fit(SubPool& sp, PoolKind kind, std::size_t rounded, UpstreamResult* error) {
  Block* f = detail::best_fit(sp, policy_, kind, rounded);
  if (!f || !f->segment->expandable || unmapped_bytes(f->segment, f->addr, rounded) == 0) return f;
  // Tight: before new memory raises the peak, let pending frees rejoin the
  // free space (an ordering of the device, no wait): a pending neighbour may
  // complete a mapped stretch.
  if (config_.segment_policy == SegmentPolicy::tight && sp.pending_bytes[kind] > 0 &&
      reserved_total_.load() + rounded > peak_reserved_.load() && order_device().ok()) {
    reclaim(sp);
    f = detail::best_fit(sp, policy_, kind, rounded);
    if (!f || !f->segment->expandable) return f;
  }
  if (Block* mapped = mapped_stretch(sp, kind, rounded)) return mapped;
  // Virtual memory was refused: only what is mapped already can serve.
  if (vmm_refused_.load(std::memory_order_relaxed)) return nullptr;
  // Addresses whose memory an aliasing move took while queued work still
  // used them there are not mappable until that work completed: no fit
  // here (the caller grows instead).
  retire_aliases(f->segment);
  if (retiring_in(f->segment, f->addr, rounded) != 0) return nullptr;
  *error = map_pages(sp, f->segment, f->addr, rounded);
  if (error->ok()) return f;
  note_map_refusal(error);
  return nullptr;
}

// Best fit by size may land on a hole whose pages were given back, while
// another free block (or another part of this one) still has the request's
// size mapped. Using that instead costs no driver call now and leaves the
// unmapped hole for later: on the issue-18 workloads, mapping where best fit
// pointed and moving pages there from other holes moved 81 GiB in 40 steps
// of varlen_workloads long_attention, 17 GiB with this (pool_replay_harness,
// pages counted). The smallest free block with such a stretch wins, and the
// request takes the stretch's start.
Block* DevicePool::Impl::mapped_stretch(SubPool& sp, PoolKind kind, std::size_t rounded) {
  DevicePtr at = 0;
  Block* b = find_mapped_stretch(sp, kind, rounded, &at);
  return b ? detail::split_free(sp, b, at) : nullptr;
}

Block* DevicePool::Impl::find_mapped_stretch(SubPool& sp, PoolKind kind, std::size_t rounded, DevicePtr* at) const {
  const detail::FreeSet& set = sp.free_sets[kind];
  Block probe;
  probe.size = rounded;
  const std::size_t g = vm_granularity_;
  for (auto it = set.lower_bound(&probe); it != set.end(); ++it) {
    Block* b = *it;
    if (!b->segment->expandable || !policy_.may_use(b->size, rounded)) continue;
    const DevicePtr base = b->segment->base();
    const DevicePtr end = b->addr + b->size;
    DevicePtr stretch = b->addr;
    for (DevicePtr p = b->addr; p < end;) {
      const std::size_t page = (p - base) / g;
      const DevicePtr page_end = std::min<DevicePtr>(base + (page + 1) * g, end);
      if (!b->segment->pages[page]) {
        stretch = page_end;
      } else if (page_end - stretch >= rounded) {
        *at = stretch;
        return b;
      }
      p = page_end;
    }
  }
  return nullptr;
}

std::size_t DevicePool::Impl::unmapped_bytes(const Segment* seg, DevicePtr addr, std::size_t size) const {
  const std::size_t g = vm_granularity_;
  const DevicePtr base = seg->base();
  std::size_t missing = 0;
  for (std::size_t p = (addr - base) / g; p < (addr + size - base + g - 1) / g; ++p) missing += seg->pages[p] ? 0 : g;
  return missing;
}

std::size_t DevicePool::Impl::expandable_va_size() {
  // Room for the whole device (and then some: placement leaves holes), but
  // never an absurd reservation for an "unlimited" simulated device.
  constexpr std::size_t kMaxReservation = std::size_t{1} << 40;
  const std::size_t total = device_total();
  const std::size_t wanted = total == 0 || total >= kMaxReservation ? kMaxReservation : total + total / 2;
  return align_up(std::max(wanted, std::size_t{1} << 30), vm_granularity_);
}

Block* DevicePool::Impl::grow_expandable(SubPool& sp, std::size_t rounded, UpstreamResult* error) {
  const std::size_t granularity = vm_granularity_;
  Segment* seg = sp.expandable;
  if (!seg) {
    const std::size_t va = expandable_va_size();
    DevicePtr base = 0;
    {
      std::lock_guard lock(upstream_mu_);
      if (!upstream_.reserve_range(va, &base).ok()) return nullptr;  // caller falls back
    }
    seg = new_segment();
    if (!seg) {
      std::lock_guard lock(upstream_mu_);
      upstream_.release_range(base, va);
      return nullptr;
    }
    seg->range.base.store(base, std::memory_order_release);
    seg->range.size.store(0, std::memory_order_release);
    seg->kind = detail::kLarge;
    seg->expandable = true;
    seg->va_size = va;
    seg->page_size = granularity;
    detail::attach_segment(sp, seg);
    sp.expandable = seg;
  }
  // Extend the extent so that the free tail holds the request: only the
  // shortfall is new address space (and, once mapped, new memory).
  Block* last = seg->first;
  while (last && last->next) last = last->next;
  std::size_t tail = last && last->state == detail::BlockState::free ? last->size : 0;
  // The request goes after the last page of the free tail that an aliasing
  // move left mapped for queued work (not mappable yet).
  retire_aliases(seg);
  DevicePtr start = seg->base() + seg->size() - tail;
  if (tail != 0) {
    if (const DevicePtr after = last_retiring_end(seg, start, tail); after != 0) {
      tail -= after - start;
      start = after;
    }
  }
  Block* f = last;
  if (rounded > tail) {
    const std::size_t extension = align_up(rounded - tail, granularity);
    const std::size_t extent = seg->size();
    if (extension > seg->va_size - extent) return nullptr;  // range full: caller falls back
    {
      std::lock_guard lock(segments_mu_);
      if (!segment_map_.insert(seg, seg->base() + extent, extension)) {
        *error = UpstreamResult::out_of_memory(upstream_.out_of_memory_code());
        return nullptr;
      }
    }
    seg->range.size.store(extent + extension, std::memory_order_release);
    seg->pages.resize((extent + extension) / granularity, false);
    seg->page_busy.resize(seg->pages.size(), 0);
    seg->retiring.resize(seg->pages.size(), false);
    f = detail::add_free_tail(sp, seg, seg->base() + extent, extension);
  }
  *error = map_pages(sp, seg, start, rounded);
  // (Split only now: a failure leaves no two free blocks side by side.)
  if (error->ok()) return detail::split_free(sp, f, start);
  note_map_refusal(error);  // the caller falls back to ordinary segments
  return nullptr;
}

UpstreamResult DevicePool::Impl::map_pages(SubPool& sp, Segment* seg, DevicePtr addr, std::size_t size) {
  const std::size_t g = vm_granularity_;
  const DevicePtr base = seg->base();
  const std::size_t first = (addr - base) / g;
  const std::size_t end = (addr + size - base + g - 1) / g;
  const std::size_t missing = unmapped_bytes(seg, addr, size);
  if (missing == 0) return UpstreamResult::success();
  retire_aliases(seg);
  // Rather than raise the peak, move memory from free holes to where it is
  // needed: idle pages of the holes are unmapped, their physical memory
  // kept and mapped here (no cuMemRelease and cuMemCreate for a move).
  if (config_.segment_policy == SegmentPolicy::tight) {
    const std::size_t now = reserved_total_.load();
    const std::size_t peak = peak_reserved_.load();
    if (now + missing > peak) make_room(sp, now + missing - peak, seg, base + first * g, base + end * g);
  }
  const UpstreamResult r = map_missing_pages(sp, seg, first, end);
  // Memory a move kept and this map did not take goes back to the driver.
  std::lock_guard lock(upstream_mu_);
  upstream_.drop_kept();
  return r;
}

UpstreamResult DevicePool::Impl::map_missing_pages(SubPool& sp, Segment* seg, std::size_t first, std::size_t end) {
  const std::size_t g = vm_granularity_;
  const DevicePtr base = seg->base();
  // Pages are mapped one by one (a few driver calls each), so a request the
  // device cannot hold would map every free page before it failed, and
  // unmap them all again, on each step of the ladder: an out-of-memory storm
  // (tests/apps/oom_storm) took minutes instead of a second. The driver's
  // free memory (and what a move kept) says beforehand.
  if (const std::size_t still = unmapped_bytes(seg, base + first * g, (end - first) * g); still > 0) {
    std::lock_guard lock(upstream_mu_);
    std::size_t free_bytes = 0, total = 0;
    if (upstream_.memory_info(&free_bytes, &total).ok() &&
        saturating_add(free_bytes, upstream_.kept_bytes()) < still)
      return UpstreamResult::out_of_memory(upstream_.out_of_memory_code());
  }
  // The callers keep requests off pages still mapped for queued work
  // (retiring_in); one here would be mapped twice, which the driver
  // refuses. Out of memory sends the request down the ladder, whose
  // synchronisation retires them.
  if (seg->retiring_pages != 0)
    for (std::size_t p = first; p < end; ++p)
      if (seg->retiring[p]) return UpstreamResult::out_of_memory(upstream_.out_of_memory_code());
  for (std::size_t p = first; p < end;) {
    if (seg->pages[p]) {
      ++p;
      continue;
    }
    std::size_t q = p;
    while (q < end && !seg->pages[q]) ++q;
    const DevicePtr run = base + p * g;
    const std::size_t len = (q - p) * g;
    {
      std::lock_guard lock(upstream_mu_);
      const UpstreamResult r = upstream_.map(run, len);
      if (!r.ok()) return r;
      upstream_allocs_.fetch_add(1, std::memory_order_relaxed);
      if (observer_) observer_->on_segment_alloc(device_, run, len);
    }
    for (std::size_t i = p; i < q; ++i) {
      seg->pages[i] = true;
      seg->page_busy[i] = 0;
    }
    seg->runs.emplace(run, len);
    detail::change_mapped(sp, seg, static_cast<std::ptrdiff_t>(len));
    note_reserved(static_cast<std::ptrdiff_t>(len));
    p = q;
  }
  return UpstreamResult::success();
}

std::size_t DevicePool::Impl::unmap_free_pages(SubPool& sp, Segment* seg, std::size_t goal, DevicePtr keep_begin,
                                               DevicePtr keep_end, UpstreamResult* first_error, bool keep,
                                               Alias alias) {
  const std::size_t g = vm_granularity_;
  const DevicePtr base = seg->base();
  std::size_t released = 0;
  retire_aliases(seg);
  // Idle pages: the last use of a page under a block freed recently may
  // still be queued, and cuMemUnmap does not wait for it (the page is then
  // an illegal address for that work); nothing here waits. A move may take
  // a busy page's memory anyway where its next user runs after that use in
  // device order (aliasing: the page stays mapped here until the use
  // completed, retire_aliases): in its own sub-pool (a free block's memory
  // is the sub-pool's to hand out), or elsewhere once an ordering began
  // after the page's last free.
  const bool aliasing = keep && alias != Alias::none && aliasing_;
  const std::uint64_t ordered = reuse_done_.load(std::memory_order_acquire);
  enum class Use : std::uint8_t { no, unmap, alias };
  auto use = [&](std::size_t page) {
    const DevicePtr at = base + page * g;
    if (!seg->pages[page] || (at >= keep_begin && at < keep_end)) return Use::no;
    if (page_idle(seg, page)) return Use::unmap;
    if (aliasing && (alias == Alias::own_sub_pool || seg->page_busy[page] <= ordered)) return Use::alias;
    return Use::no;
  };
  for (Block* b = seg->first; b && released < goal; b = b->next) {
    if (b->state != detail::BlockState::free) continue;
    // Only pages wholly inside the free block: its neighbours' pages stay.
    std::size_t p = align_up(b->addr - base, g) / g;
    const std::size_t end = (b->addr + b->size - base) / g;
    while (p < end && released < goal) {
      const Use how = use(p);
      if (how == Use::no) {
        ++p;
        continue;
      }
      std::size_t q = p;
      while (q < end && use(q) == how && released + (q - p) * g < goal) ++q;
      unmap_run(sp, seg, p, q, first_error, keep, how == Use::alias);
      released += (q - p) * g;
      p = q;
    }
  }
  return released;
}

void DevicePool::Impl::retire_aliases(Segment* seg) {
  if (seg->retiring_pages == 0) return;
  poll_orderings();
  const std::size_t g = vm_granularity_;
  for (std::size_t p = 0; p < seg->pages.size();) {
    if (!seg->retiring[p] || !page_idle(seg, p)) {
      ++p;
      continue;
    }
    std::size_t q = p;
    while (q < seg->pages.size() && seg->retiring[q] && page_idle(seg, q)) ++q;
    {
      std::lock_guard lock(upstream_mu_);
      upstream_.unmap_alias(seg->base() + p * g, (q - p) * g);
    }
    for (std::size_t i = p; i < q; ++i) seg->retiring[i] = false;
    seg->retiring_pages -= q - p;
    p = q;
  }
}

std::size_t DevicePool::Impl::retiring_in(const Segment* seg, DevicePtr addr, std::size_t size) const {
  if (seg->retiring_pages == 0) return 0;
  const std::size_t g = vm_granularity_;
  const DevicePtr base = seg->base();
  std::size_t n = 0;
  for (std::size_t p = (addr - base) / g; p < (addr + size - base + g - 1) / g; ++p) n += seg->retiring[p] ? 1 : 0;
  return n;
}

DevicePtr DevicePool::Impl::last_retiring_end(const Segment* seg, DevicePtr addr, std::size_t size) const {
  if (seg->retiring_pages == 0) return 0;
  const std::size_t g = vm_granularity_;
  const DevicePtr base = seg->base();
  for (std::size_t p = (addr + size - base + g - 1) / g; p-- > (addr - base) / g;)
    if (seg->retiring[p]) return base + (p + 1) * g;
  return 0;
}

void DevicePool::Impl::unmap_run(SubPool& sp, Segment* seg, std::size_t first, std::size_t end,
                                 UpstreamResult* first_error, bool keep, bool alias) {
  const std::size_t g = vm_granularity_;
  const DevicePtr lo = seg->base() + first * g;
  const DevicePtr hi = seg->base() + end * g;
  std::lock_guard lock(upstream_mu_);
  // The observer was told about mapped runs; each run touched is retold as
  // gone, and what is left of it as new, so every segment_free in the trace
  // matches a segment_alloc and reserved memory stays exact.
  auto it = seg->runs.upper_bound(lo);
  if (it != seg->runs.begin()) --it;
  while (it != seg->runs.end() && it->first < hi) {
    const DevicePtr run = it->first;
    const std::size_t len = it->second;
    if (run + len <= lo) {
      ++it;
      continue;
    }
    if (observer_) observer_->on_segment_free(device_, run, len);
    it = seg->runs.erase(it);
    if (run < lo) {
      seg->runs.emplace(run, lo - run);
      if (observer_) observer_->on_segment_alloc(device_, run, lo - run);
    }
    if (run + len > hi) {
      it = seg->runs.emplace(hi, run + len - hi).first;
      if (observer_) observer_->on_segment_alloc(device_, hi, run + len - hi);
      ++it;
    }
  }
  const UpstreamResult r = alias  ? upstream_.alias_keep(lo, hi - lo)
                           : keep ? upstream_.unmap_keep(lo, hi - lo)
                                  : upstream_.unmap(lo, hi - lo);
  upstream_frees_.fetch_add(1, std::memory_order_relaxed);
  if (!r.ok() && first_error->ok()) *first_error = r;
  for (std::size_t p = first; p < end; ++p) seg->pages[p] = false;
  if (alias) {
    for (std::size_t p = first; p < end; ++p) seg->retiring[p] = true;
    seg->retiring_pages += end - first;
  }
  detail::change_mapped(sp, seg, -static_cast<std::ptrdiff_t>(hi - lo));
  note_reserved(-static_cast<std::ptrdiff_t>(hi - lo));
}

void DevicePool::Impl::release_expandable(SubPool& sp, Segment* seg, UpstreamResult* first_error) {
  // Every page goes, so every page must be idle: off the step path (a
  // trim, a destroyed stream, a reset), one synchronisation if some are not.
  for (std::size_t p = 0; p < seg->pages.size(); ++p) {
    if ((seg->pages[p] || seg->retiring[p]) && !page_idle(seg, p)) {
      synchronize_device();
      break;
    }
  }
  unmap_free_pages(sp, seg, kUnlimited, 0, 0, first_error);
  retire_aliases(seg);
  const DevicePtr base = seg->base();
  const std::size_t extent = seg->size();
  Block* b = seg->first;
  detail::detach_free_segment(sp, seg);
  seg->owner.store(nullptr, std::memory_order_release);
  sp.expandable = nullptr;
  {
    std::lock_guard lock(segments_mu_);
    segment_map_.erase(seg, base, extent);
  }
  {
    std::lock_guard lock(upstream_mu_);
    const UpstreamResult r = upstream_.release_range(base, seg->va_size);
    if (!r.ok() && first_error->ok()) *first_error = r;
  }
  sp.recycle(b);
  recycle_segment(seg);
}

}  // namespace cumemtrace::pool
