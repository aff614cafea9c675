// Phase marks from the application (cumemtrace.h, NVTX): what a `mark`
// event needs besides the recorder — the nesting of ranges, so a pop can
// name the range it closes, and wide NVTX strings as UTF-8.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cumemtrace::preload {

// The open ranges of one thread. NVTX nests ranges per domain, so each range
// is kept with the domain it was pushed in (nullptr: NVTX's default domain).
class RangeStack {
 public:
  struct Popped {
    int level = 0;  // 0 for an outermost range, as nvtxRangePop returns
    std::string name;
  };

  // Opens a range; returns its level within `domain`.
  int push(const void* domain, std::string_view name);
  // Closes the innermost open range of `domain`, if there is one.
  std::optional<Popped> pop(const void* domain);

 private:
  struct Open {
    const void* domain;
    std::string name;
  };
  std::vector<Open> open_;
};

// A NUL-terminated wchar_t string (UTF-32 on Linux) as UTF-8; code units
// that are not Unicode scalar values become U+FFFD.
std::string utf8_from_wide(const wchar_t* text);

}  // namespace cumemtrace::preload
