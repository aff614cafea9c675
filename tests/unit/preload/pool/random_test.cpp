// A randomized test of the pool: 120,000 operations (random sizes from 1 byte
// to beyond the device, device-wide and stream-ordered calls on several
// streams, every kind of free, synchronisations, fences completing, trims,
// destroyed streams, injected upstream errors, out-of-memory on a small fake
// device), checking after every step against a model:
// - no two live blocks overlap; alignment; block ≥ request;
// - allocated / requested / reserved / cached sums match the model and the
//   fake device;
// - complete coalescing and every structural invariant (check_invariants);
// - safety: no block is handed out while device work may still use it —
//   cudaFree'd memory only after a synchronisation (or an ordering of the
//   device, with an upstream that orders), stream-ordered frees on their own
//   stream at once and elsewhere only after their fence completed or an
//   ordering; and no page is unmapped while work may still use it (after a
//   synchronisation, or once an ordering made after its free completed).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <cmath>
#include <cstdio>

#include "cumemtrace/pool/device_pool.h"
#include "pool_test_support.h"

using namespace pool_test;

namespace {

constexpr int kSteps = 120'000;
constexpr StreamHandle kStreams[] = {0x10, 0x20, 0x30, 0x40};

struct Live {
  std::size_t size;
  std::size_t block;
  bool stream_ordered;
  StreamHandle stream;
};

// Memory freed while device work may still use it.
struct Hazard {
  enum Kind { device_wide, own_stream, fenced } kind;
  std::size_t size;
  StreamHandle stream;  // own_stream: the only stream that may reuse it; fenced: the fence's stream
  // An ordering of the device was made since the free: any later work runs
  // after the work that used it, so any stream may reuse it (its pages may
  // go only once that ordering completed, which clears the hazard).
  bool ordered = false;
};

class RandomRun {
 public:
  RandomRun(const char* conf, std::uint32_t seed, std::size_t vm_granularity = 0, bool ordering = false,
            bool aliasing = false)
      : up_(512 * MiB, vm_granularity, aliasing), pool_(up_, config_from(conf)), rng_(seed) {
    up_.ordering = ordering;
    // An aliasing move maps memory that queued work may still use at its
    // old address: that work's hazards come with it to the new address.
    up_.on_alias_map = [this](DevicePtr to, DevicePtr from, std::size_t size) {
      ++aliased_pages_;
      std::vector<std::pair<DevicePtr, Hazard>> moved;
      for (const auto& [h, hz] : hazards_) {
        const DevicePtr lo = std::max(h, from), hi = std::min(h + hz.size, from + size);
        if (lo < hi) moved.emplace_back(to + (lo - from), Hazard{hz.kind, hi - lo, hz.stream, hz.ordered});
      }
      clear_hazards(to, size);  // the address's earlier memory is gone
      for (const auto& [at, hz] : moved) hazards_[at] = hz;
    };
    up_.on_device_idle = [this] { hazards_.clear(); };
    up_.on_order = [this](FenceHandle) {
      for (auto& [p, hz] : hazards_) hz.ordered = true;
    };
    up_.on_unmap = [this](DevicePtr addr, std::size_t size) {
      auto it = hazards_.upper_bound(addr);
      if (it != hazards_.begin()) --it;
      for (; it != hazards_.end() && it->first < addr + size; ++it) {
        if (it->first + it->second.size <= addr) continue;
        ADD_FAILURE() << "step " << step_ << ": pages unmapped while work may still use them (hazard kind "
                      << it->second.kind << (it->second.ordered ? ", ordered" : "") << ")";
        return;
      }
    };
  }

