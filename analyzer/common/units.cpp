#include "cumemtrace/analyzer/units.h"

#include <array>
#include <cctype>
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

std::string format_hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string format_seconds(std::uint64_t ns) {
  char text[40];
  std::snprintf(text, sizeof text, "%llu.%06llu s", static_cast<unsigned long long>(ns / 1000000000ull),
                static_cast<unsigned long long>((ns % 1000000000ull) / 1000ull));
  return text;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A decimal number "123", "1.5", ".5": its digits as an integer and the count
// of digits after the point. Consumes what it reads from `text`.
struct Decimal {
  unsigned __int128 digits = 0;
  unsigned fraction_digits = 0;
};
std::optional<Decimal> take_decimal(std::string_view& text) {
  Decimal d;
  bool any_digit = false;
  bool point = false;
  std::size_t i = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (!is_digit(c)) break;
    any_digit = true;
    if (d.digits > (~static_cast<unsigned __int128>(0)) / 100) return std::nullopt;  // far beyond 2^64
    d.digits = d.digits * 10 + static_cast<unsigned>(c - '0');
    if (point && ++d.fraction_digits > 18) return std::nullopt;
  }
  if (!any_digit) return std::nullopt;
  text.remove_prefix(i);
  return d;
}

unsigned __int128 power_of_ten(unsigned n) {
  unsigned __int128 p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  text = trim(text);
  const std::optional<Decimal> number = take_decimal(text);
  if (!number) return std::nullopt;
  std::string unit;
  for (char c : trim(text)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  constexpr std::uint64_t KiB = 1024;
  struct Unit {
    std::string_view name;
    std::uint64_t bytes;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", KiB},
      {"ki", KiB},
      {"kib", KiB},
      {"kb", 1000},
      {"m", KiB * KiB},
      {"mi", KiB * KiB},
      {"mib", KiB * KiB},
      {"mb", 1000 * 1000},
      {"g", KiB * KiB * KiB},
      {"gi", KiB * KiB * KiB},
      {"gib", KiB * KiB * KiB},
      {"gb", 1000ull * 1000 * 1000},
      {"t", KiB * KiB * KiB * KiB},
      {"ti", KiB * KiB * KiB * KiB},
      {"tib", KiB * KiB * KiB * KiB},
      {"tb", 1000ull * 1000 * 1000 * 1000},
      {"p", KiB * KiB * KiB * KiB * KiB},
      {"pi", KiB * KiB * KiB * KiB * KiB},
      {"pib", KiB * KiB * KiB * KiB * KiB},
      {"pb", 1000ull * 1000 * 1000 * 1000 * 1000},
  };
  for (const Unit& u : kUnits) {
    if (u.name != unit) continue;
    const unsigned __int128 scaled = number->digits * u.bytes;
    if (number->digits != 0 && scaled / u.bytes != number->digits) return std::nullopt;  // overflow
    const unsigned __int128 divisor = power_of_ten(number->fraction_digits);
    if (scaled % divisor != 0) return std::nullopt;  // not a whole number of bytes
    const unsigned __int128 bytes = scaled / divisor;
    if (bytes > ~std::uint64_t{0}) return std::nullopt;
    return static_cast<std::uint64_t>(bytes);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_count(std::string_view text) {
  text = trim(text);
  if (text.empty() || text.size() > 20) return std::nullopt;
  unsigned __int128 value = 0;
  for (char c : text) {
    if (!is_digit(c)) return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > ~std::uint64_t{0}) return std::nullopt;
  return static_cast<std::uint64_t>(value);
}

std::optional<double> parse_fraction(std::string_view text) {
  text = trim(text);
  const bool percent = !text.empty() && text.back() == '%';
  if (percent) text = trim(text.substr(0, text.size() - 1));
  const std::optional<Decimal> number = take_decimal(text);
  if (!number || !text.empty()) return std::nullopt;
  double value = static_cast<double>(number->digits) / static_cast<double>(power_of_ten(number->fraction_digits));
  if (percent) value /= 100.0;
  if (!(value >= 0.0 && value <= 1.0)) return std::nullopt;
  return value;
}

std::optional<double> parse_percent(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.back() == '%') text = trim(text.substr(0, text.size() - 1));
  const std::optional<Decimal> number = take_decimal(text);
  if (!number || !text.empty()) return std::nullopt;
  return static_cast<double>(number->digits) / static_cast<double>(power_of_ten(number->fraction_digits));
}

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789@%_-+=:,./") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string shell_command(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    line += shell_quote(arg);
  }
  return line;
}

double ratio_of(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

double round4(double x) { return static_cast<double>(static_cast<long long>(x * 10000.0 + 0.5)) / 10000.0; }

std::string format_fixed(double x, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, x);
  return text;
}

}  // namespace cumemtrace::analyzer
