// How sizes and times are shown to people.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cumemtrace::analyzer {

// "512 B", "1.50 MiB", "80.00 GiB": binary units, two decimals.
std::string format_bytes(std::uint64_t bytes);

// "0x7f3a00200000"
std::string format_hex(std::uint64_t value);

// part / whole, 0 when whole is 0.
double ratio_of(std::uint64_t part, std::uint64_t whole);

// A ratio rounded to 4 decimals, so that JSON output is stable across
// platforms.
double round4(double x);

// x with `decimals` digits after the point: "1.149".
std::string format_fixed(double x, int decimals);

// An argument quoted the way a POSIX shell needs it, so that a command line
// shown can be pasted back: as it is when it has only safe characters, else
// in single quotes ("it's" -> 'it'\''s').
std::string shell_quote(const std::string& arg);

// A command line from its arguments, each quoted as shell_quote does.
std::string shell_command(const std::vector<std::string>& argv);

// Nanoseconds since the trace started, as seconds: "1.234567 s".
std::string format_seconds(std::uint64_t ns);

// A size as people write it on a command line, in bytes: "4096", "512MiB",
// "1.5 GB". Binary units KiB MiB GiB TiB PiB (and K M G T P, as in most
// tools), decimal units kB MB GB TB PB, and B; units are case-insensitive
// except that "b" alone is refused (bits?). A fraction must come to a whole
// number of bytes. nullopt for anything else (negative, garbage, > 2^64-1).
std::optional<std::uint64_t> parse_size(std::string_view text);

// A count: digits only. nullopt otherwise or beyond 2^64-1.
std::optional<std::uint64_t> parse_count(std::string_view text);

// A ratio in [0, 1]: "0.25" or "25%".
std::optional<double> parse_fraction(std::string_view text);

// A non-negative percentage: "10" or "10%" give 10, "2.5" 2.5.
std::optional<double> parse_percent(std::string_view text);

}  // namespace cumemtrace::analyzer
