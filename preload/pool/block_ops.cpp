#include "block_ops.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <string>

namespace cumemtrace::pool::detail {
namespace {

// Larger requests cannot be met by any device and would overflow rounding.
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// The free index is ordered by (size, address). A block whose key changed
// (split or merge) keeps its node when it still sorts between its
// neighbours, which is the usual case: the remainder of the largest free
// block stays the largest. Only otherwise is it re-inserted. A key that only
// shrank (a split: smaller size) can only have passed its predecessor, one
// that only grew (a merge: larger size) its successor, so one neighbour is
// enough to look at: each look is a walk in the tree, on the hit path.
void reposition_shrunk(FreeSet& set, Block* b) {
  const auto it = b->where;
  if (it == set.begin() || BlockOrder{}(*std::prev(it), b)) return;
  set.erase(it);
  b->where = set.insert(b).first;
}

void reposition_grown(FreeSet& set, Block* b) {
  const auto it = b->where;
  const auto next = std::next(it);
  if (next == set.end() || BlockOrder{}(b, *next)) return;
  set.erase(it);
  b->where = set.insert(b).first;
}

}  // namespace

// Inactive split bytes: free space inside segments that still hold live or
// pending blocks (it cannot be released, only reused).
void set_used(SubPool& sp, Segment* seg, std::size_t used) {
  const std::size_t backed = seg->backed();
  const std::size_t before = seg->used ? backed - seg->used : 0;
  const std::size_t after = used ? backed - used : 0;
  sp.inactive_split.set(sp.inactive_split.get() - before + after);
  seg->used = used;
}

void change_mapped(SubPool& sp, Segment* seg, std::ptrdiff_t delta) {
  const std::size_t before = seg->used ? seg->backed() - seg->used : 0;
  seg->mapped += static_cast<std::size_t>(delta);
  const std::size_t after = seg->used ? seg->backed() - seg->used : 0;
  sp.inactive_split.set(sp.inactive_split.get() - before + after);
  sp.reserved.set(sp.reserved.get() + static_cast<std::size_t>(delta));
}

std::size_t SizePolicy::round(std::size_t size) const {
  if (size > kMaxRequest) return 0;
  if (size <= kMinBlock) return kMinBlock;
  const std::size_t interval =
      size <= kSmallRequest
          ? 0
          : std::min<std::size_t>(PoolConfig::kRoundupIntervals - 1, std::bit_width(size - 1) - 20);
  const std::size_t divisions = config_.roundup_power2_divisions[interval];
  if (divisions > 1 && size > kMinBlock * divisions) {
    const std::size_t step = std::bit_floor(size) / std::bit_floor(divisions);
    return align_up(align_up(size, step), kMinBlock);
  }
  return align_up(size, kMinBlock);
}

std::size_t SizePolicy::segment_size(std::size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kMidRequest) return kMidSegment;
  return align_up(rounded, kLargeRounding);
}

bool SizePolicy::should_split(const Segment* seg, std::size_t block_size, std::size_t rounded) const {
  const std::size_t remainder = block_size - rounded;
  // In an expandable segment a remainder merges with later growth and its
  // pages can be unmapped, so even a sliver is worth keeping apart.
  if (seg->kind == kSmall || seg->expandable) return remainder >= kMinBlock;
  // A sliver of a large block is not worth its own block (it would only
  // serve small requests, which never come to large segments).
  return rounded < config_.max_split_size && remainder > kSmallRequest;
}

bool SizePolicy::may_use(std::size_t block_size, std::size_t rounded) const {
  const std::size_t limit = config_.max_split_size;
  if (limit == kUnlimited) return true;
  if (rounded < limit) return block_size < limit;
  return block_size - rounded < config_.max_non_split_rounding;
}

Block* best_fit(SubPool& sp, const SizePolicy& policy, PoolKind kind, std::size_t rounded) {
  FreeSet& set = sp.free_sets[kind];
  Block probe;
  probe.size = rounded;
  probe.addr = 0;
  auto it = set.lower_bound(&probe);
  if (it == set.end()) return nullptr;
  // The rule is monotone in the block size, so the smallest candidate
  // decides for all larger ones.
  return policy.may_use((*it)->size, rounded) ? *it : nullptr;
}