  void run(int steps) {
    for (int step = 0; step < steps && !::testing::Test::HasFailure(); ++step) {
      step_ = step;
      const int dice = pick(0, 999);
      if (dice < 470 && live_bytes_ < 400 * MiB) allocate();
      else if (dice < 940) free_one();
      else if (dice < 970) complete_fences();
      else if (dice < 985) application_sync();
      else if (dice < 992) trim();
      else if (dice < 996) destroy_stream();
      else up_.fail_next_allocate = 999;
      check();
    }
    const PoolStats s = pool_.stats();
    std::printf("%d steps: %d allocations, %d out-of-memory, %d reuses of freed memory, %llu synchronisations, "
                "%llu segments obtained\n",
                steps, allocations_, ooms_, reuses_, static_cast<unsigned long long>(s.synchronizes),
                static_cast<unsigned long long>(s.upstream_allocs));
    EXPECT_GT(ooms_, 0) << "the run should reach out-of-memory";
    // (Hundreds suffice to exercise reuse; the tight policy gives other
    // sub-pools' free segments back at the peak, so fewer addresses recur.)
    EXPECT_GT(reuses_, 500) << "the run should reuse freed memory";
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::size_t random_size() {
    const int d = pick(0, 999);
    auto log_uniform = [this](double lo, double hi) {
      return static_cast<std::size_t>(std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng_)));
    };
    if (d < 600) return log_uniform(1, double(MiB) + 1);
    if (d < 900) return log_uniform(double(MiB), 10.0 * double(MiB));
    if (d < 990) return log_uniform(10.0 * double(MiB), 100.0 * double(MiB));
    return log_uniform(100.0 * double(MiB), 700.0 * double(MiB));  // may exceed the device
  }

