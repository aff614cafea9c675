#include "text/line_buffer.h"

namespace cumemtrace::contract {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n;
  std::uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) { n = 2; cp = c & 0x1f; }
  else if ((c & 0xf0) == 0xe0) { n = 3; cp = c & 0x0f; }
  else if ((c & 0xf8) == 0xf0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace

char* LineBuffer::grow_on_heap(std::size_t n) {
  if (!spilled_) {
    heap_.assign(inline_, size_);
    spilled_ = true;
  }
  const std::size_t at = heap_.size();
  heap_.resize(at + n);
  return heap_.data() + at;
}

LineBuffer& LineBuffer::str_escaped(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  ch('"');
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      ch('\\');
      ch(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
      raw(std::string_view(esc, sizeof esc));
      ++i;
    } else if (c < 0x80) {
      ch(static_cast<char>(c));
      ++i;
    } else if (const std::size_t n = utf8_sequence_length(s, i); n != 0) {
      raw(s.substr(i, n));
      i += n;
    } else {
      raw("\\ufffd");
      ++i;
    }
  }
  return ch('"');
}

}  // namespace cumemtrace::contract
