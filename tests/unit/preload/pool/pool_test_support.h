// A fake device for the pool's unit tests: a capacity, distinct addresses,
// fences the test completes by hand, an injectable failure, and a check that
// the pool only gives back what it got. Contract breaches are collected in
// `violations` rather than thrown, so a test can assert on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cumemtrace/pool/device_pool.h"
#include "cumemtrace/pool/pool_config.h"
#include "cumemtrace/pool/upstream.h"

namespace pool_test {

using namespace cumemtrace::pool;

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr int kOomCode = 2;

class FakeUpstream : public Upstream {
 public:
  explicit FakeUpstream(std::size_t capacity = kUnlimited, std::size_t vm_granularity = 0, bool aliasing = false)
      : aliasing(aliasing), capacity_(capacity), granularity_(vm_granularity) {}

  UpstreamResult allocate(std::size_t size, DevicePtr* ptr) override {
    ++allocate_calls;
    if (fail_next_allocate != 0) {
      const int code = fail_next_allocate;
      fail_next_allocate = 0;
      return UpstreamResult::failure(code);
    }
    if (!take(size)) return UpstreamResult::out_of_memory(kOomCode);
    *ptr = next_address(size);
    segments[*ptr] = size;
    return UpstreamResult::success();
  }

  UpstreamResult release(DevicePtr ptr, std::size_t size) override {
    ++release_calls;
    auto it = segments.find(ptr);
    if (it == segments.end() || it->second != size) {
      violations.push_back("release of a segment the upstream did not hand out");
      return UpstreamResult::failure(1);
    }
    segments.erase(it);
    used -= size;
    // The real cudaFree waits for the device: every earlier free is safe.
    device_idle();
    return UpstreamResult::success();
  }

  // Stream-ordered segments, when `stream_ordered` is set: kept apart in
  // `stream_segments` with the stream they were made on.
  bool has_stream_ordered_segments() override { return stream_ordered; }
  UpstreamResult allocate_stream_ordered(std::size_t size, StreamHandle stream, DevicePtr* ptr) override {
    ++allocate_calls;
    if (!take(size)) return UpstreamResult::out_of_memory(kOomCode);
    *ptr = next_address(size);
    stream_segments[*ptr] = {size, stream};
    return UpstreamResult::success();
  }
  UpstreamResult release_stream_ordered(DevicePtr ptr, std::size_t size) override {
    ++release_calls;
    auto it = stream_segments.find(ptr);
    if (it == stream_segments.end() || it->second.first != size) {
      violations.push_back("release of a stream-ordered segment the upstream did not hand out");
      return UpstreamResult::failure(1);
    }
    stream_segments.erase(it);
    used -= size;
    device_idle();
    return UpstreamResult::success();
  }

  // What a device reset does to this device: the context's memory
  // (allocate()'s segments) and its events go; stream-ordered segments and
  // mapped pages stay.
  void reset_device() {
    for (const auto& [ptr, size] : segments) used -= size;
    segments.clear();
    fences.clear();
  }

  UpstreamResult memory_info(std::size_t* free_bytes, std::size_t* total_bytes) override {
    *total_bytes = capacity_;
    *free_bytes = capacity_ == kUnlimited ? kUnlimited : capacity_ - used;
    return UpstreamResult::success();
  }

  UpstreamResult synchronize() override {
    ++synchronize_calls;
    device_idle();
    return UpstreamResult::success();
  }

  UpstreamResult record_fence(StreamHandle stream, FenceHandle* fence) override {
    *fence = next_fence++;
    fences[*fence] = Fence{stream, false};
    return UpstreamResult::success();
  }

  FenceState query_fence(FenceHandle fence) override {
    ++query_calls;
    auto it = fences.find(fence);
    if (it == fences.end()) {
      violations.push_back("query of an unknown or destroyed fence");
      return FenceState::error;
    }
    return it->second.complete ? FenceState::complete : FenceState::pending;
  }

  void destroy_fence(FenceHandle fence) override {
    if (fences.erase(fence) == 0) violations.push_back("destroy of an unknown fence");
  }

