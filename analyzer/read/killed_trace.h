// Completing a killed process's trace before reading it (killed_trace.cpp).
#pragma once

#include <string>

namespace cumemtrace::analyzer::detail {

// If `path`'s process died without writing `end` and left its pending file,
// appends what it had recorded and `end` (reason `killed`), saying so on
// stderr in one line; a trace still being written is left alone. Never throws.
void complete_killed_trace(const std::string& path);

// `end`'s live and live_bytes for a trace without one: what it allocated
// and did not free.
std::string live_fields(const std::string& path);

}  // namespace cumemtrace::analyzer::detail
