// Creating the trace file (TRACE_FORMAT.md, File naming); the name comes
// from include/cumemtrace/output_template.h.
#pragma once

#include <string>

namespace cumemtrace::preload {

// Creates `path` exclusively (O_EXCL), never following a symlink, mode 0600.
// Returns the descriptor, or -errno.
int create_trace_file(const std::string& path);

}  // namespace cumemtrace::preload