  std::size_t vm_granularity() override { return granularity_; }
  UpstreamResult reserve_range(std::size_t size, DevicePtr* base) override {
    if (!granularity_) return UpstreamResult::failure(1);
    *base = next_address(size);
    ranges[*base] = size;
    return UpstreamResult::success();
  }
  UpstreamResult release_range(DevicePtr base, std::size_t size) override {
    auto it = ranges.find(base);
    if (it == ranges.end() || it->second != size) {
      violations.push_back("release of a range the upstream did not reserve");
      return UpstreamResult::failure(1);
    }
    ranges.erase(it);
    return UpstreamResult::success();
  }
  UpstreamResult map(DevicePtr addr, std::size_t size) override {
    ++allocate_calls;
    if (refuse_maps != 0) return UpstreamResult::failure(refuse_maps);
    if (addr % granularity_ || size % granularity_) violations.push_back("unaligned map");
    // cuMemMap refuses a range that is mapped already (an alias not yet
    // unmapped, say).
    for (std::size_t at = 0; at < size; at += granularity_)
      if (covered(addr + at)) {
        violations.push_back("map over memory that is mapped");
        break;
      }
    // Memory a move kept serves first: only the rest is new.
    const std::size_t reused = std::min(kept, size);
    if (!take(size - reused)) return UpstreamResult::out_of_memory(kOomCode);
    kept -= reused;
    new_map_bytes += size - reused;
    mapped[addr] = size;
    // Kept memory is taken oldest first; the test hears where aliased
    // memory (still mapped at its old address for queued work) went.
    for (std::size_t at = 0; at < reused;) {
      KeptPiece& piece = kept_pieces.front();
      const std::size_t n = std::min(piece.size, reused - at);
      if (piece.from != 0 && on_alias_map) on_alias_map(addr + at, piece.from, n);
      if (piece.from != 0) piece.from += n;
      piece.size -= n;
      if (piece.size == 0) kept_pieces.erase(kept_pieces.begin());
      at += n;
    }
    return UpstreamResult::success();
  }
  UpstreamResult unmap(DevicePtr addr, std::size_t size) override {
    ++release_calls;
    // Any granularity-aligned part of mapped ranges may go.
    std::size_t left = size;
    DevicePtr at = addr;
    while (left) {
      auto it = mapped.upper_bound(at);
      if (it == mapped.begin()) break;
      --it;
      if (at >= it->first + it->second) break;
      const DevicePtr start = it->first;
      const std::size_t len = it->second;
      const std::size_t piece = std::min(left, start + len - at);
      mapped.erase(it);
      if (at > start) mapped[start] = at - start;
      if (at + piece < start + len) mapped[at + piece] = start + len - at - piece;
      at += piece;
      left -= piece;
    }
    if (left) violations.push_back("unmap of memory that is not mapped");
    // cuMemUnmap does not wait for queued work (pytorch/pytorch#196258): the
    // test says whether something may still use these pages.
    if (on_unmap) on_unmap(addr, size);
    used -= size - left;
    return UpstreamResult::success();
  }
  // A move: unmapped, its memory kept for the next map (no release, no
  // new memory then).
  UpstreamResult unmap_keep(DevicePtr addr, std::size_t size) override {
    const std::size_t before = used;
    const UpstreamResult r = unmap(addr, size);
    kept += before - used;
    kept_pieces.push_back(KeptPiece{0, before - used});
    used = before;
    return r;
  }
  void drop_kept() override {
    used -= kept;
    kept = 0;
    kept_pieces.clear();
  }
  std::size_t kept_bytes() override { return kept; }

  // Aliasing moves, when `aliasing` is set: the memory is kept, its mapping
  // here stays (in `aliases`) until unmap_alias, which the test checks like
  // any unmap (on_unmap: no queued work may use it any more).
  bool supports_aliasing() override { return aliasing; }
  UpstreamResult alias_keep(DevicePtr addr, std::size_t size) override {
    ++alias_calls;
    if (!aliasing) violations.push_back("alias_keep on an upstream without aliasing");
    if (addr % granularity_ || size % granularity_) violations.push_back("unaligned alias");
    for (std::size_t at = 0; at < size; at += granularity_) {
      if (!covered(addr + at)) violations.push_back("alias of memory that is not mapped");
      aliases.insert(addr + at);
    }
    kept += size;
    kept_pieces.push_back(KeptPiece{addr, size});
    return UpstreamResult::success();
  }
  UpstreamResult unmap_alias(DevicePtr addr, std::size_t size) override {
    for (std::size_t at = 0; at < size; at += granularity_)
      if (aliases.erase(addr + at) == 0) violations.push_back("unmap_alias of a page that is not an alias");
    const std::size_t before = used;
    const std::uint64_t calls = release_calls;
    const UpstreamResult r = unmap(addr, size);  // checks the hazards (on_unmap)
    used = before;  // the memory stays with its new mapping
    release_calls = calls;
    return r;
  }

