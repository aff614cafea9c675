#include "cumemtrace/analyzer/phases.h"

#include <algorithm>
#include <tuple>

#include "cumemtrace/analyzer/growth.h"  // fold_numbers

namespace cumemtrace::analyzer {

void PhaseTracker::fold_stretch(const PhaseClock& now) {
  for (PhaseRecord& r : open_) {
    r.peak_allocated = std::max(r.peak_allocated, stretch_allocated_max_);
    r.peak_reserved = std::max(r.peak_reserved, stretch_reserved_max_);
  }
  stretch_allocated_max_ = now.allocated;
  stretch_reserved_max_ = now.reserved;
}

PhaseRecord PhaseTracker::finished(const PhaseRecord& open, const PhaseClock& now) const {
  PhaseRecord r = open;
  r.peak_allocated = std::max(r.peak_allocated, stretch_allocated_max_);
  r.peak_reserved = std::max(r.peak_reserved, stretch_reserved_max_);
  r.allocs = now.allocs - open.allocs;  // open ranges hold the counters at push
  r.frees = now.frees - open.frees;
  return r;
}

void PhaseTracker::close(std::size_t open_index, const PhaseClock& now) {
  // Ranges of the same thread opened inside this one close with it; other
  // threads' ranges stay open whatever their position.
  const std::uint64_t tid = open_[open_index].tid;
  for (std::size_t i = open_.size(); i-- > open_index;) {
    if (i != open_index && open_[i].tid != tid) continue;
    PhaseRecord r = finished(open_[i], now);
    r.end_t = now.t;
    add_to(groups_, group_index_, r, &ungrouped_);
    if (closed_.size() < kMaxPhaseRecords) closed_.push_back(std::move(r));
    else ++omitted_records_;
    open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void PhaseTracker::on_mark(std::uint64_t tid, std::string_view name, std::string_view kind,
                           const PhaseClock& now) {
  const bool push = kind == "push";
  const bool pop = kind == "pop";
  if (!push && !pop) return;  // instants (and unknown kinds) open no range
  fold_stretch(now);
  if (push) {
    if (open_.size() >= kMaxOpenRanges) {
      ++dropped_pushes_;
      return;
    }
    PhaseRecord r;
    r.serial = next_serial_++;
    r.tid = tid;
    r.name = name;
    const PhaseRecord* parent = nullptr;
    for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
      if (it->tid == tid) {
        parent = &*it;
        break;
      }
    }
    r.path = parent ? parent->path + "/" + std::string(name) : std::string(name);
    r.start_t = now.t;
    r.peak_allocated = now.allocated;
    r.peak_reserved = now.reserved;
    r.allocs = now.allocs;
    r.frees = now.frees;
    open_.push_back(std::move(r));
    return;
  }
  // pop: the innermost open range of this thread with this name (any name
  // when the pop has none, as NVTX pops do).
  for (std::size_t i = open_.size(); i-- > 0;) {
    if (open_[i].tid == tid && (name.empty() || open_[i].name == name)) {
      close(i, now);
      return;
    }
  }
  ++unbalanced_pops_;
}

void PhaseTracker::add_to(std::vector<PhaseGroup>& groups, std::unordered_map<std::string, std::size_t>& index,
                          const PhaseRecord& r, std::uint64_t* ungrouped) {
  std::string folded = fold_numbers(r.path);
  auto it = index.find(folded);
  if (it == index.end()) {
    if (groups.size() >= kMaxGroups) {
      if (ungrouped != nullptr) ++*ungrouped;
      return;
    }
    it = index.emplace(folded, groups.size()).first;
    groups.push_back(PhaseGroup{std::move(folded), 0, r, 0});
  }
  PhaseGroup& g = groups[it->second];
  ++g.count;
  // Ranges close in pop order: on a tie keep the one pushed first.
  if (r.peak_allocated > g.highest.peak_allocated ||
      (r.peak_allocated == g.highest.peak_allocated && r.serial < g.highest.serial)) {
    g.highest = r;
  }
  g.peak_reserved = std::max(g.peak_reserved, r.peak_reserved);
}

std::vector<PhaseGroup> PhaseTracker::groups(const PhaseClock& now) const {
  std::vector<PhaseGroup> all = groups_;
  std::unordered_map<std::string, std::size_t> index = group_index_;
  for (const PhaseRecord& r : open_) add_to(all, index, finished(r, now), nullptr);
  std::stable_sort(all.begin(), all.end(), [](const PhaseGroup& a, const PhaseGroup& b) {
    return std::tie(b.highest.peak_allocated, a.highest.serial) < std::tie(a.highest.peak_allocated, b.highest.serial);
  });
  return all;
}

const PhaseRecord* PhaseTracker::current(std::uint64_t tid) const {
  if (open_.empty()) return nullptr;
  if (tid != 0) {
    for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
      if (it->tid == tid) return &*it;
    }
  }
  return &open_.back();
}

std::vector<PhaseRecord> PhaseTracker::ranges(const PhaseClock& now) const {
  std::vector<PhaseRecord> all = closed_;
  all.reserve(closed_.size() + open_.size());
  for (const PhaseRecord& r : open_) all.push_back(finished(r, now));
  std::sort(all.begin(), all.end(), [](const PhaseRecord& a, const PhaseRecord& b) { return a.serial < b.serial; });
  return all;
}

}  // namespace cumemtrace::analyzer
