// The reserved address ranges of one device while a snapshot is imported
// (part of the importer, snapshot_import.h).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace cumemtrace::analyzer::snapshot {

// Reserved address ranges of one device, by start. Ranges are never merged:
// each cudaMalloc segment keeps its identity, so its segment_free matches.
// Removing part of a range (cuMemUnmap of part of an expandable segment)
// leaves the rest as ranges of their own.
class ReservedRanges {
 public:
  struct Change {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> removed;  // whole former ranges
    std::vector<std::pair<std::uint64_t, std::uint64_t>> added;    // what remains of them
  };

  // Removes [start, start+size) and returns what changed; empty if nothing
  // was reserved there.
  Change remove(std::uint64_t start, std::uint64_t size) {
    Change change;
    const std::uint64_t end = start + size;
    auto it = ranges_.upper_bound(start);
    if (it != ranges_.begin() && std::prev(it)->first + std::prev(it)->second > start) --it;
    while (it != ranges_.end() && it->first < end) {
      const std::uint64_t r_start = it->first, r_end = it->first + it->second;
      change.removed.emplace_back(r_start, it->second);
      total_ -= it->second;
      it = ranges_.erase(it);
      if (r_start < start) change.added.emplace_back(r_start, start - r_start);
      if (r_end > end) change.added.emplace_back(end, r_end - end);
    }
    for (const auto& [s, n] : change.added) insert(s, n);
    return change;
  }

  // Adds [start, start+size); whatever overlapped it is removed first and
  // reported (an inconsistency in the snapshot).
  Change add(std::uint64_t start, std::uint64_t size) {
    Change change = remove(start, size);
    insert(start, size);
    return change;
  }

  std::uint64_t total() const { return total_; }
  const std::map<std::uint64_t, std::uint64_t>& ranges() const { return ranges_; }

 private:
  void insert(std::uint64_t start, std::uint64_t size) {
    ranges_[start] = size;
    total_ += size;
  }
  std::map<std::uint64_t, std::uint64_t> ranges_;
  std::uint64_t total_ = 0;
};

}  // namespace cumemtrace::analyzer::snapshot