  // Orderings (Upstream::order_device), when `ordering` is set: a fence that
  // completes with complete_orderings() or when the device is idle.
  UpstreamResult order_device(FenceHandle* fence) override {
    if (!ordering) return UpstreamResult::failure(1);
    ++order_calls;
    *fence = next_fence++;
    fences[*fence] = Fence{kOrderingStream, false};
    if (on_order) on_order(*fence);
    return UpstreamResult::success();
  }
  void complete_orderings() {
    for (auto& [id, f] : fences)
      if (f.stream == kOrderingStream) f.complete = true;
  }

  // The stream was destroyed: its fences complete when the device is idle,
  // not when a later stream that got the same handle finishes its work.
  void forget_stream(StreamHandle stream) {
    for (auto& [id, f] : fences)
      if (f.stream == stream) f.stream = kDeadStream;
  }

  // All queued device work of `stream` finished.
  void complete_stream(StreamHandle stream) {
    for (auto& [id, f] : fences)
      if (f.stream == stream) f.complete = true;
  }

  void set_capacity(std::size_t c) { capacity_ = c; }
  std::size_t capacity() const { return capacity_; }

  std::size_t used = 0;
  std::uint64_t allocate_calls = 0, release_calls = 0, synchronize_calls = 0, query_calls = 0, order_calls = 0;
  bool ordering = false;         // order_device() succeeds
  std::size_t kept = 0;          // bytes unmap_keep() kept for the next map
  struct KeptPiece {
    DevicePtr from;  // where aliased memory is still mapped; 0: unmapped (unmap_keep)
    std::size_t size;
  };
  std::vector<KeptPiece> kept_pieces;
  bool aliasing = false;          // supports_aliasing()
  std::set<DevicePtr> aliases;    // pages still mapped after alias_keep
  std::uint64_t alias_calls = 0;
  // Aliased memory still mapped at `from` was mapped again at `to`.
  std::function<void(DevicePtr to, DevicePtr from, std::size_t)> on_alias_map;
  std::size_t new_map_bytes = 0;  // bytes map() took as new memory (not kept)
  std::function<void(FenceHandle)> on_order;                // an ordering was made
  std::function<void(DevicePtr, std::size_t)> on_unmap;     // pages were unmapped
  int fail_next_allocate = 0;  // non-zero: the next allocate fails with this code
  int refuse_maps = 0;         // non-zero: every map fails with this code (VMM refused)
  bool stream_ordered = false;
  std::map<DevicePtr, std::size_t> segments;
  std::map<DevicePtr, std::pair<std::size_t, StreamHandle>> stream_segments;
  std::map<DevicePtr, std::size_t> ranges;
  std::map<DevicePtr, std::size_t> mapped;
  std::vector<std::string> violations;
  std::function<void()> on_device_idle;  // the test's safety model listens

 private:
  struct Fence {
    StreamHandle stream;
    bool complete;
  };
  static constexpr StreamHandle kDeadStream = ~StreamHandle{0};
  static constexpr StreamHandle kOrderingStream = ~StreamHandle{0} - 1;

  // Whether a mapped range covers addr.
  bool covered(DevicePtr addr) const {
    auto it = mapped.upper_bound(addr);
    if (it == mapped.begin()) return false;
    --it;
    return addr < it->first + it->second;
  }

  bool take(std::size_t size) {
    if (capacity_ != kUnlimited && used + size > capacity_) return false;
    used += size;
    return true;
  }
  DevicePtr next_address(std::size_t size) {
    const DevicePtr p = next_address_;
    // A 2 MiB gap after each range so that neighbours are never contiguous
    // (a pool must not merge across segments).
    next_address_ += (size + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) + 2 * MiB;
    return p;
  }
  void device_idle() {
    for (auto& [id, f] : fences) f.complete = true;
    if (on_device_idle) on_device_idle();
  }

  std::size_t capacity_;
  std::size_t granularity_;
  DevicePtr next_address_ = DevicePtr{0x7f0000000000};
  FenceHandle next_fence = 1;
  std::map<FenceHandle, Fence> fences;
};

// Records the observer's callbacks.
struct RecordingObserver : PoolObserver {
  struct Event {
    char kind;  // 'a' segment_alloc, 'f' segment_free
    DevicePtr ptr;
    std::size_t size;
  };
  std::vector<Event> events;
  std::vector<OomReport> ooms;
  std::size_t reserved = 0;
  void on_segment_alloc(int, DevicePtr ptr, std::size_t size) override {
    events.push_back({'a', ptr, size});
    reserved += size;
  }
  void on_segment_free(int, DevicePtr ptr, std::size_t size) override {
    events.push_back({'f', ptr, size});
    reserved -= size;
  }
  void on_oom(const OomReport& r) override { ooms.push_back(r); }
};

inline PoolConfig config_from(const char* text) {
  PoolConfigParse p = parse_pool_config(text);
  return p.config;
}

}  // namespace pool_test
