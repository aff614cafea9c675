// Byte scans shared by the two line decoders (simdjson's path in
// line_parser.cpp, line shapes in line_shapes.cpp): plain strings and hex
// numbers read straight from a line, whose padding covers reading past it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "read/line_parser.h"

namespace cumemtrace::analyzer::detail {

inline constexpr std::uint64_t kEachByte = 0x0101010101010101ull;

inline std::uint64_t load_word(const char* p) {
  std::uint64_t word = 0;
  std::memcpy(&word, p, 8);
  return word;
}

// The length of a string's text from `p` (just after its opening quote) up
// to its closing quote, if every byte before that quote is printable ASCII
// (0x20..0x7F) other than a backslash: a string JSON takes as it is, with no
// escape and nothing for UTF-8 validation to reject. Returns false
// otherwise. The scan ends at the closing quote, the line's '\n' (a
// control character) or its padding's NUL at the latest; 16 bytes past the
// byte it stops at are readable.
[[gnu::always_inline]] inline bool plain_ascii_string(const char* p, std::size_t& length) {
#if defined(__SSE2__)
  for (std::size_t offset = 0;; offset += 16) {
    const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offset));
    // Signed bytes: below 0x20 is a control character or (negative) a byte
    // over 0x7F.
    const __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(chunk, _mm_set1_epi8('"')),
                                                   _mm_cmpeq_epi8(chunk, _mm_set1_epi8('\\'))),
                                      _mm_cmplt_epi8(chunk, _mm_set1_epi8(0x20)));
    const auto stops = static_cast<unsigned>(_mm_movemask_epi8(stop));
    if (stops == 0) continue;
    const std::size_t at = offset + static_cast<std::size_t>(std::countr_zero(stops));
    if (p[at] != '"') return false;
    length = at;
    return true;
  }
#else
  for (std::size_t at = 0;; ++at) {
    const auto c = static_cast<unsigned char>(p[at]);
    if (c == '"') {
      length = at;
      return true;
    }
    if (c == '\\' || c < 0x20 || c > 0x7F) return false;
  }
#endif
}

// parse_hex(), faster, for a text with 18 readable bytes from its start
// (one in a line, which padding follows): one 16-byte pass, no byte loop.
[[gnu::always_inline]] inline bool parse_hex_padded(std::string_view text, std::uint64_t& out) {
#if defined(__SSE2__) && defined(__x86_64__)
  if (text.size() < 3 || text.size() > 18 || text[0] != '0' || text[1] != 'x') return false;
  const auto digits = static_cast<unsigned>(text.size() - 2);
  const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + 2));
  const auto between = [&](char low, char high) {
    return _mm_and_si128(_mm_cmpgt_epi8(chunk, _mm_set1_epi8(static_cast<char>(low - 1))),
                         _mm_cmplt_epi8(chunk, _mm_set1_epi8(static_cast<char>(high + 1))));
  };
  const __m128i letter = between('a', 'f');
  const unsigned wanted = (1u << digits) - 1;
  if ((static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(between('0', '9'), letter))) & wanted) != wanted) {
    return false;
  }
  // '0'..'9' & 0x0F is the digit; 'a'..'f' & 0x0F is 1..6, plus 9. Bytes
  // past the digits become 0, then shifted out below.
  __m128i nibbles = _mm_add_epi8(_mm_and_si128(chunk, _mm_set1_epi8(0x0F)), _mm_and_si128(letter, _mm_set1_epi8(9)));
  const __m128i index = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  nibbles = _mm_and_si128(nibbles, _mm_cmplt_epi8(index, _mm_set1_epi8(static_cast<char>(digits))));
  // The first digit is the most significant: pairs of nibbles into bytes
  // (16-bit lanes), pairs of bytes into 16 bits (madd), pairs of those into
  // 32 bits, then the two halves.
  const __m128i bytes = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(nibbles, _mm_set1_epi16(0x00FF)), 4),
                                     _mm_srli_epi16(nibbles, 8));
  const __m128i halves = _mm_madd_epi16(bytes, _mm_set1_epi32(0x00010100));  // first * 256 + second
  const __m128i words = _mm_or_si128(_mm_slli_epi64(halves, 16), _mm_srli_epi64(halves, 32));
  const auto high = static_cast<std::uint64_t>(_mm_cvtsi128_si64(words)) & 0xFFFFFFFFu;
  const auto low = static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(words, words))) & 0xFFFFFFFFu;
  out = ((high << 32) | low) >> (4 * (16 - digits));
  return true;
#else
  return parse_hex(text, out);
#endif
}

}  // namespace cumemtrace::analyzer::detail
