#include "config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "cumemtrace/trace_format.h"
#include "diagnostics.h"

extern char** environ;

namespace cumemtrace::preload {
namespace {

constexpr std::size_t kDefaultBufferKb = 256;
constexpr std::size_t kMinBufferKb = 4;
constexpr std::size_t kMaxBufferKb = 64 * 1024;
constexpr unsigned kDefaultStacks = 32;
constexpr unsigned kMaxStacks = 256;  // StackTable::kMaxDepth
// Ten samples a second: a pool sample is one short line and a few relaxed
// loads per sub-pool, so this costs nothing measurable, and it resolves the
// reserved-memory timeline of a training step finely enough.
constexpr std::size_t kDefaultPoolSampleMs = 100;
constexpr std::size_t kMaxPoolSampleMs = 3'600'000;

// Options read by other parts of cumemtrace (the CLI), not by this library;
// they are known, so no "unknown option" warning is printed for them.
constexpr std::string_view kKnownElsewhere[] = {"CUMEMTRACE_LIBRARY"};

struct OptionSpec {
  const char* name;
  void (*apply)(Config&, const char* value);
};

void apply_output(Config& c, const char* value) {
  if (*value == '\0') {
    warn("CUMEMTRACE_OUTPUT is empty; using the default '%s'", format::kDefaultOutputTemplate);
    return;
  }
  c.output_template = value;
}

// A plain decimal number in [min, max] (no sign, spaces or suffix).
std::optional<unsigned long long> whole_number_in(const char* value, unsigned long long min,
                                                  unsigned long long max) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value, &end, 10);
  const bool numeric = *value >= '0' && *value <= '9' && end != value && *end == '\0' && errno == 0;
  if (!numeric || v < min || v > max) return std::nullopt;
  return v;
}

void apply_buffer_kb(Config& c, const char* value) {
  const auto v = whole_number_in(value, kMinBufferKb, kMaxBufferKb);
  if (!v) {
    warn("CUMEMTRACE_BUFFER_KB='%s' is not a whole number of KiB in [%zu, %zu]; using %zu",
         value, kMinBufferKb, kMaxBufferKb, kDefaultBufferKb);
    return;
  }
  c.buffer_kb = static_cast<std::size_t>(*v);
}

void apply_stacks(Config& c, const char* value) {
  const auto v = whole_number_in(value, 0, kMaxStacks);
  if (!v) {
    warn("CUMEMTRACE_STACKS='%s' is not a stack depth in [0, %u] (0: no stacks); using %u", value,
         kMaxStacks, kDefaultStacks);
    return;
  }
  c.stacks = static_cast<unsigned>(*v);
}

void apply_pool(Config& c, const char* value) {
  const std::string_view v(value);
  if (v == "caching") {
    c.pool = Config::PoolMode::caching;
  } else if (v == "passthrough") {
    c.pool = Config::PoolMode::passthrough;
  } else {
    warn("CUMEMTRACE_POOL='%s' is neither 'caching' nor 'passthrough'; using 'caching'", value);
  }
}

void apply_pool_conf(Config& c, const char* value) {
  pool::PoolConfigParse parsed = pool::parse_pool_config(value);
  // Each bad entry keeps its default; the good ones apply (pool_config.h).
  for (const std::string& error : parsed.errors) {
    warn("CUMEMTRACE_POOL_CONF: %s; that entry keeps its default", error.c_str());
  }
  c.pool_config = parsed.config;
}

void apply_pool_sample_ms(Config& c, const char* value) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value, &end, 10);
  const bool numeric = *value >= '0' && *value <= '9' && end != value && *end == '\0' && errno == 0;
  if (!numeric || v < 1 || v > kMaxPoolSampleMs) {
    warn("CUMEMTRACE_POOL_SAMPLE_MS='%s' is not a whole number of milliseconds in [1, %zu]; using %zu",
         value, kMaxPoolSampleMs, kDefaultPoolSampleMs);
    return;
  }
  c.pool_sample_ms = static_cast<std::size_t>(v);
}

constexpr OptionSpec kOptions[] = {
    {"CUMEMTRACE_OUTPUT", apply_output},
    {"CUMEMTRACE_BUFFER_KB", apply_buffer_kb},
    {"CUMEMTRACE_STACKS", apply_stacks},
    {"CUMEMTRACE_POOL", apply_pool},
    {"CUMEMTRACE_POOL_CONF", apply_pool_conf},
    {"CUMEMTRACE_POOL_SAMPLE_MS", apply_pool_sample_ms},
};

// The pool's own options, flat in the header's `config` (TRACE_FORMAT.md's
// example shows max_split_size there), written by the pool library's
// describer so `cumemtrace replay` and the header name them alike.
void append_pool_config_json(LineBuffer& out, const pool::PoolConfig& pool_config) {
  const std::string object = pool::pool_config_json(pool_config);
  if (object.size() > 2) out.ch(',').raw(std::string_view(object).substr(1, object.size() - 2));
}

bool is_known(std::string_view name) {
  for (const auto& o : kOptions) {
    if (name == o.name) return true;
  }
  for (auto n : kKnownElsewhere) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

Config parse_config(const EnvLookup& lookup, const char* const* environ_names) {
  Config c;
  c.output_template = format::kDefaultOutputTemplate;
  c.buffer_kb = kDefaultBufferKb;
  c.stacks = kDefaultStacks;
  c.pool_sample_ms = kDefaultPoolSampleMs;
  for (const auto& o : kOptions) {
    if (const char* v = lookup(o.name)) o.apply(c, v);
  }
  for (auto e = environ_names; e && *e; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("CUMEMTRACE_")) continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    if (!is_known(name)) {
      warn("unknown option %.*s ignored", static_cast<int>(name.size()), name.data());
    }
  }
  return c;
}

const Config& config() {
  static const Config parsed = parse_config([](const char* n) { return std::getenv(n); }, environ);
  return parsed;
}

void append_config_json(LineBuffer& out, const Config& c) {
  out.raw("{\"output\":").str(c.output_template);
  out.field("buffer_kb", c.buffer_kb);
  out.field("stacks", c.stacks);
  out.key("pool").str(pool_mode_name(c.pool));
  out.field("pool_sample_ms", c.pool_sample_ms);
  append_pool_config_json(out, c.pool_config);
  out.ch('}');
}

const char* pool_mode_name(Config::PoolMode mode) {
  return mode == Config::PoolMode::passthrough ? "passthrough" : "caching";
}

}  // namespace cumemtrace::preload