  void allocate() {
    const std::size_t size = random_size();
    const bool stream_ordered = pick(0, 9) < 6;
    const StreamHandle stream = kStreams[pick(0, 3)];
    const bool error_armed = up_.fail_next_allocate != 0;
    const Allocation a = stream_ordered ? pool_.allocate_async(size, stream) : pool_.allocate(size);
    if (!a.ok()) {
      if (a.result.status == UpstreamStatus::error) {
        EXPECT_TRUE(error_armed);
        EXPECT_EQ(a.result.code, 999);
        return;
      }
      ++ooms_;
      check_oom(a, size);
      return;
    }
    if (error_armed && up_.fail_next_allocate == 0) ADD_FAILURE() << "an upstream error was swallowed";
    ASSERT_NE(a.ptr, 0u);
    ASSERT_EQ(a.ptr % 512, 0u) << "step " << step_;
    ASSERT_EQ(a.block % 512, 0u);
    ASSERT_GE(a.block, size);
    // No overlap with live neighbours.
    auto next = live_.lower_bound(a.ptr);
    if (next != live_.end()) {
      ASSERT_LE(a.ptr + a.block, next->first) << "overlap at step " << step_;
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second.block, a.ptr) << "overlap at step " << step_;
    }
    check_safe_to_reuse(a.ptr, a.block, stream_ordered, stream);
    live_[a.ptr] = Live{size, a.block, stream_ordered, stream};
    ++allocations_;
    live_bytes_ += a.block;
    live_requested_ += size;
  }

  // Drops the hazards over [p, p+size), keeping the parts outside.
  void clear_hazards(DevicePtr p, std::size_t size) {
    auto it = hazards_.upper_bound(p);
    if (it != hazards_.begin()) --it;
    while (it != hazards_.end() && it->first < p + size) {
      const DevicePtr h = it->first;
      const Hazard hz = it->second;
      if (h + hz.size <= p) {
        ++it;
        continue;
      }
      it = hazards_.erase(it);
      if (h < p) hazards_[h] = Hazard{hz.kind, p - h, hz.stream, hz.ordered};
      if (h + hz.size > p + size) hazards_[p + size] = Hazard{hz.kind, h + hz.size - p - size, hz.stream, hz.ordered};
      it = hazards_.lower_bound(p + size);
    }
  }

  void check_safe_to_reuse(DevicePtr p, std::size_t block, bool stream_ordered, StreamHandle stream) {
    auto it = hazards_.upper_bound(p);
    if (it != hazards_.begin()) --it;
    for (; it != hazards_.end() && it->first < p + block; ++it) {
      const Hazard& hz = it->second;
      if (it->first + hz.size <= p) continue;
      ++reuses_;
      // Work queued on the stream a block was freed in runs after the free:
      // it may reuse the block at once, whoever allocated it (a block the
      // ladder lent from another sub-pool is freed in its own stream's order).
      const bool ok = hz.ordered || (hz.kind != Hazard::device_wide && stream_ordered && stream == hz.stream);
      EXPECT_TRUE(ok) << "step " << step_ << ": memory reused before it was safe (hazard kind " << hz.kind
                      << ", freed on stream " << hz.stream << ", reused " << (stream_ordered ? "on stream " : "device-wide ")
                      << stream << ")";
    }
    clear_hazards(p, block);  // the parts outside the new block stay
  }

  void free_one() {
    if (live_.empty()) return;
    auto it = live_.begin();
    std::advance(it, pick(0, static_cast<int>(std::min<std::size_t>(live_.size() - 1, 64))));
    if (pick(0, 1)) it = std::prev(live_.end(), pick(1, static_cast<int>(std::min<std::size_t>(live_.size(), 64))));
    const DevicePtr p = it->first;
    const Live l = it->second;
    const int how = pick(0, 9);
    FreeResult r;
    Hazard hz{Hazard::device_wide, l.block, 0};
    if (how < 4) {
      r = pool_.free(p);
    } else {
      // Mostly on the allocating stream, sometimes on another.
      const StreamHandle s = (l.stream_ordered && how < 8) ? l.stream : kStreams[pick(0, 3)];
      r = pool_.free_async(p, s);
      // A block of a destroyed stream freed in a stream's order is free once
      // that stream got there, what cudaFreeAsync promises (the program
      // orders its uses before the free), never at once: the stream with
      // that handle now is another.
      const bool own = l.stream_ordered && s == l.stream && !destroyed_.count(p);
      hz = own ? Hazard{Hazard::own_stream, l.block, s} : Hazard{Hazard::fenced, l.block, s};
    }
    ASSERT_EQ(r.status, FreeStatus::ok) << "step " << step_;
    EXPECT_EQ(r.size, l.size);
    EXPECT_EQ(r.block, l.block);
    const FreeStatus twice = pool_.free(p).status;
    EXPECT_TRUE(twice == FreeStatus::invalid_pointer || (twice == FreeStatus::not_owned && !pool_.owns(p)))
        << "double free not caught at step " << step_ << " status " << int(twice) << " destroyed "
        << destroyed_.count(p);
    hazards_[p] = hz;
    live_.erase(p);
    destroyed_.erase(p);
    live_bytes_ -= l.block;
    live_requested_ -= l.size;
  }

  void complete_fences() {
    const StreamHandle s = kStreams[pick(0, 3)];
    up_.complete_stream(s);
    if (up_.ordering && pick(0, 1)) {
      // The device ran past every ordering made so far.
      up_.complete_orderings();
      for (auto it = hazards_.begin(); it != hazards_.end();) {
        if (it->second.ordered) it = hazards_.erase(it);
        else ++it;
      }
    }
    // The stream's queued work has all run: what was freed in its order,
    // fenced or its own, is idle.
    for (auto it = hazards_.begin(); it != hazards_.end();) {
      if (it->second.kind != Hazard::device_wide && it->second.stream == s) it = hazards_.erase(it);
      else ++it;
    }
  }

  void application_sync() {
    const std::uint64_t ticket = pool_.sync_ticket();
    up_.synchronize();  // clears the hazards through on_device_idle
    pool_.device_synchronized(ticket);
  }

  void trim() { EXPECT_TRUE(pool_.release_cached().ok()); }

  void destroy_stream() {
    const StreamHandle s = kStreams[pick(0, 3)];
    pool_.stream_destroyed(s);
    up_.forget_stream(s);
    // A later stream with the same handle is another stream: memory its
    // predecessor freed is not safe for it.
    for (auto& [p, hz] : hazards_)
      if (hz.kind == Hazard::own_stream && hz.stream == s) hz.kind = Hazard::device_wide;
    for (auto& [p, l] : live_)
      if (l.stream_ordered && l.stream == s) destroyed_.insert(p);
  }

  void check_oom(const Allocation& a, std::size_t size) {
    const OomReport& r = a.oom.value();
    EXPECT_EQ(a.result.code, kOomCode);
    EXPECT_EQ(r.size, size);
    EXPECT_GE(r.block, size);
    const PoolStats s = pool_.stats();
    EXPECT_EQ(r.reserved, s.reserved);
    EXPECT_EQ(r.allocated, s.allocated);
    EXPECT_EQ(r.cached_free, s.reserved - s.allocated);
    EXPECT_EQ(r.device_total, up_.capacity());
    EXPECT_EQ(r.device_free, up_.capacity() - up_.used);
    EXPECT_LE(r.largest_free, r.cached_free);
    const bool fragmentation = r.cached_free + r.device_free >= r.block;
    EXPECT_EQ(r.cause, fragmentation ? OomCause::fragmentation : OomCause::capacity);
    // The ladder synchronised and released everything it could, unless the
    // request was larger than the whole device (then it leaves the cache).
    if (r.block <= up_.capacity()) {
      EXPECT_EQ(s.pending_free, 0u);
    }
  }

  void check() {
    const std::string problem = pool_.check_invariants();
    ASSERT_EQ(problem, "") << "step " << step_;
    const PoolStats s = pool_.stats();
    ASSERT_EQ(s.allocated, live_bytes_) << "step " << step_;
    ASSERT_EQ(s.requested, live_requested_);
    ASSERT_EQ(s.live_blocks, live_.size());
    ASSERT_EQ(s.reserved, up_.used) << "step " << step_;
    ASSERT_EQ(s.cached_free, s.reserved - s.allocated);
    ASSERT_LE(s.pending_free, s.cached_free);
    ASSERT_LE(s.largest_free, s.cached_free - s.pending_free);
    ASSERT_TRUE(up_.violations.empty()) << up_.violations.front();
  }

  FakeUpstream up_;
  DevicePool pool_;
  std::mt19937 rng_;
  std::map<DevicePtr, Live> live_;
  std::map<DevicePtr, Hazard> hazards_;
  std::set<DevicePtr> destroyed_;  // live blocks of destroyed streams
  std::size_t live_bytes_ = 0, live_requested_ = 0;
  int step_ = 0, ooms_ = 0, reuses_ = 0, allocations_ = 0;

 public:
  std::uint64_t aliased_pages_ = 0;  // aliasing moves whose memory was mapped again
};

}  // namespace

