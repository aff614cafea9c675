// Fragmentation over time: the metrics of DESIGN.md, their worst moments, a
// bounded time series and the state at the end.
//
//   reserved_unused        1 - allocated/reserved (live allocations vs live segments)
//   cached_free_scattered  1 - largest_free/cached_free (from `pool` and `oom` events)
//   inactive_split_bytes   from `pool` events
//   rounding_waste         1 - requested/block over live allocations that carry `block`
//
// A ratio is largest when little is at stake (two tiny free blocks are 50%
// scattered), so the worst moment of a metric is the one that wasted the most
// bytes: reserved - allocated, cached_free - largest_free, inactive split
// bytes, block - requested. Its `value` is the ratio at that moment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace cumemtrace::analyzer {

struct FragmentationMoment {
  bool seen = false;
  double value = 0;         // the ratio (bytes for inactive_split_bytes)
  std::uint64_t bytes = 0;  // what made it the worst
  std::uint64_t t = 0;
  int dev = 0;
};

struct FragmentationWorst {
  FragmentationMoment reserved_unused;
  FragmentationMoment cached_free_scattered;
  FragmentationMoment inactive_split_bytes;
  FragmentationMoment rounding_waste;
};

// One point of the time series: each metric's maximum over a time bucket
// (and over devices).
struct FragmentationPoint {
  std::uint64_t t = 0;  // start of the bucket
  double reserved_unused = 0;
  double cached_free_scattered = 0;
  std::uint64_t inactive_split_bytes = 0;
  double rounding_waste = 0;
};

// The allocator state a `pool` event reports, kept per device for at_end.
struct PoolSample {
  std::uint64_t t = 0;
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t cached_free = 0;
  std::uint64_t largest_free = 0;
  std::uint64_t inactive_split = 0;
};

double ratio_unused(std::uint64_t used, std::uint64_t whole);  // 1 - used/whole, 0 when whole is 0

class FragmentationTracker {
 public:
  static constexpr std::size_t kMaxSeriesPoints = 256;

  // The device's allocated and reserved bytes after an allocation (cheap:
  // one comparison).
  void note_unused(int dev, std::uint64_t allocated, std::uint64_t reserved, std::uint64_t t) {
    if (reserved > allocated && reserved - allocated > worst_.reserved_unused.bytes) {
      set(worst_.reserved_unused, 1.0 - static_cast<double>(allocated) / static_cast<double>(reserved),
          reserved - allocated, t, dev);
    }
  }
  // The live allocations that carry `block` on `dev` grew.
  void note_rounding(int dev, std::uint64_t requested, std::uint64_t blocks, std::uint64_t t) {
    if (blocks > requested && blocks - requested > worst_.rounding_waste.bytes) {
      set(worst_.rounding_waste, 1.0 - static_cast<double>(requested) / static_cast<double>(blocks),
          blocks - requested, t, dev);
    }
  }
  // A `pool` event; `requested`/`blocks`: the device's live rounding sums now.
  void on_pool(int dev, const PoolSample& sample, std::uint64_t requested, std::uint64_t blocks);
  // An `oom` event's allocator figures.
  void on_oom(int dev, const PoolSample& sample, std::uint64_t requested, std::uint64_t blocks);

  std::uint64_t samples() const { return samples_; }
  const FragmentationWorst& worst() const { return worst_; }
  const std::map<int, PoolSample>& last_pool() const { return last_pool_; }
  std::vector<FragmentationPoint> series() const;

 private:
  static void set(FragmentationMoment& m, double value, std::uint64_t bytes, std::uint64_t t, int dev) {
    m = FragmentationMoment{true, value, bytes, t, dev};
  }
  void sample(int dev, const PoolSample& s, std::uint64_t requested, std::uint64_t blocks, bool from_pool);
  void add_point(const FragmentationPoint& p);

  FragmentationWorst worst_;
  std::uint64_t samples_ = 0;
  std::map<int, PoolSample> last_pool_;
  // Buckets of width bucket_ns_ from the first sample's time; when time runs
  // past the last bucket, neighbours merge and the width doubles.
  std::vector<FragmentationPoint> buckets_;
  std::vector<bool> bucket_used_;
  std::uint64_t first_t_ = 0;
  std::uint64_t bucket_ns_ = 1000000;  // 1 ms to start with
};

}  // namespace cumemtrace::analyzer
