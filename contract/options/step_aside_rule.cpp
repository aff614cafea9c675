#include "options/step_aside_rule.h"

#include <fnmatch.h>

#include <string>

#include "cumemtrace/caching_allocators.h"

namespace cumemtrace::contract {

namespace {

// Calls fn(pattern) for each comma-separated, non-empty entry.
template <typename Fn>
bool any_pattern(std::string_view list, Fn&& fn) {
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view entry = list.substr(0, comma);
    if (!entry.empty() && fn(entry)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

bool steps_aside_for(std::string_view setting, const char* library_path, bool torch_uncached) {
  if (setting == "off" || !library_path || !*library_path) return false;
  if (setting == "auto") {
    for (const CachingAllocatorLibrary& library : kCachingAllocatorLibraries) {
      // PyTorch without its cache allocates per tensor: the pool is the cache.
      if (torch_uncached && library.framework == "PyTorch") continue;
      if (fnmatch(std::string(library.pattern).c_str(), library_path, 0) == 0) return true;
    }
    return false;
  }
  return any_pattern(setting, [&](std::string_view pattern) {
    return fnmatch(std::string(pattern).c_str(), library_path, 0) == 0;
  });
}

std::string_view step_aside_setting_problem(std::string_view setting) {
  if (setting.empty()) return "an empty list";
  if (setting == "auto" || setting == "off") return {};
  bool any = false;
  // The loader names libraries by absolute path, so a pattern without '/'
  // or '*' can match none: a typo, said as such rather than silently inert.
  const bool inert = any_pattern(setting, [&](std::string_view pattern) {
    any = true;
    return pattern.find_first_of("/*") == std::string_view::npos;
  });
  if (!any) return "no pattern in the list";
  if (inert) return "a pattern without '/' or '*' matches no library path";
  return {};
}

}  // namespace cumemtrace::contract
