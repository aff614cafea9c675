#include "render/html_escape.h"

#include <cstdint>

namespace cumemtrace::analyzer::detail {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF), or 0 if invalid.
std::size_t utf8_sequence(std::string_view s, std::uint32_t& code_point) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  std::size_t length;
  std::uint32_t cp;
  std::uint32_t min;
  if (b0 < 0x80) {
    code_point = b0;
    return 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    length = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  code_point = cp;
  return length;
}

}  // namespace

void append_html(std::string& out, std::string_view text) {
  out.reserve(out.size() + text.size());
  while (!text.empty()) {
    std::uint32_t cp = 0;
    const std::size_t length = utf8_sequence(text, cp);
    if (length == 0) {  // one bad byte at a time, as the WHATWG decoder does
      out += kReplacement;
      text.remove_prefix(1);
      continue;
    }
    switch (cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t':
      case '\n': out += static_cast<char>(cp); break;
      default:
        if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
          out += kReplacement;
        } else {
          out.append(text.data(), length);
        }
    }
    text.remove_prefix(length);
  }
}

}  // namespace cumemtrace::analyzer::detail