TEST(PoolRandomTest, PyTorchPolicy) {
  RandomRun run("device_shards:2,segment_policy:pytorch", 20251121);
  run.run(kSteps);
}

TEST(PoolRandomTest, DefaultPolicy) {
  RandomRun run("", 99);
  run.run(kSteps / 2);
}

TEST(PoolRandomTest, ExpandableSegments) {
  RandomRun run("expandable_segments:true", 4242, 2 * MiB);
  run.run(kSteps / 2);
}

// The device ordered, never waited for (Upstream::order_device, as
// libcumemtrace.so's upstream does on a GPU): reuse after an ordering,
// pages given back only once an ordering after their free completed.
TEST(PoolRandomTest, ExpandableSegmentsOnAnOrderedDevice) {
  RandomRun run("expandable_segments:true", 31337, 2 * MiB, /*ordering=*/true);
  run.run(kSteps / 2);
}

// The same, with moves that take busy pages by aliasing (as
// libcumemtrace.so's upstream does): what queued work still uses at the old
// address is reused only where that is safe in device order, and the old
// address is unmapped only after that work.
TEST(PoolRandomTest, AliasingMovesOnAnOrderedDevice) {
  RandomRun run("expandable_segments:true", 27182, 2 * MiB, /*ordering=*/true, /*aliasing=*/true);
  run.run(kSteps / 2);
  EXPECT_GT(run.aliased_pages_, 100u) << "the run should move busy pages";
}

TEST(PoolRandomTest, WithOversizeRuleAndRounding) {
  RandomRun run("device_shards:1,max_split_size_mb:64,roundup_power2_divisions:4,garbage_collection_threshold:0.7",
                7);
  run.run(kSteps / 4);
}
