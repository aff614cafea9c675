// A map from pointer to a small value, for the live table's shards: open
// addressing with linear probing, in one array, so an insert or a lookup is
// a hash, a probe or two and a copy, with no node to allocate or free per
// allocation (std::unordered_map's insert and erase were ~340 instructions
// of every alloc/free pair under callgrind, half of them in malloc/free).
// Erase shifts the following entries back (no tombstones), so probe lengths
// stay short however many pointers come and go.
//
// Not thread-safe: each shard's mutex guards its map. A pointer to a value
// is valid until the next insert or erase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace cumemtrace::preload {

template <typename Value>
class PointerMap {
 public:
  Value* find(std::uintptr_t key) {
    if (key == 0) return has_zero_ ? &zero_ : nullptr;
    if (slots_.empty()) return nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask()) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }

  // The value at `key`, and true if it was just inserted (as `value`).
  std::pair<Value*, bool> try_emplace(std::uintptr_t key, const Value& value) {
    if (key == 0) {
      const bool inserted = !has_zero_;
      if (inserted) zero_ = value;
      has_zero_ = true;
      return {&zero_, inserted};
    }
    if ((used_ + 1) * 8 > slots_.size() * 5) grow();  // at most 5/8 full
    std::size_t i = home(key);
    for (; slots_[i].key != 0; i = (i + 1) & mask()) {
      if (slots_[i].key == key) return {&slots_[i].value, false};
    }
    slots_[i] = Slot{key, value};
    ++used_;
    return {&slots_[i].value, true};
  }

  bool erase(std::uintptr_t key) {
    if (key == 0) return std::exchange(has_zero_, false);
    if (slots_.empty()) return false;
    std::size_t hole = home(key);
    for (; slots_[hole].key != key; hole = (hole + 1) & mask()) {
      if (slots_[hole].key == 0) return false;
    }
    // Backward shift: move up every later entry of the run that may sit in
    // the hole (its home is not cyclically within (hole, j]).
    for (std::size_t j = (hole + 1) & mask(); slots_[j].key != 0; j = (j + 1) & mask()) {
      const std::size_t want = home(slots_[j].key);
      const bool stays = hole <= j ? (hole < want && want <= j) : (hole < want || want <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole].key = 0;
    --used_;
    return true;
  }

  // Calls fn(key, value) for every entry; erases those it returns true for.
  template <typename Fn>
  void erase_if(Fn&& fn) {
    std::vector<std::uintptr_t> doomed;
    if (has_zero_ && fn(std::uintptr_t{0}, zero_)) doomed.push_back(0);
    for (Slot& s : slots_) {
      if (s.key != 0 && fn(s.key, s.value)) doomed.push_back(s.key);
    }
    for (std::uintptr_t key : doomed) erase(key);
  }

  std::size_t size() const { return used_ + (has_zero_ ? 1 : 0); }

 private:
  struct Slot {
    std::uintptr_t key = 0;  // 0: empty (the value at pointer 0 is kept aside)
    Value value{};
  };

  std::size_t mask() const { return slots_.size() - 1; }
  std::size_t home(std::uintptr_t key) const {
    // Device pointers are 256-byte aligned or more: drop the low bits, then
    // mix (a multiplier other than the shard selector's, whose top bits all
    // keys of one shard share).
    return static_cast<std::size_t>(((key >> 8) * 0xff51afd7ed558ccdull) >> shift_);
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 16 : old.size() * 2;
    slots_.assign(capacity, Slot{});
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    for (const Slot& s : old) {
      if (s.key == 0) continue;
      std::size_t i = home(s.key);
      while (slots_[i].key != 0) i = (i + 1) & mask();
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::size_t used_ = 0;
  unsigned shift_ = 64;
  bool has_zero_ = false;
  Value zero_{};
};

}  // namespace cumemtrace::preload