Block* take_block(SubPool& sp, const SizePolicy& policy, Block* f, std::size_t rounded,
                  std::size_t requested, bool stream_ordered) {
  Segment* seg = f->segment;
  FreeSet& set = sp.free_sets[seg->kind];
  const std::size_t taken_from = f->size;
  Block* b = nullptr;
  if (policy.should_split(seg, f->size, rounded)) {
    // The request takes the low end; the remainder keeps f's index node.
    b = sp.new_block();
    b->addr = f->addr;
    b->size = rounded;
    b->segment = seg;
    b->prev = f->prev;
    b->next = f;
    if (f->prev) f->prev->next = b;
    else seg->first = b;
    f->prev = b;
    f->addr += rounded;
    f->size -= rounded;
    reposition_shrunk(set, f);
    sp.free_bytes.sub(rounded);
  } else {
    set.erase(f->where);
    sp.free_blocks.sub(1);
    sp.free_bytes.sub(f->size);
    b = f;
  }
  b->state = BlockState::allocated;
  b->requested = requested;
  b->stream_ordered = stream_ordered;
  set_used(sp, seg, seg->used + b->size);
  sp.live.insert(b->addr, b);
  sp.allocated.add(b->size);
  sp.requested.add(requested);
  sp.live_blocks.add(1);
  // Smaller than the largest free block: that one is still there. (Only
  // otherwise is the index asked, which costs a walk to its end.)
  if (taken_from >= sp.largest[seg->kind].get()) sp.refresh_largest(seg->kind);
  return b;
}

Block* add_free_tail(SubPool& sp, Segment* seg, DevicePtr addr, std::size_t size) {
  Block* last = seg->first;
  while (last && last->next) last = last->next;
  FreeSet& set = sp.free_sets[seg->kind];
  sp.free_bytes.add(size);
  Block* result = nullptr;
  if (last && last->state == BlockState::free) {
    last->size += size;
    reposition_grown(set, last);
    result = last;
  } else {
    Block* b = sp.new_block();
    b->addr = addr;
    b->size = size;
    b->segment = seg;
    b->prev = last;
    if (last) last->next = b;
    else seg->first = b;
    b->state = BlockState::free;
    b->where = set.insert(b).first;
    sp.free_blocks.add(1);
    result = b;
  }
  // Only blocks no larger than the result left the index.
  sp.raise_largest(seg->kind, result->size);
  return result;
}

Block* split_free(SubPool& sp, Block* f, DevicePtr at) {
  if (at == f->addr) return f;
  FreeSet& set = sp.free_sets[f->segment->kind];
  Block* n = sp.new_block();
  n->addr = at;
  n->size = f->addr + f->size - at;
  n->segment = f->segment;
  n->prev = f;
  n->next = f->next;
  if (f->next) f->next->prev = n;
  f->next = n;
  n->state = BlockState::free;
  f->size = at - f->addr;
  reposition_shrunk(set, f);
  n->where = set.insert(n).first;
  sp.free_blocks.add(1);
  // The largest free block did not grow; it may have been f.
  sp.refresh_largest(f->segment->kind);
  return n;
}

void stamp_pages(Segment* seg, DevicePtr addr, std::size_t size, std::uint64_t busy_until) {
  if (!seg->expandable || busy_until == 0 || size == 0) return;
  const DevicePtr base = seg->base();
  const std::size_t g = seg->page_size;
  for (std::size_t p = (addr - base) / g, end = (addr + size - base + g - 1) / g; p < end; ++p)
    seg->page_busy[p] = std::max(seg->page_busy[p], busy_until);
}

Block* make_free(SubPool& sp, Block* b, std::uint64_t busy_until) {
  Segment* seg = b->segment;
  stamp_pages(seg, b->addr, b->size, busy_until);
  FreeSet& set = sp.free_sets[seg->kind];
  set_used(sp, seg, seg->used - b->size);
  sp.free_bytes.add(b->size);
  Block* p = b->prev && b->prev->state == BlockState::free ? b->prev : nullptr;
  Block* n = b->next && b->next->state == BlockState::free ? b->next : nullptr;
  Block* result = nullptr;
  if (p && n) {
    set.erase(n->where);
    sp.free_blocks.sub(1);
    p->size += b->size + n->size;
    p->next = n->next;
    if (n->next) n->next->prev = p;
    sp.recycle(b);
    sp.recycle(n);
    reposition_grown(set, p);
    result = p;
  } else if (p) {
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    sp.recycle(b);
    reposition_grown(set, p);
    result = p;
  } else if (n) {
    n->addr = b->addr;
    n->size += b->size;
    n->prev = b->prev;
    if (b->prev) b->prev->next = n;
    else seg->first = n;
    sp.recycle(b);
    reposition_grown(set, n);
    result = n;
  } else {
    b->state = BlockState::free;
    b->where = set.insert(b).first;
    sp.free_blocks.add(1);
    result = b;
  }
  // Only blocks no larger than the result left the index.
  sp.raise_largest(seg->kind, result->size);
  return result;
}

