// The one table of CUMEMTRACE_* options, read once when the library loads.
// A bad value gets one clear warning and the option's default.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "line_buffer.h"

namespace cumemtrace::preload {

struct Config {
  // CUMEMTRACE_OUTPUT: path template of the trace (%p pid, %h host, %r rank,
  // %t start time, %% a percent sign).
  std::string output_template;
  // CUMEMTRACE_BUFFER_KB: bytes buffered before the writer hands them to the
  // kernel. Larger means fewer write(2) calls, more lost on SIGKILL.
  std::size_t buffer_kb = 0;
  // CUMEMTRACE_STACKS: deepest call stack recorded per event (frames of the
  // application, innermost first); 0 turns stack capture off.
  unsigned stacks = 0;
};

// How options are looked up: getenv in the library, a map in the unit tests.
using EnvLookup = std::function<const char*(const char* name)>;

// Parses every option; warns (through `warn`) about bad values and unknown
// CUMEMTRACE_* names found in `environ_names`.
Config parse_config(const EnvLookup& lookup, const char* const* environ_names);

// The process's configuration, parsed on first use (the library constructor).
const Config& config();

// {"output":"…","buffer_kb":256} — the header's `config` object.
void append_config_json(LineBuffer& out, const Config& config);

}  // namespace cumemtrace::preload
