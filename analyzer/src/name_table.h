// Constant-time lookup of a short name among a fixed set (field names, event
// names): a perfect hash found at compile time over the first, middle and last
// bytes and the length, then one comparison. The trace decoder looks up every
// key of every line, so this replaces a chain of memcmp calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cumemtrace::analyzer::detail {

template <typename Id, std::size_t N>
class NameTable {
 public:
  static constexpr std::size_t kSlots = 256;

  // `names[i]` is the name of Id i. Fails to compile if no hash separates them.
  constexpr explicit NameTable(const std::array<std::string_view, N>& names) : names_(names) {
    for (std::uint64_t candidate = 1; candidate < 200000; candidate += 2) {
      multiplier_ = candidate * 0x9E3779B97F4A7C15ull | 1;
      if (try_fill()) return;
    }
    throw "no perfect hash for these names";  // a compile error in a constant expression
  }

  // The Id of `name`, or `missing` if it is none of the names.
  constexpr Id find(std::string_view name, Id missing) const {
    if (name.empty()) return missing;
    const std::uint8_t slot = slots_[slot_of(name)];
    if (slot == kEmpty) return missing;
    // One memcmp, not a byte loop: a loop's exit is a branch mispredicted
    // on almost every lookup.
    return names_[slot] == name ? static_cast<Id>(slot) : missing;
  }

 private:
  static constexpr std::uint8_t kEmpty = 0xFF;
  static_assert(N < kEmpty);

  constexpr std::size_t slot_of(std::string_view s) const {
    const std::uint64_t key = static_cast<std::uint64_t>(static_cast<unsigned char>(s.front())) |
                              static_cast<std::uint64_t>(static_cast<unsigned char>(s[s.size() / 2])) << 8 |
                              static_cast<std::uint64_t>(static_cast<unsigned char>(s.back())) << 16 |
                              static_cast<std::uint64_t>(s.size()) << 24;
    return static_cast<std::size_t>((key * multiplier_) >> 56);
  }

  constexpr bool try_fill() {
    for (auto& s : slots_) s = kEmpty;
    for (std::size_t i = 0; i < N; ++i) {
      std::uint8_t& slot = slots_[slot_of(names_[i])];
      if (slot != kEmpty) return false;
      slot = static_cast<std::uint8_t>(i);
    }
    return true;
  }

  std::array<std::string_view, N> names_;
  std::array<std::uint8_t, kSlots> slots_{};
  std::uint64_t multiplier_ = 0;
};

}  // namespace cumemtrace::analyzer::detail