void unaccount_live(SubPool& sp, Block* b) {
  sp.live.erase(b->addr);
  sp.allocated.sub(b->size);
  sp.requested.sub(b->requested);
  sp.live_blocks.sub(1);
}

void make_sync_pending(SubPool& sp, Block* b, std::uint64_t ticket) {
  b->state = BlockState::pending;
  b->ticket = ticket;
  b->fenced = false;
  b->pending_next = nullptr;
  if (sp.pending_tail) sp.pending_tail->pending_next = b;
  else sp.pending_head = b;
  sp.pending_tail = b;
  sp.pending_bytes[b->segment->kind] += b->size;
  sp.pending.add(b->size);
}

void make_fence_pending(SubPool& sp, Block* b, FenceHandle fence) {
  b->state = BlockState::pending;
  b->fence = fence;
  b->fenced = true;
  sp.fenced.push_back(b);
  sp.pending_bytes[b->segment->kind] += b->size;
  sp.pending.add(b->size);
}

std::size_t reclaim_synced(SubPool& sp, std::uint64_t ordered) {
  std::size_t bytes = 0;
  while (sp.pending_head && sp.pending_head->ticket < ordered) {
    Block* b = sp.pending_head;
    sp.pending_head = b->pending_next;
    if (!sp.pending_head) sp.pending_tail = nullptr;
    sp.pending_bytes[b->segment->kind] -= b->size;
    sp.pending.sub(b->size);
    bytes += b->size;
    make_free(sp, b, b->ticket + 1);
  }
  return bytes;
}

void detach_free_segment(SubPool& sp, Segment* seg) {
  Block* b = seg->first;
  sp.free_sets[seg->kind].erase(b->where);
  sp.free_blocks.sub(1);
  sp.free_bytes.sub(b->size);
  if (seg->prev_in_pool) seg->prev_in_pool->next_in_pool = seg->next_in_pool;
  else sp.segments = seg->next_in_pool;
  if (seg->next_in_pool) seg->next_in_pool->prev_in_pool = seg->prev_in_pool;
  seg->prev_in_pool = seg->next_in_pool = nullptr;
  sp.reserved.sub(seg->backed());
  sp.segment_count.sub(1);
  sp.refresh_largest(seg->kind);
}

void attach_segment(SubPool& sp, Segment* seg) {
  seg->prev_in_pool = nullptr;
  seg->next_in_pool = sp.segments;
  if (sp.segments) sp.segments->prev_in_pool = seg;
  sp.segments = seg;
  sp.reserved.add(seg->backed());
  sp.segment_count.add(1);
  seg->owner.store(&sp, std::memory_order_release);
}

// Pages and runs agree, live and pending blocks are fully mapped.
std::string check_expandable(const Segment* seg) {
  const DevicePtr base = seg->base();
  const std::size_t page = seg->pages.empty() ? 0 : seg->size() / seg->pages.size();
  if (seg->page_busy.size() != seg->pages.size()) return "expandable segment's busy stamps do not match its pages";
  if (page == 0 || seg->size() % seg->pages.size() != 0) {
    if (seg->size() == 0 && seg->mapped == 0) return {};
    return "expandable segment's page table does not match its extent";
  }
  std::size_t mapped = 0;
  for (bool m : seg->pages) mapped += m ? page : 0;
  if (mapped != seg->mapped) return "expandable segment's mapped bytes disagree with its pages";
  if (seg->retiring.size() != seg->pages.size()) return "expandable segment's retiring flags do not match its pages";
  std::size_t retiring = 0;
  for (std::size_t p = 0; p < seg->pages.size(); ++p) {
    if (!seg->retiring[p]) continue;
    if (seg->pages[p]) return "a page is both mapped and retiring";
    ++retiring;
  }
  if (retiring != seg->retiring_pages) return "expandable segment's retiring count disagrees with its flags";
  std::size_t in_runs = 0;
  DevicePtr end_of_previous = 0;
  for (const auto& [addr, len] : seg->runs) {
    if (addr < end_of_previous || (addr - base) % page || len % page) return "mapped runs overlap or are misaligned";
    for (std::size_t p = (addr - base) / page; p < (addr - base + len) / page; ++p)
      if (!seg->pages[p]) return "a mapped run covers an unmapped page";
    in_runs += len;
    end_of_previous = addr + len;
  }
  if (in_runs != seg->mapped) return "mapped runs do not cover the mapped pages";
  for (const Block* b = seg->first; b; b = b->next) {
    if (b->state == BlockState::free) continue;
    for (std::size_t p = (b->addr - base) / page; p < (b->addr + b->size - base + page - 1) / page; ++p)
      if (!seg->pages[p]) return "a live block lies on an unmapped page";
  }
  return {};
}

