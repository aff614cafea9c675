// Constant-time lookup of a short name among a fixed set (field names, event
// names): a perfect hash found at compile time over the first, middle and last
// bytes and the length, then one comparison. The trace decoder looks up every
// key of every line, so this replaces a chain of memcmp calls.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
      if (try_fill()) {
        fill_words();
        return;
      }
    }
    throw "no perfect hash for these names";  // a compile error in a constant expression
  }

  // find() for a name with at least 16 readable bytes from its start (a
  // view into a padded line buffer): two masked 64-bit compares, no call.
  Id find_padded(std::string_view name, Id missing) const {
    if (name.empty() || name.size() > 16) return find(name, missing);
    const std::uint8_t slot = slots_[slot_of(name)];
    if (slot == kEmpty || names_[slot].size() != name.size()) return missing;
    std::uint64_t word[2];
    std::memcpy(word, name.data(), 16);
    const std::size_t n = name.size();
    const std::uint64_t low_mask = n >= 8 ? ~std::uint64_t{0} : byte_mask(n);
    const std::uint64_t high_mask = n >= 16 ? ~std::uint64_t{0} : n <= 8 ? 0 : byte_mask(n - 8);
    const bool equal = (((word[0] & low_mask) ^ words_[slot][0]) | ((word[1] & high_mask) ^ words_[slot][1])) == 0;
    return equal ? static_cast<Id>(slot) : missing;
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

  // The first n bytes of a word as loaded from memory.
  static constexpr std::uint64_t byte_mask(std::size_t n) {
    const std::uint64_t ones = (std::uint64_t{1} << (8 * n)) - 1;  // n < 8
    return std::endian::native == std::endian::little ? ones : ~(~std::uint64_t{0} >> (8 * n));
  }

  // names_ as find_padded() loads them: the bytes of a name up to 16, zeros after.
  constexpr void fill_words() {
    for (std::size_t i = 0; i < N; ++i) {
      const std::string_view name = names_[i];
      for (std::size_t b = 0; b < name.size() && b < 16; ++b) {
        const unsigned shift = std::endian::native == std::endian::little ? 8 * (b % 8) : 8 * (7 - b % 8);
        words_[i][b / 8] |= static_cast<std::uint64_t>(static_cast<unsigned char>(name[b])) << shift;
      }
    }
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
  std::array<std::array<std::uint64_t, 2>, N> words_{};
  std::uint64_t multiplier_ = 0;
};

}  // namespace cumemtrace::analyzer::detail
