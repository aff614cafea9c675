// The one table of CUMEMTRACE_* options, read once when the library loads.
// A bad value gets one clear warning and the option's default.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "cumemtrace/pool/pool_config.h"
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

  // CUMEMTRACE_POOL: `caching` (default) serves device memory from our
  // instrumented caching pool; `passthrough` forwards every call, so the
  // trace shows the application's own allocator (DESIGN.md).
  enum class PoolMode : unsigned char { caching, passthrough };
  PoolMode pool = PoolMode::caching;
  // CUMEMTRACE_POOL_CONF: the pool's policy, PYTORCH_CUDA_ALLOC_CONF syntax
  // (pool_config.h). Bad entries are warned about and keep their defaults.
  pool::PoolConfig pool_config;
  // CUMEMTRACE_POOL_SAMPLE_MS: at most one `pool` sample per device this
  // often (taken on the allocation path), and one at the end.
  std::size_t pool_sample_ms = 0;
};

// "caching" / "passthrough", as the header's `pool` field says.
const char* pool_mode_name(Config::PoolMode mode);

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
