// Phases: the ranges that `mark` events open (push) and close (pop), per
// thread, with the highest allocated and reserved memory seen while each was
// open. A range pushed inside another on the same thread gets the path
// "outer/inner".
//
// Cost: an allocation only compares the running total with the maximum of the
// current stretch between two marks (note_allocated); each mark folds that
// maximum into the open ranges. So nothing per allocation depends on how many
// ranges are open, and allocs/frees per range are differences of the
// analysis' own counters taken at push and pop.
//
// Unbalanced input is accepted: a pop with no matching open range on its
// thread is counted and ignored; a named pop closes the innermost open range
// of that name on its thread, and any ranges opened inside it; an unnamed pop
// closes the innermost range; ranges never popped are reported open
// (end_t null). Memory stays bounded: at most kMaxOpenRanges open at once
// (deeper pushes are counted as dropped) and kMaxPhaseRecords closed ranges
// kept (later ones are counted as omitted). Every range, kept or not, is
// also summed into its group: ranges whose paths differ only by their
// numbers ("epoch 2/step 41" is in "epoch #/step #"), at most kMaxGroups.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cumemtrace::analyzer {

inline constexpr std::uint64_t kNoRange = ~std::uint64_t{0};

// The analysis' running figures, read at each mark.
struct PhaseClock {
  std::uint64_t t = 0;
  std::uint64_t allocated = 0;  // total allocated now
  std::uint64_t reserved = 0;   // total reserved now
  std::uint64_t allocs = 0;     // alloc events so far
  std::uint64_t frees = 0;      // free events so far
};

struct PhaseRecord {
  std::uint64_t serial = 0;  // push order, from 0
  std::uint64_t tid = 0;
  std::string name;
  std::string path;  // "epoch 3/forward": the names of the enclosing ranges on the thread
  std::uint64_t start_t = 0;
  std::optional<std::uint64_t> end_t;  // nullopt: never popped
  std::uint64_t peak_allocated = 0;    // the highest total while open
  std::uint64_t peak_reserved = 0;
  std::uint64_t allocs = 0;  // alloc and free events while open, every thread
  std::uint64_t frees = 0;
};

// Ranges whose paths are the same apart from their numbers.
struct PhaseGroup {
  std::string path;  // numbers folded: "epoch #/step #"
  std::uint64_t count = 0;
  PhaseRecord highest;  // the range with the highest allocated peak (the first such)
  std::uint64_t peak_reserved = 0;
};

class PhaseTracker {
 public:
  static constexpr std::size_t kMaxOpenRanges = 256;
  static constexpr std::size_t kMaxPhaseRecords = 10000;
  static constexpr std::size_t kMaxGroups = 1000;

  // kind: "push", "pop" or "instant" (instants open no range).
  void on_mark(std::uint64_t tid, std::string_view name, std::string_view kind, const PhaseClock& now);

  // Called whenever the total grows (cheap: one comparison).
  void note_allocated(std::uint64_t allocated) {
    if (allocated > stretch_allocated_max_) stretch_allocated_max_ = allocated;
  }
  void note_reserved(std::uint64_t reserved) {
    if (reserved > stretch_reserved_max_) stretch_reserved_max_ = reserved;
  }

  // The range an event of thread `tid` happened in: the innermost range open
  // on that thread, else the most recently pushed range still open on any
  // thread (PyTorch's backward runs on other threads than the one that marks
  // the step), else null. tid 0: events without a thread (segments).
  const PhaseRecord* current(std::uint64_t tid) const;

  // Every range, in push order: closed ones as recorded, open ones with their
  // figures up to `now`.
  std::vector<PhaseRecord> ranges(const PhaseClock& now) const;

  // Every range grouped by folded path, open ones included, the group whose
  // range peaked highest first (ties: first pushed first).
  std::vector<PhaseGroup> groups(const PhaseClock& now) const;

  std::uint64_t pushes() const { return next_serial_; }
  std::uint64_t unbalanced_pops() const { return unbalanced_pops_; }
  std::uint64_t dropped_pushes() const { return dropped_pushes_; }  // beyond kMaxOpenRanges
  std::uint64_t omitted_records() const { return omitted_records_; }  // beyond kMaxPhaseRecords
  std::uint64_t ungrouped() const { return ungrouped_; }  // ranges of paths beyond kMaxGroups

 private:
  void fold_stretch(const PhaseClock& now);
  void close(std::size_t open_index, const PhaseClock& now);
  PhaseRecord finished(const PhaseRecord& open, const PhaseClock& now) const;
  static void add_to(std::vector<PhaseGroup>& groups, std::unordered_map<std::string, std::size_t>& index,
                     const PhaseRecord& r, std::uint64_t* ungrouped);

  std::vector<PhaseRecord> open_;    // push order; allocs/frees hold the counters at push
  std::vector<PhaseRecord> closed_;  // pop order
  std::vector<PhaseGroup> groups_;   // of the closed ranges
  std::unordered_map<std::string, std::size_t> group_index_;
  std::string folded_;  // scratch
  std::uint64_t stretch_allocated_max_ = 0;
  std::uint64_t stretch_reserved_max_ = 0;
  std::uint64_t next_serial_ = 0;
  std::uint64_t unbalanced_pops_ = 0;
  std::uint64_t dropped_pushes_ = 0;
  std::uint64_t omitted_records_ = 0;
  std::uint64_t ungrouped_ = 0;
};

}  // namespace cumemtrace::analyzer
