#include "cumemtrace/analyzer/call_sites.h"

#include <algorithm>
#include <tuple>

namespace cumemtrace::analyzer {

std::uint32_t SiteTable::intern_slow(std::uint64_t stack) {
  // An id joins the flat table while it stays within a few times the number
  // of sites (memory stays bounded by the sites, whatever ids a trace uses).
  // An id seen while too large stays in the hash map.
  if (const std::uint32_t* found = by_large_id_.find(stack)) return *found;
  const bool small = stack < 4 * sites_.size() + 1024;
  const auto site = static_cast<std::uint32_t>(sites_.size());
  sites_.push_back(CallSite{});
  sites_.back().stack = stack;
  if (small) {
    if (stack >= by_small_id_.size()) by_small_id_.resize(stack + 1, kNoSite);
    by_small_id_[stack] = site;
  } else {
    by_large_id_.insert(stack, site);
  }
  return site;
}

std::vector<SiteAtPeak> SiteTable::top_at_peak(std::size_t limit) const {
  std::vector<SiteAtPeak> top;
  for (const CallSite& s : sites_) {
    if (s.at_peak_bytes > 0) top.push_back(SiteAtPeak{s.stack, s.at_peak_bytes, s.at_peak_count});
  }
  auto more = [](const SiteAtPeak& a, const SiteAtPeak& b) { return std::tie(b.bytes, a.stack) < std::tie(a.bytes, b.stack); };
  if (top.size() > limit) {
    std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(limit), top.end(), more);
    top.resize(limit);
  } else {
    std::sort(top.begin(), top.end(), more);
  }
  return top;
}

std::size_t SiteTable::sites_at_peak() const {
  return static_cast<std::size_t>(
      std::count_if(sites_.begin(), sites_.end(), [](const CallSite& s) { return s.at_peak_bytes > 0; }));
}

}  // namespace cumemtrace::analyzer
