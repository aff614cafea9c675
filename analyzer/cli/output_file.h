// Writes a command's output to stdout, or to a file atomically: into a
// temporary file beside it, renamed over it only once everything is written,
// so a failed write never leaves half a report behind.
#pragma once

#include <string>
#include <string_view>

namespace cumemtrace::cli {

// Returns an empty string on success, else one line saying what failed.
std::string write_output(const std::string& path, std::string_view content);

}  // namespace cumemtrace::cli
