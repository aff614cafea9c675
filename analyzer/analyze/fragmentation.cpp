#include "cumemtrace/analyzer/fragmentation.h"

#include <algorithm>

namespace cumemtrace::analyzer {

double ratio_unused(std::uint64_t used, std::uint64_t whole) {
  if (whole == 0 || used >= whole) return 0.0;
  return 1.0 - static_cast<double>(used) / static_cast<double>(whole);
}

void FragmentationTracker::on_pool(int dev, const PoolSample& s, std::uint64_t requested, std::uint64_t blocks) {
  last_pool_[dev] = s;
  sample(dev, s, requested, blocks, true);
}

void FragmentationTracker::on_oom(int dev, const PoolSample& s, std::uint64_t requested, std::uint64_t blocks) {
  sample(dev, s, requested, blocks, false);
}

void FragmentationTracker::sample(int dev, const PoolSample& s, std::uint64_t requested, std::uint64_t blocks,
                                  bool from_pool) {
  ++samples_;
  note_unused(dev, s.allocated, s.reserved, s.t);
  if (s.cached_free > s.largest_free && s.cached_free - s.largest_free > worst_.cached_free_scattered.bytes) {
    set(worst_.cached_free_scattered, ratio_unused(s.largest_free, s.cached_free), s.cached_free - s.largest_free,
        s.t, dev);
  }
  // `oom` events carry no inactive split figure.
  if (from_pool && s.inactive_split > worst_.inactive_split_bytes.bytes) {
    set(worst_.inactive_split_bytes, static_cast<double>(s.inactive_split), s.inactive_split, s.t, dev);
  }
  FragmentationPoint p;
  p.t = s.t;
  p.reserved_unused = ratio_unused(s.allocated, s.reserved);
  p.cached_free_scattered = ratio_unused(s.largest_free, s.cached_free);
  p.inactive_split_bytes = from_pool ? s.inactive_split : 0;
  p.rounding_waste = ratio_unused(requested, blocks);
  add_point(p);
}

void FragmentationTracker::add_point(const FragmentationPoint& p) {
  if (buckets_.empty()) {
    buckets_.assign(kMaxSeriesPoints, FragmentationPoint{});
    bucket_used_.assign(kMaxSeriesPoints, false);
    first_t_ = p.t;
  }
  const std::uint64_t offset = p.t > first_t_ ? p.t - first_t_ : 0;
  while (offset / bucket_ns_ >= kMaxSeriesPoints) {  // merge pairs, double the width
    for (std::size_t i = 0; i < kMaxSeriesPoints / 2; ++i) {
      FragmentationPoint& into = buckets_[i];
      const FragmentationPoint& a = buckets_[2 * i];
      const FragmentationPoint& b = buckets_[2 * i + 1];
      const bool used_a = bucket_used_[2 * i], used_b = bucket_used_[2 * i + 1];
      FragmentationPoint merged = used_a ? a : b;
      if (used_a && used_b) {
        merged.reserved_unused = std::max(a.reserved_unused, b.reserved_unused);
        merged.cached_free_scattered = std::max(a.cached_free_scattered, b.cached_free_scattered);
        merged.inactive_split_bytes = std::max(a.inactive_split_bytes, b.inactive_split_bytes);
        merged.rounding_waste = std::max(a.rounding_waste, b.rounding_waste);
      }
      into = merged;
      bucket_used_[i] = used_a || used_b;
    }
    for (std::size_t i = kMaxSeriesPoints / 2; i < kMaxSeriesPoints; ++i) {
      buckets_[i] = FragmentationPoint{};
      bucket_used_[i] = false;
    }
    bucket_ns_ *= 2;
  }
  const std::size_t i = static_cast<std::size_t>(offset / bucket_ns_);
  FragmentationPoint& b = buckets_[i];
  if (!bucket_used_[i]) {
    b = p;
    bucket_used_[i] = true;
    return;
  }
  b.reserved_unused = std::max(b.reserved_unused, p.reserved_unused);
  b.cached_free_scattered = std::max(b.cached_free_scattered, p.cached_free_scattered);
  b.inactive_split_bytes = std::max(b.inactive_split_bytes, p.inactive_split_bytes);
  b.rounding_waste = std::max(b.rounding_waste, p.rounding_waste);
}

std::vector<FragmentationPoint> FragmentationTracker::series() const {
  std::vector<FragmentationPoint> out;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    if (bucket_used_[i]) out.push_back(buckets_[i]);
  }
  return out;
}

}  // namespace cumemtrace::analyzer
