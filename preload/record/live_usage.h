// Totals and peaks of what the program holds, per device and for all
// devices together, for the query API of cumemtrace.h (issue 32: a test
// harness asks what a test held at its peak).
//
// Kept only once a query has asked (`on`): until then an allocation pays
// one relaxed load of a flag that never changes, and no atomic add. The
// tables that hold the allocations (LiveTable, VmmHandles) call add/remove
// under their own locks, so a table scanned with all its locks held while
// the flag is set is counted exactly once: an allocation either ran before
// the scan (counted by it, and saw the flag off) or after (saw it on).
//
// The epoch is what a checkpoint of the API returns: each allocation keeps
// the epoch current when it was made, so "made since checkpoint C" is
// "epoch >= C", with no clock and no counter written per allocation.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace cumemtrace::preload {

struct UsageFigures {
  std::uint64_t live_bytes = 0;
  std::uint64_t live_count = 0;
  std::uint64_t peak_bytes = 0;
};

class LiveUsage {
 public:
  static constexpr int kDevices = 64;  // as Recorder::kMaxDevices; others count in the total only
  static constexpr std::uint64_t kNoWatch = UINT64_MAX;

  bool on() const { return on_.load(std::memory_order_relaxed); }
  // For tables nobody queries (unit tests of the table alone).
  static LiveUsage& never_on() {
    static LiveUsage unused;
    return unused;
  }

  // Under the lock of the table that changed. Returns the total when it is
  // above the watch line, else 0 (the caller then takes the watch's
  // snapshot, with no table lock held).
  std::uint64_t add(int dev, std::uint64_t size) {
    if (Counter* d = device(dev)) d->add(size);
    const std::uint64_t now = total().add(size);
    return now > watch_above_.load(std::memory_order_relaxed) ? now : 0;
  }
  void remove(int dev, std::uint64_t size) {
    if (Counter* d = device(dev)) d->remove(size);
    total().remove(size);
  }

  // While every table's locks are held: what the scan found, then on.
  void start(const std::array<UsageFigures, kDevices + 1>& found) {
    for (std::size_t i = 0; i < counters_.size(); ++i) {
      counters_[i].bytes.store(found[i].live_bytes, std::memory_order_relaxed);
      counters_[i].count.store(found[i].live_count, std::memory_order_relaxed);
      counters_[i].peak.store(found[i].live_bytes, std::memory_order_relaxed);
    }
    on_.store(true, std::memory_order_release);
  }
  // The slot a scan counts device `dev` in, besides the total (kDevices).
  static int slot(int dev) { return dev >= 0 && dev < kDevices ? dev : -1; }

  // dev: 0..kDevices-1, or -1 for all devices together.
  UsageFigures figures(int dev) const {
    const Counter& c = dev < 0 ? counters_[kDevices] : counters_[static_cast<std::size_t>(dev)];
    return {c.bytes.load(std::memory_order_acquire), c.count.load(std::memory_order_acquire),
            c.peak.load(std::memory_order_acquire)};
  }

  void reset_peaks() {
    for (Counter& c : counters_) c.reset_peak();
  }

  std::uint32_t epoch() const { return epoch_.load(std::memory_order_relaxed); }
  // A new epoch; allocations made after this returns carry it (or a later one).
  std::uint32_t checkpoint() {
    std::uint32_t e = epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (e == 0) e = epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;  // 0 means "before any"
    return e;
  }

  // What add compares the total with (kNoWatch: nothing to watch).
  void set_watch_line(std::uint64_t above) { watch_above_.store(above, std::memory_order_release); }

 private:
  // A line each: threads allocating on different devices do not share one.
  struct alignas(64) Counter {
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> count{0};
    std::atomic<std::uint64_t> peak{0};

    // The running total that fetch_add returns is a real moment's, so the
    // largest one seen is the exact peak whatever the interleaving.
    std::uint64_t add(std::uint64_t size) {
      const std::uint64_t now = bytes.fetch_add(size, std::memory_order_acq_rel) + size;
      count.fetch_add(1, std::memory_order_relaxed);
      raise_peak(now);
      return now;
    }
    void remove(std::uint64_t size) {
      bytes.fetch_sub(size, std::memory_order_acq_rel);
      count.fetch_sub(1, std::memory_order_relaxed);
    }
    void raise_peak(std::uint64_t now) {
      std::uint64_t seen = peak.load(std::memory_order_relaxed);
      while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_acq_rel)) {
      }
    }
    // Lowered to what is held now, then raised to what is held after: an
    // add racing with the reset either raised the peak after the store or
    // is in the second load.
    void reset_peak() {
      peak.store(bytes.load(std::memory_order_acquire), std::memory_order_release);
      raise_peak(bytes.load(std::memory_order_acquire));
    }
  };

  Counter* device(int dev) { return slot(dev) >= 0 ? &counters_[static_cast<std::size_t>(dev)] : nullptr; }
  Counter& total() { return counters_[kDevices]; }

  std::atomic<bool> on_{false};
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint64_t> watch_above_{kNoWatch};
  std::array<Counter, kDevices + 1> counters_{};
};

}  // namespace cumemtrace::preload