std::string check_sub_pool(SubPool& sp) {
  auto fail = [](const char* what, DevicePtr at) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s at 0x%llx", what, static_cast<unsigned long long>(at));
    return std::string(buf);
  };
  std::size_t reserved = 0, allocated = 0, requested = 0, free_bytes = 0, free_blocks = 0,
              pending = 0, inactive = 0, live = 0, segments = 0, largest[2] = {0, 0};
  for (Segment* seg = sp.segments; seg; seg = seg->next_in_pool) {
    ++segments;
    if (seg->owner.load() != &sp) return fail("segment owned by another sub-pool", seg->base());
    reserved += seg->backed();
    DevicePtr at = seg->base();
    std::size_t used = 0;
    const Block* prev = nullptr;
    for (const Block* b = seg->first; b; prev = b, b = b->next) {
      if (b->prev != prev) return fail("broken neighbour links", b->addr);
      if (b->segment != seg) return fail("block points to another segment", b->addr);
      if (b->addr != at) return fail("blocks do not tile their segment", b->addr);
      if (b->addr % kMinBlock || b->size % kMinBlock || b->size == 0) return fail("misaligned block", b->addr);
      at += b->size;
      if (b->state == BlockState::free) {
        if (prev && prev->state == BlockState::free) return fail("two adjacent free blocks", b->addr);
        auto& set = sp.free_sets[seg->kind];
        auto it = set.find(const_cast<Block*>(b));
        if (it == set.end() || it != b->where) return fail("free block missing from the index", b->addr);
        free_bytes += b->size;
        ++free_blocks;
        largest[seg->kind] = std::max(largest[seg->kind], b->size);
      } else {
        used += b->size;
        if (b->state == BlockState::allocated) {
          if (sp.live.find(b->addr) != b) return fail("live block missing from the live table", b->addr);
          if (b->requested > b->size) return fail("request larger than its block", b->addr);
          allocated += b->size;
          requested += b->requested;
          ++live;
        } else {
          pending += b->size;
        }
      }
    }
    if (at != seg->base() + seg->size()) return fail("blocks do not cover their segment", seg->base());
    if (used != seg->used) return fail("segment's used bytes are wrong", seg->base());
    if (!seg->expandable && seg->backed() != seg->size()) return fail("segment's backed bytes are wrong", seg->base());
    if (seg->expandable) {
      const std::string e = check_expandable(seg);
      if (!e.empty()) return e;
    }
    if (used) inactive += seg->backed() - used;
  }
  std::size_t pending_listed = 0;
  for (const Block* b = sp.pending_head; b; b = b->pending_next) {
    if (b->state != BlockState::pending || b->fenced) return fail("pending list holds a non-pending block", b->addr);
    pending_listed += b->size;
  }
  for (const Block* b : sp.fenced) {
    if (b->state != BlockState::pending || !b->fenced) return fail("fence list holds a non-pending block", b->addr);
    pending_listed += b->size;
  }
  if (pending_listed != pending) return fail("pending lists disagree with the segments", 0);
  if (sp.pending_bytes[0] + sp.pending_bytes[1] != pending) return fail("pending bytes per kind are wrong", 0);
  if (sp.free_sets[0].size() + sp.free_sets[1].size() != free_blocks) return fail("free index holds stale blocks", 0);
  if (sp.live.size() != live) return fail("live table holds stale blocks", 0);
  if (reserved != sp.reserved.get()) return fail("reserved counter is wrong", 0);
  if (allocated != sp.allocated.get()) return fail("allocated counter is wrong", 0);
  if (requested != sp.requested.get()) return fail("requested counter is wrong", 0);
  if (free_bytes != sp.free_bytes.get()) return fail("free bytes counter is wrong", 0);
  if (free_blocks != sp.free_blocks.get()) return fail("free blocks counter is wrong", 0);
  if (pending != sp.pending.get()) return fail("pending counter is wrong", 0);
  if (inactive != sp.inactive_split.get()) return fail("inactive split counter is wrong", 0);
  if (live != sp.live_blocks.get()) return fail("live blocks counter is wrong", 0);
  if (segments != sp.segment_count.get()) return fail("segment counter is wrong", 0);
  for (int k = 0; k < 2; ++k)
    if (largest[k] != sp.largest[k].get()) return fail("largest free block is wrong", 0);
  if (reserved < allocated + pending) return fail("reserved < allocated + pending", 0);
  if (!sp.expandable && reserved != allocated + pending + free_bytes)
    return fail("reserved ≠ allocated + pending + free", 0);
  return {};
}

}  // namespace cumemtrace::pool::detail
