// DevicePool: routing to sub-pools, allocate and free (the hot path: a hit
// takes one sub-pool lock and touches no other file's code but block_ops),
// queries and statistics, segment records. The ladder, releases and reset
// are in the files device_pool_impl.h lists.
#include "device_pool_impl.h"

#include <algorithm>
#include <new>

namespace cumemtrace::pool {
namespace {

std::atomic<std::uint64_t> g_next_pool_uid{1};
std::atomic<unsigned> g_next_thread_index{0};

// Each thread keeps its device-wide shard for its whole life, so its small
// blocks stay together and its hit path meets no other thread's lock.
unsigned thread_index() {
  thread_local unsigned index = ~0u;
  if (index == ~0u) index = g_next_thread_index.fetch_add(1, std::memory_order_relaxed);
  return index;
}

// The last stream a thread allocated on, so the stream → sub-pool map (and
// its lock) is consulted only when a thread switches streams.
struct StreamCache {
  std::uint64_t pool_uid = 0;
  std::uint64_t generation = 0;
  StreamHandle stream = 0;
  detail::SubPool* sub_pool = nullptr;
};
thread_local StreamCache t_stream_cache;

// The thread's device-wide shard of the pool it used last: the shard is
// fixed per thread, and picking it anew costs an integer division on every
// cudaMalloc.
struct ShardCache {
  std::uint64_t pool_uid = 0;
  detail::SubPool* shard = nullptr;
};
thread_local ShardCache t_shard_cache;

}  // namespace

DevicePool::Impl::Impl(Upstream& upstream, const PoolConfig& config, int device, PoolObserver* observer)
    : upstream_(upstream),
      config_(config),
      policy_(config_),
      device_(device),
      observer_(observer),
      uid_(g_next_pool_uid.fetch_add(1)),
      vm_granularity_(config.expandable_segments ? upstream.vm_granularity() : 0),
      aliasing_(vm_granularity_ != 0 && upstream.supports_aliasing()),
      stream_ordered_segments_(upstream.has_stream_ordered_segments()) {
  std::lock_guard lock(streams_mu_);
  const std::uint32_t shards = std::max<std::uint32_t>(1, config_.device_shards);
  for (std::uint32_t i = 0; i < shards; ++i) device_shards_.push_back(add_sub_pool(false, 0));
  device_large_ = add_sub_pool(false, 0);
}

// Nothing goes back to the upstream (see the header): the records go.
DevicePool::Impl::~Impl() = default;

// ---------------------------------------------------------------- routing

SubPool* DevicePool::Impl::add_sub_pool(bool stream_ordered, StreamHandle stream) {
  const std::size_t n = sub_pool_count_.load(std::memory_order_relaxed);
  if (n == kMaxSubPools) return nullptr;
  auto owned = std::make_unique<SubPool>();
  owned->stream_ordered = stream_ordered;
  owned->stream = stream;
  SubPool* sp = owned.get();
  owned_sub_pools_.push_back(std::move(owned));
  sub_pools_[n].store(sp, std::memory_order_release);
  sub_pool_count_.store(n + 1, std::memory_order_release);
  return sp;
}

SubPool* DevicePool::Impl::device_pool_for(PoolKind kind) {
  if (kind == detail::kLarge) return device_large_;
  ShardCache& cache = t_shard_cache;
  if (cache.pool_uid == uid_) [[likely]] return cache.shard;
  SubPool* shard = device_shards_[thread_index() % device_shards_.size()];
  cache = ShardCache{uid_, shard};
  return shard;
}

SubPool* DevicePool::Impl::stream_pool(StreamHandle stream) {
  StreamCache& cache = t_stream_cache;
  const std::uint64_t generation = stream_generation_.load(std::memory_order_acquire);
  if (cache.pool_uid == uid_ && cache.generation == generation && cache.stream == stream && cache.sub_pool)
    return cache.sub_pool;
  std::lock_guard lock(streams_mu_);
  SubPool* sp = nullptr;
  if (auto it = streams_.find(stream); it != streams_.end()) {
    sp = it->second;
  } else {
    // A destroyed stream's sub-pool that holds nothing any more is reused,
    // so programs that create streams by the thousand do not run out.
    for (auto it2 = orphans_.begin(); it2 != orphans_.end() && !sp; ++it2) {
      std::lock_guard sub_lock((*it2)->mu);
      if ((*it2)->segments == nullptr && (*it2)->live.size() == 0) {
        sp = *it2;
        sp->orphan = false;
        sp->stream = stream;
        orphans_.erase(it2);
        break;
      }
    }
    if (!sp) sp = add_sub_pool(true, stream);
    if (!sp) return nullptr;
    streams_.emplace(stream, sp);
  }
  cache = StreamCache{uid_, generation, stream, sp};
  return sp;
}

SubPool* DevicePool::Impl::lock_owner(DevicePtr ptr, std::unique_lock<FutexLock>& lock,
                                      Segment** segment) const {
  auto range_of = [](Segment* s) -> const detail::SegmentRange& { return s->range; };
  // A segment can change hands (released, recycled) between the lock-free
  // lookup and the lock; look again until what we locked still owns it.
  for (int attempt = 0; attempt < 8; ++attempt) {
    Segment* seg = segment_map_.find(ptr, range_of);
    if (!seg) return nullptr;
    SubPool* sp = seg->owner.load(std::memory_order_acquire);
    if (!sp) continue;
    lock = std::unique_lock(sp->mu);
    if (seg->owner.load(std::memory_order_relaxed) == sp && seg->range.contains(ptr)) {
      *segment = seg;
      return sp;
    }
    lock.unlock();
  }
  return nullptr;
}

// ------------------------------------------------------------- allocation

Allocation DevicePool::Impl::allocate(std::size_t size, bool stream_ordered, StreamHandle stream) {
  if (size == 0) return Allocation{};
  const std::size_t rounded = policy_.round(size);
  if (rounded == 0) {
    // No device holds this much; say so without disturbing the cache.
    const UpstreamResult error = UpstreamResult::out_of_memory(upstream_.out_of_memory_code());
    Allocation failed{0, 0, error, make_report(size, size, stream_ordered, stream, error)};
    ooms_.fetch_add(1, std::memory_order_relaxed);
    if (observer_) observer_->on_oom(*failed.oom);
    return failed;
  }
  const PoolKind kind = kind_for(rounded);
  SubPool* sp = stream_ordered ? stream_pool(stream) : device_pool_for(kind);
  // Out of sub-pools for new streams: the device-wide pool serves them; its
  // frees wait for fences or a synchronisation, which is safe, only slower.
  if (!sp) sp = device_pool_for(kind);
  UpstreamResult error;
  {
    std::unique_lock lock(sp->mu);
    // Frees that a synchronisation or an ordering already covered rejoin
    // the free space before placement (one load and a compare when there
    // are none), so holes are reused before fresh space is carved.
    if (sp->pending_head && sp->pending_head->ticket < reuse_done_.load(std::memory_order_acquire))
      detail::reclaim_synced(*sp, reuse_done_.load(std::memory_order_acquire));
    Block* f = fit(*sp, kind, rounded, &error);
    Allocation borrowed;
    if (!f && error.ok()) f = refill(*sp, kind, rounded, size, stream_ordered, &error, &borrowed);
    if (borrowed.ptr) return borrowed;
    if (f) return finish(*sp, f, rounded, size, stream_ordered);
    if (error.status != UpstreamStatus::out_of_memory) return Allocation{0, 0, error, {}};
  }
  return out_of_memory_ladder(*sp, kind, size, rounded, stream_ordered, stream, error);
}

Allocation DevicePool::Impl::finish(SubPool& sp, Block* free_block, std::size_t rounded, std::size_t size,
                                    bool stream_ordered) {
  Block* b = detail::take_block(sp, policy_, free_block, rounded, size, stream_ordered);
  // Member by member: a braced initialiser zeroes the whole (empty) report.
  Allocation a;
  a.ptr = b->addr;
  a.block = b->size;
  // A device-wide block borrowed from a stream's sub-pool (the ladder's last
  // step) is cudaMalloc's: a reset destroys it like any other.
  a.survives_reset = survives_reset(sp, b->segment) && (stream_ordered || !sp.stream_ordered);
  return a;
}

Block* DevicePool::Impl::refill(SubPool& sp, PoolKind kind, std::size_t rounded, std::size_t size,
                                bool stream_ordered, UpstreamResult* error, Allocation* borrowed) {
  if (reclaim(sp) > 0) {
    if (Block* f = fit(sp, kind, rounded, error)) return f;
    if (!error->ok()) return nullptr;
  }
  // Pending frees could serve the request: one ordering of the device makes
  // all of them (in every sub-pool) reusable, without waiting for it (a
  // synchronisation where the upstream cannot order). Doing this before
  // growing is what keeps a cudaMalloc/cudaFree loop at a constant
  // footprint. The tight policy does it also before growth that would
  // raise the peak of reserved memory: the blocks it frees may coalesce
  // into room (varlen_workloads kv_cache: 66 MiB pending while a 220 MiB
  // request raised the peak). Not before every growth: each ordering is a
  // few driver calls, and many_layers made 200 a step that way.
  const bool tight = config_.segment_policy == SegmentPolicy::tight;
  const bool at_peak = reserved_total_.load() + rounded > peak_reserved_.load();
  bool synchronized = false;
  if ((sp.pending_bytes[kind] >= rounded || (tight && at_peak && sp.pending_bytes[kind] > 0)) &&
      order_device(&synchronized).ok()) {
    reclaim(sp);
    trim_to_release_threshold(sp, synchronized);
    if (Block* f = fit(sp, kind, rounded, error)) return f;
    if (!error->ok()) return nullptr;
  }
  // Before this sub-pool's range grows, or moves pages into it: memory
  // another sub-pool has mapped and free (borrow.cpp).
  if (Allocation b = borrow_in_order(sp, kind, rounded, size, stream_ordered); b.ptr) {
    *borrowed = b;
    return nullptr;
  }
  garbage_collect(sp, detail::SizePolicy::segment_size(rounded));
  // The tight policy does not raise the peak of reserved memory while idle
  // pages of expandable ranges are cached: they go back first (their memory
  // is what the new segment is made of). Below the peak, growth is free, so
  // a steady state that fits under it never pays for the releases.
  if (tight && !expandable_for(kind)) {
    const std::size_t need = detail::SizePolicy::segment_size(rounded);
    const std::size_t now = reserved_total_.load();
    const std::size_t peak = peak_reserved_.load();
    if (now + need > peak) make_room(sp, now + need - peak, nullptr, 0, 0);
  }
  return grow(sp, kind, rounded, error);
}

Block* DevicePool::Impl::grow(SubPool& sp, PoolKind kind, std::size_t rounded, UpstreamResult* error) {
  if (expandable_for(kind)) {
    Block* f = grow_expandable(sp, rounded, error);
    if (f || !error->ok()) return f;
    // No virtual memory after all (refused), or the range is full: ordinary
    // segments.
  }
  const std::size_t size = detail::SizePolicy::segment_size(rounded);
  DevicePtr base = 0;
  // A stream's sub-pool takes memory the way the application's
  // cudaMallocAsync would have, so a device reset spares it as it would
  // have spared theirs (upstream.h).
  const bool stream_memory = sp.stream_ordered && stream_ordered_segments_;
  {
    std::lock_guard lock(upstream_mu_);
    *error = stream_memory ? upstream_.allocate_stream_ordered(size, sp.stream, &base)
                           : upstream_.allocate(size, &base);
    if (!error->ok()) return nullptr;
    upstream_allocs_.fetch_add(1, std::memory_order_relaxed);
    if (observer_) observer_->on_segment_alloc(device_, base, size);
  }
  Segment* seg = new_segment();
  if (seg) {
    seg->range.base.store(base, std::memory_order_release);
    seg->range.size.store(size, std::memory_order_release);
    seg->kind = kind;
    seg->stream_ordered_memory = stream_memory;
  }
  if (!seg || !register_segment(seg)) {
    // Out of host memory for our own records: give the segment back.
    std::lock_guard lock(upstream_mu_);
    if (observer_) observer_->on_segment_free(device_, base, size);
    if (stream_memory) upstream_.release_stream_ordered(base, size);
    else upstream_.release(base, size);
    upstream_frees_.fetch_add(1, std::memory_order_relaxed);
    if (seg) recycle_segment(seg);
    *error = UpstreamResult::out_of_memory(upstream_.out_of_memory_code());
    return nullptr;
  }
  detail::attach_segment(sp, seg);
  note_reserved(static_cast<std::ptrdiff_t>(size));
  return detail::add_free_tail(sp, seg, base, size);
}

// ------------------------------------------------------------------ frees

FreeResult DevicePool::Impl::free(DevicePtr ptr, bool stream_ordered, StreamHandle stream) {
  if (ptr == 0) return FreeResult{};
  std::unique_lock<FutexLock> lock;
  Segment* seg = nullptr;
  SubPool* sp = lock_owner(ptr, lock, &seg);
  if (!sp) return FreeResult{};
  Block* b = sp->live.find(ptr);
  if (!b) return FreeResult{FreeStatus::invalid_pointer, 0, 0};
  const FreeResult result{FreeStatus::ok, b->requested, b->size, b->stream_ordered};
  detail::unaccount_live(*sp, b);
  if (sp->orphan) {
    // Nothing allocates here any more; the memory goes back once its segment
    // is empty (the upstream's release waits for the device).
    detail::make_free(*sp, b, sync_begun_.load() + 1);
    if (detail::segment_is_free(seg)) {
      UpstreamResult ignored;
      release_segment(*sp, seg, &ignored);
    }
  } else if (stream_ordered && sp->stream_ordered && sp->stream == stream) {
    // Stream order protects it: later work on this stream runs after the
    // work that used it. Its pages stay busy until an ordering or a
    // synchronisation begun after now has completed.
    detail::make_free(*sp, b, sync_begun_.load(std::memory_order_relaxed) + 1);
  } else if (stream_ordered) {
    // Freed in another stream's order: reusable here once that stream has
    // reached this point.
    FenceHandle fence = 0;
    UpstreamResult recorded;
    {
      std::lock_guard up(upstream_mu_);
      recorded = upstream_.record_fence(stream, &fence);
    }
    const std::uint64_t ticket = sync_begun_.load();
    if (recorded.ok()) {
      detail::make_fence_pending(*sp, b, fence);
      b->ticket = ticket;
    } else {
      detail::make_sync_pending(*sp, b, ticket);
    }
  } else {
    // cudaFree: device work issued before this call may still use the block.
    detail::make_sync_pending(*sp, b, sync_begun_.load());
  }
  return result;
}

// ------------------------------------------------------- queries and admin

bool DevicePool::Impl::owns(DevicePtr ptr) const {
  return segment_map_.find(ptr, [](Segment* s) -> const detail::SegmentRange& { return s->range; }) != nullptr;
}

bool DevicePool::Impl::find(DevicePtr ptr, BlockInfo* info) const {
  std::unique_lock<FutexLock> lock;
  Segment* seg = nullptr;
  SubPool* sp = lock_owner(ptr, lock, &seg);
  if (!sp) return false;
  const Block* b = sp->live.find(ptr);
  if (!b) return false;
  *info = BlockInfo{b->requested, b->size, b->stream_ordered, sp->stream_ordered ? sp->stream : 0};
  return true;
}

Containing DevicePool::Impl::find_containing(DevicePtr ptr, ContainingBlock* out) const {
  std::unique_lock<FutexLock> lock;
  Segment* seg = nullptr;
  SubPool* sp = lock_owner(ptr, lock, &seg);
  if (!sp) return Containing::not_owned;
  for (const Block* b = seg->first; b; b = b->next) {
    if (ptr < b->addr || ptr >= b->addr + b->size) continue;
    if (b->state != detail::BlockState::allocated) return Containing::not_live;
    out->base = b->addr;
    out->size = b->requested;
    out->segment_base = seg->base();
    out->shareable = !seg->expandable && !seg->stream_ordered_memory && b->addr == seg->base();
    return Containing::live;
  }
  return Containing::not_live;
}

std::size_t DevicePool::Impl::block_size_for(std::size_t size) const {
  const std::size_t rounded = policy_.round(size);
  if (rounded == 0) return 0;
  detail::Segment fresh;
  fresh.kind = kind_for(rounded);
  fresh.expandable = expandable_for(fresh.kind);
  const std::size_t segment = detail::SizePolicy::segment_size(rounded);
  return policy_.should_split(&fresh, segment, rounded) ? rounded : segment;
}

std::uint64_t DevicePool::Impl::sync_ticket() { return sync_begun_.fetch_add(1) + 1; }

void DevicePool::Impl::device_synchronized(std::uint64_t ticket) {
  for (std::atomic<std::uint64_t>* mark : {&reuse_done_, &sync_done_}) {
    std::uint64_t done = mark->load();
    while (done < ticket && !mark->compare_exchange_weak(done, ticket)) {
    }
  }
}

MemoryInfo DevicePool::Impl::application_memory_info(std::size_t driver_free, std::size_t driver_total) const {
  const PoolStats s = stats();
  return MemoryInfo{std::min(driver_total, saturating_add(driver_free, s.cached_free)), driver_total};
}

PoolStats DevicePool::Impl::stats() const {
  PoolStats s;
  for_each_sub_pool([&s](SubPool& sp) {
    s.allocated += sp.allocated.get();
    s.requested += sp.requested.get();
    s.reserved += sp.reserved.get();
    s.pending_free += sp.pending.get();
    s.free_blocks += sp.free_blocks.get();
    s.inactive_split += sp.inactive_split.get();
    s.live_blocks += sp.live_blocks.get();
    s.segments += sp.segment_count.get();
    s.largest_free = std::max({s.largest_free, sp.largest[0].get(), sp.largest[1].get()});
  });
  // Counters of different sub-pools are read at slightly different moments
  // while other threads run; keep the derived figures consistent.
  s.reserved = std::max(s.reserved, s.allocated + s.pending_free);
  s.cached_free = s.reserved - s.allocated;
  // In expandable segments a free block may be partly unmapped; what can be
  // handed out without new memory is never more than the cached free bytes.
  s.largest_free = std::min(s.largest_free, s.cached_free - s.pending_free);
  s.peak_reserved = std::max(peak_reserved_.load(std::memory_order_relaxed), s.reserved);
  s.upstream_allocs = upstream_allocs_.load(std::memory_order_relaxed);
  s.upstream_frees = upstream_frees_.load(std::memory_order_relaxed);
  s.synchronizes = synchronizes_.load(std::memory_order_relaxed);
  s.orderings = orderings_made_.load(std::memory_order_relaxed);
  s.ooms = ooms_.load(std::memory_order_relaxed);
  return s;
}

std::size_t DevicePool::Impl::stream_ordered_reserved() const {
  std::size_t reserved = 0;
  for_each_sub_pool([&reserved](SubPool& sp) {
    if (sp.stream_ordered) reserved += sp.reserved.get();
  });
  return reserved;
}

std::string DevicePool::Impl::check_invariants() const {
  std::string problem;
  std::size_t reserved = 0;
  for_each_sub_pool([&](SubPool& sp) {
    std::lock_guard lock(sp.mu);
    if (problem.empty()) problem = detail::check_sub_pool(sp);
    reserved += sp.reserved.get();
    for (Segment* seg = sp.segments; seg && problem.empty(); seg = seg->next_in_pool) {
      if (seg->size() == 0) continue;  // an expandable range not grown yet
      if (!owns(seg->base()) || !owns(seg->base() + seg->size() - 1))
        problem = "segment missing from the address map";
    }
  });
  if (problem.empty() && reserved != reserved_total_.load())
    problem = "device reserved total disagrees with the sub-pools";
  return problem;
}

// ---------------------------------------------------------------- records

Segment* DevicePool::Impl::new_segment() {
  std::lock_guard lock(segments_mu_);
  if (!spare_segments_) {
    constexpr std::size_t kChunk = 64;
    std::unique_ptr<Segment[]> chunk(new (std::nothrow) Segment[kChunk]);
    if (!chunk) return nullptr;
    for (std::size_t i = 0; i < kChunk; ++i) {
      chunk[i].next_record = spare_segments_;
      spare_segments_ = &chunk[i];
    }
    segment_chunks_.push_back(std::move(chunk));
  }
  Segment* seg = spare_segments_;
  spare_segments_ = seg->next_record;
  seg->next_record = nullptr;
  seg->used = 0;
  seg->first = nullptr;
  seg->prev_in_pool = seg->next_in_pool = nullptr;
  seg->expandable = false;
  seg->mapped = 0;
  seg->va_size = 0;
  seg->page_size = 0;
  seg->pages.clear();
  seg->page_busy.clear();
  seg->retiring.clear();
  seg->retiring_pages = 0;
  seg->runs.clear();
  seg->kind = detail::kLarge;
  seg->stream_ordered_memory = false;
  return seg;
}

void DevicePool::Impl::recycle_segment(Segment* seg) {
  std::lock_guard lock(segments_mu_);
  seg->range.size.store(0, std::memory_order_release);
  seg->next_record = spare_segments_;
  spare_segments_ = seg;
}

bool DevicePool::Impl::register_segment(Segment* seg) {
  std::lock_guard lock(segments_mu_);
  return segment_map_.insert(seg, seg->base(), seg->size());
}

void DevicePool::Impl::note_reserved(std::ptrdiff_t delta) {
  if (delta < 0) {
    reserved_total_.fetch_sub(static_cast<std::size_t>(-delta));
    return;
  }
  const std::size_t now = reserved_total_.fetch_add(static_cast<std::size_t>(delta)) + static_cast<std::size_t>(delta);
  std::size_t peak = peak_reserved_.load();
  while (peak < now && !peak_reserved_.compare_exchange_weak(peak, now)) {
  }
}

std::size_t DevicePool::Impl::device_total() {
  std::lock_guard lock(upstream_mu_);
  if (device_total_ == 0) {
    std::size_t free_bytes = 0, total = 0;
    if (upstream_.memory_info(&free_bytes, &total).ok()) device_total_ = total;
  }
  return device_total_;
}

// ------------------------------------------------------------ public shell

DevicePool::DevicePool(Upstream& upstream, const PoolConfig& config, int device, PoolObserver* observer)
    : impl_(std::make_unique<Impl>(upstream, config, device, observer)) {}
DevicePool::~DevicePool() = default;
Allocation DevicePool::allocate(std::size_t size) { return impl_->allocate(size, false, 0); }
Allocation DevicePool::allocate_async(std::size_t size, StreamHandle stream) {
  return impl_->allocate(size, true, stream);
}
FreeResult DevicePool::free(DevicePtr ptr) { return impl_->free(ptr, false, 0); }
FreeResult DevicePool::free_async(DevicePtr ptr, StreamHandle stream) { return impl_->free(ptr, true, stream); }
bool DevicePool::owns(DevicePtr ptr) const { return impl_->owns(ptr); }
bool DevicePool::find(DevicePtr ptr, BlockInfo* info) const { return impl_->find(ptr, info); }
Containing DevicePool::find_containing(DevicePtr ptr, ContainingBlock* out) const {
  return impl_->find_containing(ptr, out);
}
std::size_t DevicePool::block_size_for(std::size_t size) const { return impl_->block_size_for(size); }
std::uint64_t DevicePool::sync_ticket() const { return impl_->sync_ticket(); }
void DevicePool::device_synchronized(std::uint64_t ticket) { impl_->device_synchronized(ticket); }
void DevicePool::stream_destroyed(StreamHandle stream) { impl_->stream_destroyed(stream); }
MemoryInfo DevicePool::application_memory_info(std::size_t driver_free, std::size_t driver_total) const {
  return impl_->application_memory_info(driver_free, driver_total);
}
UpstreamResult DevicePool::release_cached() { return impl_->release_cached(); }
void DevicePool::device_reset() { impl_->device_reset(); }
PoolStats DevicePool::stats() const { return impl_->stats(); }
std::size_t DevicePool::stream_ordered_reserved() const { return impl_->stream_ordered_reserved(); }
const PoolConfig& DevicePool::config() const { return impl_->config(); }
int DevicePool::device() const { return impl_->device(); }
std::string DevicePool::check_invariants() const { return impl_->check_invariants(); }

}  // namespace cumemtrace::pool
