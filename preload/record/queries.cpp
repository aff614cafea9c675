// The Recorder's side of the query API of cumemtrace.h (issue 32): figures a
// test harness asks for between tests. Everything here is cold; only
// take_watch_snapshot runs on an allocating thread, once per arming.
#include <algorithm>
#include <thread>

#include "record/recorder.h"

namespace cumemtrace::preload {
namespace {

// Largest first; equal sizes by address, so answers do not depend on the
// order of the table's shards.
bool larger(const HeldAllocation& a, const HeldAllocation& b) {
  return a.size != b.size ? a.size > b.size : a.ptr < b.ptr;
}

}  // namespace

void Recorder::start_queries() {
  std::call_once(queries_once_, [this] {
    // Every lock of both tables held while the scan counts what is held and
    // the totals go on (live_usage.h says why that counts each allocation
    // once). The VMM mutex first: no path takes it while holding a shard.
    vmm_.with_all_locked([&](auto&& visit_vmm) {
      live_.with_all_locked([&](auto&& visit_live) {
        std::array<UsageFigures, LiveUsage::kDevices + 1> found{};
        auto count = [&found](const HeldAllocation& a) {
          if (const int slot = LiveUsage::slot(a.dev); slot >= 0) {
            found[static_cast<std::size_t>(slot)].live_bytes += a.size;
            ++found[static_cast<std::size_t>(slot)].live_count;
          }
          found[LiveUsage::kDevices].live_bytes += a.size;
          ++found[LiveUsage::kDevices].live_count;
        };
        visit_live(count);
        visit_vmm(count);
        usage_.start(found);
      });
    });
  });
}

bool Recorder::usage(int dev, UsageFigures& out) {
  if (dev < -1 || dev >= LiveUsage::kDevices) return false;
  start_queries();
  out = usage_.figures(dev);
  return true;
}

void Recorder::reset_peaks() {
  start_queries();
  usage_.reset_peaks();
}

std::uint32_t Recorder::checkpoint() {
  start_queries();
  return usage_.checkpoint();
}

std::vector<HeldAllocation> Recorder::held_since(std::uint32_t since, std::size_t keep, std::uint64_t& total) {
  start_queries();
  std::vector<HeldAllocation> held;
  auto take = [&](const HeldAllocation& a) {
    if (a.epoch >= since) held.push_back(a);
  };
  live_.for_each_held(take);
  vmm_.for_each_held(take);
  total = held.size();
  const std::size_t kept = std::min(keep, held.size());
  std::partial_sort(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(kept), held.end(), larger);
  held.resize(kept);
  return held;
}

void Recorder::watch(std::uint32_t since, std::uint64_t above_bytes) {
  start_queries();
  std::scoped_lock lock(watch_mutex_);
  usage_.set_watch_line(LiveUsage::kNoWatch);
  // Back to idle; a snapshot being taken this moment (its line was crossed
  // just now) finishes first. A thread that crossed the old line and
  // claims later finds the state idle, or armed for a line it must check.
  for (int state = watch_.state.load(std::memory_order_acquire);;) {
    if (state == WatchSnapshot::kTaking) {
      std::this_thread::yield();
      state = watch_.state.load(std::memory_order_acquire);
    } else if (watch_.state.compare_exchange_weak(state, WatchSnapshot::kIdle, std::memory_order_acq_rel)) {
      break;
    }
  }
  watch_.stored = 0;
  watch_.total = 0;
  if (above_bytes == LiveUsage::kNoWatch) return;
  watch_.since = since;
  watch_.line = above_bytes;
  watch_.state.store(WatchSnapshot::kArmed, std::memory_order_release);
  usage_.set_watch_line(above_bytes);
  // Already above it: the snapshot is of now.
  if (const std::uint64_t now = usage_.figures(-1).live_bytes; now > above_bytes) take_watch_snapshot(now);
}

void Recorder::take_watch_snapshot(std::uint64_t total_now) noexcept {
  int armed = WatchSnapshot::kArmed;
  if (!watch_.state.compare_exchange_strong(armed, WatchSnapshot::kTaking, std::memory_order_acq_rel)) return;
  // Crossed a line since re-armed higher: not this arming's crossing.
  if (total_now <= watch_.line) {
    watch_.state.store(WatchSnapshot::kArmed, std::memory_order_release);
    return;
  }
  usage_.set_watch_line(LiveUsage::kNoWatch);  // the other allocating threads stop asking
  std::size_t stored = 0;
  std::uint64_t total = 0;
  auto keep = [&](const HeldAllocation& a) {
    if (a.epoch < watch_.since) return;
    ++total;
    if (stored < watch_.kept.size()) {
      watch_.kept[stored++] = a;
      return;
    }
    // Full: the new one replaces the smallest kept, if it is larger.
    auto smallest = std::min_element(watch_.kept.begin(), watch_.kept.end(),
                                     [](const HeldAllocation& x, const HeldAllocation& y) { return larger(y, x); });
    if (larger(a, *smallest)) *smallest = a;
  };
  live_.for_each_held(keep);
  vmm_.for_each_held(keep);
  watch_.stored = stored;
  watch_.total = total;
  watch_.state.store(WatchSnapshot::kTaken, std::memory_order_release);
}

std::vector<HeldAllocation> Recorder::watched(std::size_t keep, std::uint64_t& total) {
  start_queries();
  std::scoped_lock lock(watch_mutex_);
  total = 0;
  // Taken on another thread this very moment: a scan of the tables.
  while (watch_.state.load(std::memory_order_acquire) == WatchSnapshot::kTaking) std::this_thread::yield();
  if (watch_.state.load(std::memory_order_acquire) != WatchSnapshot::kTaken) return {};
  std::vector<HeldAllocation> kept(watch_.kept.begin(), watch_.kept.begin() + static_cast<std::ptrdiff_t>(watch_.stored));
  std::sort(kept.begin(), kept.end(), larger);
  kept.resize(std::min(keep, kept.size()));
  total = watch_.total;
  return kept;
}

}  // namespace cumemtrace::preload
