#include "options/config.h"

#include <cstdlib>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "cumemtrace/trace_format.h"
#include "text/diagnostics.h"
#include "options/step_aside_rule.h"

extern char** environ;

namespace cumemtrace::contract {
namespace {

// One option: how its environment variable is read and how it is echoed in
// the header. `parse` leaves the Config untouched and returns false for a
// bad value; the caller then warns once, naming `expected` and the default.
struct OptionSpec {
  std::string_view env;       // CUMEMTRACE_…
  std::string_view key;       // its key in the header's `config`; empty: `echo` writes
                              // ,"key":value fields of its own
  std::string_view expected;  // "a whole number of KiB in [4, 65536]", for the warning
  bool (*parse)(Config&, std::string_view value);
  void (*echo)(LineBuffer&, const Config&);
  // For an option whose parse takes what it can and warns itself: what
  // `cumemtrace run` reports for a value that is not wholly good.
  std::optional<std::string> (*strict_problem)(std::string_view value) = nullptr;
};

// A plain decimal number (no sign, spaces or suffix) in [min, max].
std::optional<std::uint64_t> whole_number_in(std::string_view text, std::uint64_t min,
                                             std::uint64_t max) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}

// The kinds of option, each a template over the Config member it sets, so an
// entry in kOptions is all a new option needs.
template <auto Member, std::uint64_t Min, std::uint64_t Max>
constexpr OptionSpec number(std::string_view env, std::string_view key, std::string_view expected) {
  return {env, key, expected,
          [](Config& c, std::string_view text) {
            const auto v = whole_number_in(text, Min, Max);
            if (v) c.*Member = static_cast<std::remove_reference_t<decltype(c.*Member)>>(*v);
            return v.has_value();
          },
          [](LineBuffer& out, const Config& c) { out.u64(static_cast<std::uint64_t>(c.*Member)); }};
}

template <auto Member>
constexpr OptionSpec non_empty_text(std::string_view env, std::string_view key,
                                    std::string_view expected) {
  return {env, key, expected,
          [](Config& c, std::string_view text) {
            if (text.empty()) return false;
            c.*Member = std::string(text);
            return true;
          },
          [](LineBuffer& out, const Config& c) { out.str(c.*Member); }};
}

template <typename Value>
struct Word {
  std::string_view word;
  Value value;
};
constexpr Word<ForkMode> kForkWords[] = {{"trace", ForkMode::trace}, {"off", ForkMode::off}};
constexpr Word<Config::Unwinder> kUnwinderWords[] = {{"cfi", Config::Unwinder::cfi},
                                                     {"libunwind", Config::Unwinder::libunwind}};
constexpr Word<Config::Python> kPythonWords[] = {{"auto", Config::Python::automatic},
                                                 {"off", Config::Python::off}};
constexpr Word<Config::PoolMode> kPoolWords[] = {{"caching", Config::PoolMode::caching},
                                                 {"passthrough", Config::PoolMode::passthrough}};

// One of a fixed set of words, e.g. {trace, off}.
template <auto Member, const auto& Words>
constexpr OptionSpec word(std::string_view env, std::string_view key, std::string_view expected) {
  return {env, key, expected,
          [](Config& c, std::string_view text) {
            for (const auto& w : Words) {
              if (w.word == text) {
                c.*Member = w.value;
                return true;
              }
            }
            return false;
          },
          [](LineBuffer& out, const Config& c) {
            for (const auto& w : Words) {
              if (w.value == c.*Member) out.str(w.word);
            }
          }};
}

// A switch: 0 or 1, echoed as false or true.
template <auto Member>
constexpr OptionSpec on_off(std::string_view env, std::string_view key, std::string_view expected) {
  return {env, key, expected,
          [](Config& c, std::string_view text) {
            if (text != "0" && text != "1") return false;
            c.*Member = text == "1";
            return true;
          },
          [](LineBuffer& out, const Config& c) { out.raw(c.*Member ? "true" : "false"); }};
}

// CUMEMTRACE_POOL_CONF, read by the pool's own parser: the good entries
// apply and each bad one keeps its default with a warning of its own. The
// echo is the pool's whole policy, flat in `config` (TRACE_FORMAT.md's
// example shows max_split_size there), as the pool library describes it, so
// `cumemtrace replay` and the header name the settings alike.
constexpr OptionSpec pool_conf() {
  return {"CUMEMTRACE_POOL_CONF", "", "key:value entries (pool_config.h)",
          [](Config& c, std::string_view text) {
            const pool::PoolConfigParse parsed = pool::parse_pool_config(text);
            for (const std::string& error : parsed.errors) {
              warn("CUMEMTRACE_POOL_CONF: %s; that entry keeps its default", error.c_str());
            }
            c.pool_config = parsed.config;
            return true;
          },
          [](LineBuffer& out, const Config& c) {
            const std::string object = pool::pool_config_json(c.pool_config);
            if (object.size() > 2) out.ch(',').raw(std::string_view(object).substr(1, object.size() - 2));
          },
          [](std::string_view text) -> std::optional<std::string> {
            const pool::PoolConfigParse parsed = pool::parse_pool_config(text);
            if (parsed.ok()) return std::nullopt;
            return parsed.errors.front();
          }};
}

// CUMEMTRACE_POOL_STEP_ASIDE: auto, off or fnmatch patterns
// (options/step_aside_rule.h).
constexpr OptionSpec pool_step_aside() {
  return {"CUMEMTRACE_POOL_STEP_ASIDE", "pool_step_aside",
          "'auto', 'off' or comma-separated library path patterns",
          [](Config& c, std::string_view text) {
            if (!step_aside_setting_problem(text).empty()) return false;
            c.pool_step_aside = std::string(text);
            return true;
          },
          [](LineBuffer& out, const Config& c) { out.str(c.pool_step_aside); }};
}

constexpr OptionSpec kOptions[] = {
    non_empty_text<&Config::output_template>("CUMEMTRACE_OUTPUT", "output",
                                             "a non-empty path template"),
    number<&Config::buffer_kb, 4, 64 * 1024>("CUMEMTRACE_BUFFER_KB", "buffer_kb",
                                             "a whole number of KiB in [4, 65536]"),
    number<&Config::flush_ms, 1, 600'000>("CUMEMTRACE_FLUSH_MS", "flush_ms",
                                          "a whole number of milliseconds in [1, 600000]"),
    on_off<&Config::kill_safe>("CUMEMTRACE_KILL_SAFE", "kill_safe", "'0' or '1'"),
    word<&Config::fork, kForkWords>("CUMEMTRACE_FORK", "fork", "'trace' or 'off'"),
    number<&Config::stacks, 0, 256>("CUMEMTRACE_STACKS", "stacks",  // 256: StackTable::kMaxDepth
                                    "a stack depth in [0, 256] (0: no stacks)"),
    word<&Config::unwinder, kUnwinderWords>("CUMEMTRACE_UNWINDER", "unwinder", "'cfi' or 'libunwind'"),
    word<&Config::python, kPythonWords>("CUMEMTRACE_PYTHON", "python", "'auto' or 'off'"),
    on_off<&Config::free_stacks>("CUMEMTRACE_FREE_STACKS", "free_stacks", "'0' or '1'"),
    word<&Config::pool, kPoolWords>("CUMEMTRACE_POOL", "pool", "'caching' or 'passthrough'"),
    number<&Config::pool_sample_ms, 1, 3'600'000>("CUMEMTRACE_POOL_SAMPLE_MS", "pool_sample_ms",
                                                  "a whole number of milliseconds in [1, 3600000]"),
    pool_conf(),
    pool_step_aside(),
};
static_assert(!kOptions[0].key.empty(), "the first option's echo opens the object");

