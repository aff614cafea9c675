// Call sites: live bytes per allocating stack, kept current as allocations
// come and go, and what each site had live at the moment of the allocated
// peak (top_at_peak).
//
// The snapshot at the peak is exact and streaming, without a second pass
// (so it works on standard input) and without copying the table at each new
// peak: a site whose live bytes change is put on a "dirty" list once; at a
// new peak only the dirty sites copy live -> at_peak and leave the list. A
// site not on the list has not changed since the last snapshot, so its
// at_peak value is already its live value. Each change is thus copied at
// most once, so the work stays O(1) amortised per event however often the
// peak moves (during ramp-up every allocation is a new peak), and memory is
// one entry per site.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cumemtrace/address_map.h"

namespace cumemtrace::analyzer {

// One cache line each: a site is touched by every allocation and free, at a
// random index (were sites 56 bytes apart, the fields used on each event
// would straddle two lines for 3 sites in 8). Those fields come first.
struct alignas(64) CallSite {
  std::uint64_t live_bytes = 0;
  std::uint64_t live_count = 0;
  std::uint64_t allocs = 0;             // allocations from this site, ever
  std::uint64_t allocated_bytes = 0;    // bytes allocated from this site, ever (flame graphs' `allocated`)
  bool dirty = false;                   // changed since the last peak snapshot
  std::uint64_t stack = 0;              // 0: no stack captured
  std::uint64_t at_peak_bytes = 0;      // live at the last allocated peak
  std::uint64_t at_peak_count = 0;
};
static_assert(sizeof(CallSite) == 64, "a call site is one cache line: a new field must replace padding");

struct SiteAtPeak {
  std::uint64_t stack = 0;
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
};

class SiteTable {
 public:
  // The index of the site of `stack`, created on first use. The writer
  // numbers stacks 1, 2, 3...: small ids index a flat table (a few bytes a
  // site, which stay in the L1 cache), others go through a hash map.
  std::uint32_t intern(std::uint64_t stack) {
    if (stack < by_small_id_.size() && by_small_id_[stack] != kNoSite) return by_small_id_[stack];
    return intern_slow(stack);
  }

  CallSite& operator[](std::uint32_t site) { return sites_[site]; }
  const CallSite& operator[](std::uint32_t site) const { return sites_[site]; }
  std::size_t size() const { return sites_.size(); }
  const std::vector<CallSite>& all() const { return sites_; }

  void add(std::uint32_t site, std::uint64_t bytes) {
    CallSite& s = sites_[site];
    s.live_bytes += bytes;
    ++s.live_count;
    ++s.allocs;
    s.allocated_bytes += bytes;
    touch(site, s);
  }
  void remove(std::uint32_t site, std::uint64_t bytes) {
    CallSite& s = sites_[site];
    s.live_bytes -= bytes < s.live_bytes ? bytes : s.live_bytes;
    if (s.live_count > 0) --s.live_count;
    touch(site, s);
  }

  // The allocated total reached a new peak: remember what each site has live.
  void snapshot_peak() {
    for (std::uint32_t site : dirty_) {
      CallSite& s = sites_[site];
      s.at_peak_bytes = s.live_bytes;
      s.at_peak_count = s.live_count;
      s.dirty = false;
    }
    dirty_.clear();
  }

  // Sites with bytes live at the peak, most bytes first (ties: lower stack
  // id first), at most `limit`.
  std::vector<SiteAtPeak> top_at_peak(std::size_t limit) const;
  // How many sites had bytes live at the peak.
  std::size_t sites_at_peak() const;

 private:
  void touch(std::uint32_t site, CallSite& s) {
    if (!s.dirty) {
      s.dirty = true;
      dirty_.push_back(site);
    }
  }

  static constexpr std::uint32_t kNoSite = ~std::uint32_t{0};
  std::uint32_t intern_slow(std::uint64_t stack);

  std::vector<CallSite> sites_;
  std::vector<std::uint32_t> by_small_id_;  // stack id -> site; kNoSite: none yet
  AddressMap<std::uint32_t> by_large_id_;
  std::vector<std::uint32_t> dirty_;
};

}  // namespace cumemtrace::analyzer
