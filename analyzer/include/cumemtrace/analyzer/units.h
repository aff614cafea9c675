// How sizes and times are shown to people.
#pragma once

#include <cstdint>
#include <string>

namespace cumemtrace::analyzer {

// "512 B", "1.50 MiB", "80.00 GiB": binary units, two decimals.
std::string format_bytes(std::uint64_t bytes);

// Nanoseconds since the trace started, as seconds: "1.234567 s".
std::string format_seconds(std::uint64_t ns);

}  // namespace cumemtrace::analyzer
