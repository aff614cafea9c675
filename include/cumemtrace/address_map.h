// An open-addressing hash map from a device address to a small value, for the
// live sets of the analyzer and of the preload's live table: flat arrays, no allocation per insert, linear probing with
// backward-shift deletion (no tombstones, so lookups stay short however many
// allocations come and go). Keys and their used flags lie apart from the
// values: a probe walks 9 bytes a slot, which stay in the L1 cache for a live
// set of thousands, and touches one value at the end (the values of a slot
// each were 64 bytes apart, a cache miss per slot probed). The load factor
// stays at most 1/2: at 3/4, the mispredicted ends of longer probe runs (and
// of the runs that deletion shifts) cost the analysis more than the larger
// table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace cumemtrace {

template <typename Value>
class AddressMap {
 public:
  std::size_t size() const { return size_; }

  Value* find(std::uint64_t key) {
    if (size_ == 0) return nullptr;
    for (std::size_t i = home(key); used_[i]; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
    }
    return nullptr;
  }

  // Inserts or overwrites; returns true if the key was new.
  bool insert(std::uint64_t key, const Value& value) {
    bool inserted = false;
    find_or_insert(key, inserted) = value;
    return inserted;
  }

  // The value of `key`; when absent, a default one inserted first, and
  // `inserted` set. One probe where find() then insert() take two. The
  // reference stays valid until the next insertion or erasure.
  Value& find_or_insert(std::uint64_t key, bool& inserted) {
    Value& value = find_or_claim(key, inserted);
    if (inserted) value = Value{};
    return value;
  }

  // find_or_insert for a caller that assigns the whole value either way: a
  // new key's value is left as whatever the slot held. Saves storing a
  // Value{} that is overwritten at once (the compiler does not elide it, and
  // for the live set it cost a stalled store per allocation).
  Value& find_or_claim(std::uint64_t key, bool& inserted) {
    if ((size_ + 1) * 2 > keys_.size()) grow();  // load factor <= 1/2
    std::size_t i = home(key);
    for (; used_[i]; i = (i + 1) & mask_) {
      if (keys_[i] == key) {
        inserted = false;
        return values_[i];
      }
    }
    used_[i] = true;
    keys_[i] = key;
    ++size_;
    inserted = true;
    return values_[i];
  }

  // Removes `key`, moving its value to `*removed` if given. False if absent.
  bool erase(std::uint64_t key, Value* removed = nullptr) {
    return erase_with(key, [removed](Value& value) {
      if (removed != nullptr) *removed = std::move(value);
    });
  }

  // Removes `key` after calling `use(value)` on its value in place (no copy
  // out; `use` must not touch this map). False, and no call, if absent.
  template <typename F>
  bool erase_with(std::uint64_t key, F&& use) {
    if (size_ == 0) return false;
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (!used_[i]) return false;
      if (keys_[i] == key) break;
    }
    use(values_[i]);
    // Backward shift: pull later members of the probe run into the hole.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask_; used_[j]; j = (j + 1) & mask_) {
      const std::size_t want = home(keys_[j]);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const bool stays = hole <= j ? (hole < want && want <= j) : (hole < want || want <= j);
      if (!stays) {
        keys_[hole] = keys_[j];
        values_[hole] = std::move(values_[j]);
        hole = j;
      }
    }
    used_[hole] = false;
    --size_;
    return true;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      if (used_[i]) f(keys_[i], values_[i]);
    }
  }

 private:
  std::size_t home(std::uint64_t key) const {
    // Fibonacci hashing: device addresses share their low bits (alignment).
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void grow() {
    std::vector<std::uint64_t> old_keys = std::move(keys_);
    std::vector<Value> old_values = std::move(values_);
    std::vector<std::uint8_t> old_used = std::move(used_);
    const std::size_t capacity = old_keys.empty() ? 64 : old_keys.size() * 2;
    keys_.assign(capacity, 0);
    values_.assign(capacity, Value{});
    used_.assign(capacity, 0);
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    for (std::size_t i = 0; i < old_keys.size(); ++i) {
      if (old_used[i]) insert(old_keys[i], old_values[i]);
    }
  }

  std::vector<std::uint64_t> keys_;
  std::vector<Value> values_;
  std::vector<std::uint8_t> used_;  // a byte each, not vector<bool>: no bit masking per probe
  std::size_t size_ = 0;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace cumemtrace