// Read by other parts of cumemtrace, or by parts of this library that parse
// them on their own: known, so no "unknown option" warning. An option moves
// from here into kOptions when this library's table starts to parse it.
constexpr std::string_view kKnownElsewhere[] = {
    "CUMEMTRACE_LIBRARY",          // `cumemtrace run`: where libcumemtrace.so is
    "CUMEMTRACE_BUILD_DIR",        // scripts/build.sh, test.sh: often exported while testing
    "CUMEMTRACE_BENCH_BUILD_DIR",  // scripts/bench.sh
};

constexpr bool parsed_here_and_elsewhere() {
  for (const auto& o : kOptions) {
    for (auto n : kKnownElsewhere) {
      if (o.env == n) return true;
    }
  }
  return false;
}
static_assert(!parsed_here_and_elsewhere(), "move an option out of kKnownElsewhere when kOptions parses it");

}  // namespace

std::vector<std::string_view> option_names() {
  std::vector<std::string_view> names;
  for (const auto& o : kOptions) names.push_back(o.env);
  return names;
}

bool is_known_option(std::string_view name) {
  for (const auto& o : kOptions) {
    if (name == o.env) return true;
  }
  for (auto n : kKnownElsewhere) {
    if (name == n) return true;
  }
  return false;
}

std::optional<std::string> option_value_problem(std::string_view env, std::string_view value) {
  for (const auto& o : kOptions) {
    if (o.env != env) continue;
    if (o.strict_problem != nullptr) return o.strict_problem(value);
    Config scratch;
    if (o.parse(scratch, value)) return std::nullopt;
    return "expected " + std::string(o.expected);
  }
  return std::nullopt;
}

