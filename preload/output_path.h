// Where the trace goes: CUMEMTRACE_OUTPUT's template expanded for this
// process, and the file created exclusively (TRACE_FORMAT.md, File naming).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cumemtrace::preload {

struct TemplateValues {
  long pid = 0;
  std::string host;
  std::string rank;             // RANK, else LOCAL_RANK, else "0"
  std::uint64_t start_unix_ns = 0;
};

// %p → pid, %h → host, %r → rank, %t → start time (UTC, 20261121T174929Z),
// %% → '%'. Any other %x is kept as written. Host and rank are reduced to
// characters that are safe in a file name.
std::string expand_output_template(std::string_view tmpl, const TemplateValues& values);

// The rank of this process in a distributed job, from the environment.
std::string rank_from_environment();

// Creates `path` exclusively (O_EXCL), never following a symlink, mode 0600.
// Returns the descriptor, or -errno.
int create_trace_file(const std::string& path);

}  // namespace cumemtrace::preload
