#include "cumemtrace/analyzer/units.h"

#include <array>
#include <cstdio>

namespace cumemtrace::analyzer {

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::array<const char*, 7> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  // Step up while the value would print as 1024.00 or more in this unit.
  while (unit + 1 < kUnits.size() && value >= 1024.0 - 0.005) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

std::string format_seconds(std::uint64_t ns) {
  char text[40];
  std::snprintf(text, sizeof text, "%llu.%06llu s", static_cast<unsigned long long>(ns / 1000000000ull),
                static_cast<unsigned long long>((ns % 1000000000ull) / 1000ull));
  return text;
}

}  // namespace cumemtrace::analyzer