Config parse_config(const EnvLookup& lookup, const char* const* environ_names) {
  Config c;
  const Config defaults;
  for (const auto& o : kOptions) {
    const char* value = lookup(std::string(o.env).c_str());
    if (value == nullptr || o.parse(c, value)) continue;
    LineBuffer default_text;
    o.echo(default_text, defaults);
    warn("%.*s='%s' is not %.*s; using %.*s", static_cast<int>(o.env.size()), o.env.data(), value,
         static_cast<int>(o.expected.size()), o.expected.data(),
         static_cast<int>(default_text.view().size()), default_text.view().data());
  }
  for (std::size_t i = 0; i < c.rank_env.size(); ++i) {
    if (const char* value = lookup(format::kHeaderRankEnvNames[i])) c.rank_env[i] = value;
  }
  for (auto e = environ_names; e && *e; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("CUMEMTRACE_")) continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    if (!is_known_option(name)) {
      warn("unknown option %.*s ignored", static_cast<int>(name.size()), name.data());
    }
  }
  return c;
}

const Config& config() {
  static const Config parsed = parse_config([](const char* n) { return std::getenv(n); }, environ);
  return parsed;
}

void append_config_json(LineBuffer& out, const Config& c, std::string_view extra) {
  char separator = '{';
  for (const auto& o : kOptions) {
    if (o.key.empty()) {
      o.echo(out, c);  // fields of its own, each after a comma
      continue;
    }
    out.ch(separator).ch('"').raw(o.key).raw("\":");
    o.echo(out, c);
    separator = ',';
  }
  out.raw(extra);
  out.ch('}');
}

namespace {
// ,"KEY":{"NAME":"value",…}: each of `names` that `lookup` finds set, in
// order; nothing when none is.
void append_variables(LineBuffer& out, std::string_view key, std::span<const char* const> names,
                      const EnvLookup& lookup) {
  bool first = true;
  for (const char* name : names) {
    const char* value = lookup(name);
    if (value == nullptr) continue;
    if (first) out.key(key).ch('{');
    else out.ch(',');
    out.str(name).ch(':').str(value);
    first = false;
  }
  if (!first) out.ch('}');
}
}  // namespace

void append_header_env(LineBuffer& out, const EnvLookup& lookup) {
  append_variables(out, "env", format::kHeaderEnvNames, lookup);
}

void append_header_rank_env(LineBuffer& out, const Config& config) {
  append_variables(out, "rank_env", format::kHeaderRankEnvNames, [&config](const char* name) -> const char* {
    for (std::size_t i = 0; i < config.rank_env.size(); ++i) {
      if (std::string_view(format::kHeaderRankEnvNames[i]) == name && config.rank_env[i]) {
        return config.rank_env[i]->c_str();
      }
    }
    return nullptr;
  });
}

const char* pool_mode_name(Config::PoolMode mode) {
  return mode == Config::PoolMode::passthrough ? "passthrough" : "caching";
}

}  // namespace cumemtrace::contract
