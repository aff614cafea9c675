// GrowthTracker: one ThreadGrowth per thread, and the verdicts of all
// threads as one result (growth.h says why iterations are per thread).
#include <algorithm>
#include <tuple>

#include "cumemtrace/analyzer/growth.h"

namespace cumemtrace::analyzer {

namespace {

// A leak found in several threads' iterations is reported once: the
// fastest, then the longest, then the lowest tid, so that which thread
// happened to be seen first never decides.
bool ranks_before(const GrowthLeak& a, const GrowthLeak& b) {
  return std::tie(b.bytes_per_iteration, b.iterations, a.tid) < std::tie(a.bytes_per_iteration, a.iterations, b.tid);
}

}  // namespace

std::uint32_t GrowthTracker::find_thread(std::uint64_t tid) {
  bool is_new = false;
  std::uint32_t& index = thread_of_tid_.find_or_insert(tid, is_new);
  if (is_new) {
    index = static_cast<std::uint32_t>(threads_.size());
    threads_.push_back(std::make_unique<ThreadGrowth>(!marker_.empty()));
    thread_ids_.push_back(tid);
  }
  last_tid_ = tid;
  last_thread_ = index;
  return index;
}

GrowthResult GrowthTracker::result() const {
  GrowthResult r;
  std::vector<GrowthLeak> leaks;
  const ThreadIterations* most_iterations = nullptr;
  r.iterations.threads.reserve(threads_.size());
  for (std::size_t t = 0; t < threads_.size(); ++t) {
    if (threads_[t]->allocs() == 0) continue;  // only marks: nothing of its own to judge
    ThreadIterations it;
    const std::size_t first_leak = leaks.size();
    threads_[t]->result(it, leaks);
    if (it.source == IterationInfo::Source::none) {
      ++r.iterations.threads_without;
      continue;
    }
    it.tid = thread_ids_[t];
    for (std::size_t i = first_leak; i < leaks.size(); ++i) leaks[i].tid = it.tid;
    r.iterations.threads.push_back(std::move(it));
  }
  std::sort(r.iterations.threads.begin(), r.iterations.threads.end(),
            [](const ThreadIterations& a, const ThreadIterations& b) { return a.tid < b.tid; });
  for (const ThreadIterations& it : r.iterations.threads) {
    if (most_iterations == nullptr || it.count > most_iterations->count) most_iterations = &it;
  }

  // One entry per stack: its fastest thread's, counting the threads it grows in.
  std::sort(leaks.begin(), leaks.end(), [](const GrowthLeak& a, const GrowthLeak& b) {
    return a.stack != b.stack ? a.stack < b.stack : ranks_before(a, b);
  });
  for (std::size_t i = 0; i < leaks.size();) {
    std::size_t j = i + 1;
    while (j < leaks.size() && leaks[j].stack == leaks[i].stack) ++j;
    r.leaks.push_back(leaks[i]);
    r.leaks.back().threads = j - i;
    i = j;
  }
  std::sort(r.leaks.begin(), r.leaks.end(), [](const GrowthLeak& a, const GrowthLeak& b) {
    return std::tie(b.bytes_per_iteration, a.stack) < std::tie(a.bytes_per_iteration, b.stack);
  });

  // The main thread: the largest leak's, else the one with the most iterations.
  const ThreadIterations* primary = most_iterations;
  if (!r.leaks.empty()) {
    for (const ThreadIterations& it : r.iterations.threads) {
      if (it.tid == r.leaks.front().tid) primary = &it;
    }
  }
  if (primary != nullptr) static_cast<ThreadIterations&>(r.iterations) = *primary;
  r.iterations.marker = marker_;
  r.iterations.marker_count = marker_count_;
  return r;
}

}  // namespace cumemtrace::analyzer
