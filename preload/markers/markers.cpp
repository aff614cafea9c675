#include "markers/markers.h"

#include <algorithm>
#include <cstdint>

namespace cumemtrace::preload {

int RangeStack::push(const void* domain, std::string_view name) {
  const auto level = std::count_if(open_.begin(), open_.end(),
                                   [&](const Open& o) { return o.domain == domain; });
  open_.push_back(Open{domain, std::string(name)});
  return static_cast<int>(level);
}

std::optional<RangeStack::Popped> RangeStack::pop(const void* domain) {
  const auto innermost = std::find_if(open_.rbegin(), open_.rend(),
                                      [&](const Open& o) { return o.domain == domain; });
  if (innermost == open_.rend()) return std::nullopt;
  const auto at = std::prev(innermost.base());
  Popped popped;
  popped.level = static_cast<int>(
      std::count_if(open_.begin(), at, [&](const Open& o) { return o.domain == domain; }));
  popped.name = std::move(at->name);
  open_.erase(at);
  return popped;
}

std::string utf8_from_wide(const wchar_t* text) {
  std::string out;
  if (text == nullptr) return out;
  for (; *text != L'\0'; ++text) {
    auto cp = static_cast<std::uint32_t>(*text);
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) cp = 0xfffd;
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }
  return out;
}

}  // namespace cumemtrace::preload
