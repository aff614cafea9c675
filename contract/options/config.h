// The one table of CUMEMTRACE_* options, read once when the library loads.
// A bad value gets one clear warning and the option's default. Adding an
// option is one member here (with its default) and one entry in kOptions
// (config.cpp); the header's `config` echo and the warnings follow from it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/pool/pool_config.h"
#include "cumemtrace/trace_format.h"
#include "text/line_buffer.h"

namespace cumemtrace::contract {

// CUMEMTRACE_FORK: what a child forked without exec records.
enum class ForkMode : std::uint8_t {
  trace,  // its own trace file, named from the template with the child's pid
  off,    // nothing: the child runs untraced
};

struct Config {
  // CUMEMTRACE_OUTPUT: path template of the trace (%p pid, %h host, %r rank,
  // %t start time, %% a percent sign); a .zst suffix compresses.
  std::string output_template{format::kDefaultOutputTemplate};
  // CUMEMTRACE_BUFFER_KB: bytes each thread buffers before the background
  // writer is woken to write them out.
  std::size_t buffer_kb = 256;
  // CUMEMTRACE_FLUSH_MS: the longest a recorded event waits before it is
  // handed to the kernel, so a process killed with SIGKILL loses at most
  // this much.
  std::uint32_t flush_ms = 200;
  // CUMEMTRACE_KILL_SAFE: the threads' not-yet-written events live in
  // `<trace>.pending`, memory the kernel keeps when the process is killed
  // (SIGKILL, the OOM killer), so `cumemtrace` can complete such a trace
  // with everything it recorded (pending/pending_log.h); 0 keeps them on the
  // heap, and a kill loses up to CUMEMTRACE_FLUSH_MS of them.
  bool kill_safe = true;
  // CUMEMTRACE_FORK: see ForkMode.
  ForkMode fork = ForkMode::trace;
  // CUMEMTRACE_STACKS: deepest call stack recorded per event (frames of the
  // application, innermost first); 0 turns stack capture off.
  unsigned stacks = 32;
  // CUMEMTRACE_UNWINDER: how stacks are walked. `cfi` (default) reads the
  // unwind tables itself and remembers each thread's recent walks
  // (preload/stacks/frame_walker.h), handing what it cannot walk to
  // libunwind; `libunwind` walks every stack with libunwind alone.
  enum class Unwinder : unsigned char { cfi, libunwind };
  Unwinder unwinder = Unwinder::cfi;
  // CUMEMTRACE_PYTHON: `auto` (default) merges the calling thread's Python
  // frames (function, file, line) into every stack captured while it runs
  // Python code, on CPython 3.9-3.14 (preload/stacks/python_frames.h);
  // `off` keeps native frames only.
  enum class Python : unsigned char { automatic, off };
  Python python = Python::automatic;
  // CUMEMTRACE_FREE_STACKS: whether `free` lines carry a stack of their own.
  // Off by default: only a bad free needs one, and its `error` line has it;
  // on, each allocation pays for two captures.
  bool free_stacks = false;

  // CUMEMTRACE_POOL: `caching` (default) serves device memory from our
  // instrumented caching pool; `passthrough` forwards every call, so the
  // trace shows the application's own allocator (DESIGN.md).
  enum class PoolMode : unsigned char { caching, passthrough };
  PoolMode pool = PoolMode::caching;
  // CUMEMTRACE_POOL_CONF: the pool's policy, PYTORCH_CUDA_ALLOC_CONF syntax
  // (pool_config.h). Bad entries are warned about and keep their defaults.
  pool::PoolConfig pool_config;
  // CUMEMTRACE_POOL_STEP_ASIDE: callers the caching pool leaves to the
  // driver because they cache themselves (preload/hooks/step_aside.h,
  // options/step_aside_rule.h): `auto` (PyTorch's, CuPy's, RMM's, XLA's and
  // TensorFlow's allocators), `off`, or library path patterns.
  std::string pool_step_aside{"auto"};
  // CUMEMTRACE_POOL_SAMPLE_MS: at most one `pool` sample per device this
  // often (taken on the allocation path), and one at the end. Ten a second:
  // a sample is one short line and a few relaxed loads per sub-pool, and it
  // resolves the reserved-memory timeline of a training step finely enough.
  std::size_t pool_sample_ms = 100;

  // Not an option: the launcher's rank variables (format::kHeaderRankEnvNames,
  // same order), read with the options so that the header says where in the
  // job this process started, whatever the program sets later. nullopt:
  // not set.
  std::array<std::optional<std::string>, std::size(format::kHeaderRankEnvNames)> rank_env;
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

// {"output":"…","buffer_kb":256,…} — every option in force, for the header's
// `config` object.
// `extra`: ,"key":value fields written at the end of the object (facts the
// library learnt at run time, such as the Python interpreter it found).
void append_config_json(LineBuffer& out, const Config& config, std::string_view extra = {});

// ,"env":{"NAME":"value",…} — the header's `env` field: each variable of
// format::kHeaderEnvNames that `lookup` finds set, its value escaped as any
// string of a line (invalid UTF-8 becomes U+FFFD). Nothing when none is set.
void append_header_env(LineBuffer& out, const EnvLookup& lookup);

// ,"rank_env":{"RANK":"3",…} — the header's `rank_env` field: each rank
// variable set when `config` was parsed. Nothing when none was set.
void append_header_rank_env(LineBuffer& out, const Config& config);

// The environment variable of every option in the table, in table order
// (the bad-input tests give each of them garbage).
std::vector<std::string_view> option_names();

// Whether `name` is an option this library or another part of cumemtrace
// reads (no "unknown option" warning for it).
bool is_known_option(std::string_view name);

// What is wrong with `value` for the option named `env`, in the words of the
// warning the library would print ("a whole number of milliseconds in
// [1, 600000]" expected), or nullopt if the table takes it. Options the
// table does not parse are not checked. `cumemtrace run` validates its
// flags with this, so the launcher and the library never disagree.
std::optional<std::string> option_value_problem(std::string_view env, std::string_view value);

}  // namespace cumemtrace::contract
