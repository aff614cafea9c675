// Pointer → block for the blocks a sub-pool has handed out. Open addressing
// with linear probing and backward-shift deletion: no allocation per insert
// (the hit path must not call malloc), no tombstones to sweep. Guarded by the
// sub-pool's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cumemtrace/pool/upstream.h"

namespace cumemtrace::pool::detail {

template <class Value>
class LiveMap {
 public:
  LiveMap() { rehash(64); }

  Value* find(DevicePtr key) const {
    for (std::size_t i = index(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == 0) return nullptr;
    }
  }

  // `key` (never 0) must not be present.
  void insert(DevicePtr key, Value* value) {
    if ((count_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    place(key, value);
    ++count_;
  }

  Value* erase(DevicePtr key) {
    std::size_t i = index(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == 0) return nullptr;
    }
    Value* removed = slots_[i].value;
    // Backward shift: move later entries of the probe run into the hole
    // unless they already sit at or after their home slot's position.
    for (std::size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].key == 0) break;
      const std::size_t home = index(slots_[j].key);
      const bool hole_between_home_and_j = ((j - home) & mask_) >= ((j - i) & mask_);
      if (hole_between_home_and_j) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --count_;
    return removed;
  }

  template <class Fn>
  void for_each(Fn fn) const {
    for (const Slot& s : slots_)
      if (s.key) fn(s.key, s.value);
  }

  void clear() {
    slots_.assign(64, Slot{});
    mask_ = 63;
    shift_ = 64 - 6;
    count_ = 0;
  }

  std::size_t size() const { return count_; }

 private:
  struct Slot {
    DevicePtr key = 0;
    Value* value = nullptr;
  };

  std::size_t index(DevicePtr key) const {
    // Blocks are 512-byte aligned: drop those bits, then Fibonacci-hash so
    // neighbouring blocks spread over the table.
    return static_cast<std::size_t>(((static_cast<std::uint64_t>(key) >> 9) * 0x9e3779b97f4a7c15ull) >>
                                    shift_);
  }

  void place(DevicePtr key, Value* value) {
    std::size_t i = index(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{key, value};
  }

  void rehash(std::size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    for (const Slot& s : old)
      if (s.key) place(s.key, s.value);
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 0;
  std::size_t count_ = 0;
};

}  // namespace cumemtrace::pool::detail
