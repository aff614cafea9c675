// The trace schema as the line decoder sees it: every field's name and value
// type, each event's required and optional fields (TRACE_FORMAT.md), and the
// per-line state that checks a decoded line against them. Internal to
// line_parser.cpp; a header only to keep that file short.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "read/line_parser.h"
#include "read/line_scan.h"
#include "read/name_table.h"

namespace cumemtrace::analyzer::detail {

using format::Event;

// How a field's value is checked and stored.
enum class ValueKind : std::uint8_t {
  string,
  uint,     // non-negative integer
  int_,     // any 64-bit signed integer
  hex,      // "0x…" string
  ordinal,  // integer 0..INT_MAX (device)
  complex,  // arrays and objects (argv, frames, config, env), decoded apart
};

struct FieldInfo {
  std::string_view name;
  ValueKind kind;
};

// Indexed by Field.
inline constexpr std::array<FieldInfo, static_cast<std::size_t>(Field::count_)> kFields{{
    {"ev", ValueKind::string},           {"format", ValueKind::string},
    {"version", ValueKind::int_},        {"pid", ValueKind::int_},
    {"ppid", ValueKind::int_},           {"host", ValueKind::string},
    {"exe", ValueKind::string},          {"argv", ValueKind::complex},
    {"start_unix_ns", ValueKind::uint},  {"pool", ValueKind::string},
    {"config", ValueKind::complex},      {"env", ValueKind::complex},
    {"rank_env", ValueKind::complex},
    {"t", ValueKind::uint},
    {"tid", ValueKind::uint},            {"dev", ValueKind::ordinal},
    {"name", ValueKind::string},         {"total", ValueKind::uint},
    {"id", ValueKind::uint},             {"frames", ValueKind::complex},
    {"api", ValueKind::string},          {"kind", ValueKind::string},
    {"ptr", ValueKind::hex},             {"size", ValueKind::uint},
    {"block", ValueKind::uint},          {"stream", ValueKind::hex},
    {"stack", ValueKind::uint},          {"allocated", ValueKind::uint},
    {"reserved", ValueKind::uint},       {"cached_free", ValueKind::uint},
    {"largest_free", ValueKind::uint},   {"device_free", ValueKind::uint},
    {"device_total", ValueKind::uint},   {"cause", ValueKind::string},
    {"free_blocks", ValueKind::uint},    {"inactive_split", ValueKind::uint},
    {"what", ValueKind::string},         {"reason", ValueKind::string},
    {"live", ValueKind::uint},           {"live_bytes", ValueKind::uint},
    {"dropped", ValueKind::uint},
    {"graph", ValueKind::hex},           {"exec", ValueKind::hex},
    {"used", ValueKind::uint},
}};

constexpr FieldMask bit(Field f) { return FieldMask{1} << static_cast<unsigned>(f); }

template <typename... F>
constexpr FieldMask bits(F... f) {
  return (bit(f) | ...);
}

struct Schema {
  FieldMask required = 0;
  FieldMask optional = 0;
};

// Required and optional fields of each event, from TRACE_FORMAT.md.
constexpr std::array<Schema, static_cast<std::size_t>(Event::unknown) + 1> kSchemas = [] {
  using F = Field;
  std::array<Schema, static_cast<std::size_t>(Event::unknown) + 1> s{};
  auto at = [&](Event e) -> Schema& { return s[static_cast<std::size_t>(e)]; };
  // Only format and version decide whether a header is readable; the rest is
  // informational and may differ in other writers.
  at(Event::header) = {bits(F::ev, F::format, F::version),
                       bits(F::pid, F::ppid, F::host, F::exe, F::argv, F::start_unix_ns, F::pool,
                            F::config, F::env, F::rank_env)};
  at(Event::device) = {bits(F::ev, F::t, F::dev, F::name, F::total), 0};
  at(Event::stack) = {bits(F::ev, F::id, F::frames), 0};
  const FieldMask memory_op =
      bits(F::ev, F::t, F::tid, F::api, F::kind, F::dev, F::ptr, F::size, F::stack);
  at(Event::alloc) = {memory_op, bits(F::block, F::stream)};
  at(Event::free) = {memory_op, bits(F::stream)};
  at(Event::segment_alloc) = {bits(F::ev, F::t, F::dev, F::ptr, F::size, F::api), 0};
  at(Event::segment_free) = {bits(F::ev, F::t, F::dev, F::ptr, F::size), bits(F::api)};
  at(Event::oom) = {bits(F::ev, F::t, F::tid, F::api, F::dev, F::size, F::block, F::allocated,
                         F::reserved, F::cached_free, F::largest_free, F::device_free,
                         F::device_total, F::cause, F::stack),
                    bits(F::stream)};
  at(Event::pool) = {bits(F::ev, F::t, F::dev, F::allocated, F::reserved, F::cached_free,
                          F::largest_free, F::free_blocks, F::inactive_split),
                     0};
  // A graph launch's mark names its executable graph (README, "Additions to
  // the trace format"), as do the graph events.
  at(Event::mark) = {bits(F::ev, F::t, F::tid, F::name, F::kind), bits(F::exec)};
  at(Event::error) = {bits(F::ev, F::t, F::tid, F::api, F::ptr, F::what, F::stack), 0};
  at(Event::end) = {bits(F::ev, F::t, F::reason, F::live, F::live_bytes, F::dropped), 0};
  at(Event::graph_alloc) = {bits(F::ev, F::t, F::tid, F::api, F::dev, F::graph, F::ptr, F::size, F::stack), 0};
  at(Event::graph_exec) = {bits(F::ev, F::t, F::tid, F::api, F::graph, F::exec), bits(F::stack)};
  at(Event::graph_destroy) = {bits(F::ev, F::t, F::tid, F::api), bits(F::graph, F::exec)};
  at(Event::graph_mem) = {bits(F::ev, F::t, F::api, F::dev, F::used, F::reserved), 0};
  return s;
}();

constexpr auto kFieldNames = [] {
  std::array<std::string_view, kFields.size()> names{};
  for (std::size_t i = 0; i < kFields.size(); ++i) names[i] = kFields[i].name;
  return names;
}();
constexpr NameTable<Field, kFields.size()> kFieldTable(kFieldNames);

inline Field lookup_field(std::string_view key) { return kFieldTable.find(key, Field::count_); }

// A field's name followed by its closing quote, as two masked 64-bit words:
// whether a raw key is that name is then two loads and no branch, which the
// decoder uses to confirm the field it expects next (see FieldPrediction).
struct KeyPattern {
  std::array<std::uint64_t, 2> word{};
  std::array<std::uint64_t, 2> mask{};
};
static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big);
constexpr auto kKeyPatterns = [] {
  std::array<KeyPattern, kFields.size()> patterns{};
  for (std::size_t f = 0; f < kFields.size(); ++f) {
    std::string_view name = kFields[f].name;
    if (name.size() + 1 > 16) throw "field name too long for a key pattern";
    for (std::size_t i = 0; i <= name.size(); ++i) {
      const std::uint64_t byte = static_cast<unsigned char>(i < name.size() ? name[i] : '"');
      const unsigned shift = std::endian::native == std::endian::little ? 8 * (i % 8) : 8 * (7 - i % 8);
      patterns[f].word[i / 8] |= byte << shift;
      patterns[f].mask[i / 8] |= std::uint64_t{0xFF} << shift;
    }
  }
  return patterns;
}();

// `raw` points just after a key's opening quote, with at least 16 readable
// bytes (the line's padding guarantees them).
inline bool key_is(const char* raw, Field f) {
  const KeyPattern& p = kKeyPatterns[static_cast<std::size_t>(f)];
  std::uint64_t low = 0;
  std::uint64_t high = 0;
  std::memcpy(&low, raw, 8);
  std::memcpy(&high, raw + 8, 8);
  return (((low ^ p.word[0]) & p.mask[0]) | ((high ^ p.word[1]) & p.mask[1])) == 0;
}

// Lines of one event kind come from one writer, with their fields in the
// same order: the decoder remembers each kind's last order and expects it
// again, so a line in the usual shape costs one key_is() per field and
// well-predicted branches. Any other order still decodes, through lookup_field.
class FieldPrediction {
 public:
  static constexpr std::size_t kMaxFields = 24;

  // The field expected at `position` in a line of event `ev` (unknown before
  // `ev` is known: the writer puts it first).
  Field expected(Event ev, std::size_t position) const {
    if (ev == Event::unknown) return position == 0 ? Field::ev : Field::count_;
    const Order& order = orders_[static_cast<std::size_t>(ev)];
    return position < order.count ? order.fields[position] : Field::count_;
  }
  void remember(Event ev, const std::array<Field, kMaxFields>& fields, std::size_t count) {
    Order& order = orders_[static_cast<std::size_t>(ev)];
    order.count = static_cast<std::uint8_t>(std::min(count, kMaxFields));
    std::copy_n(fields.begin(), order.count, order.fields.begin());
  }

 private:
  struct Order {
    std::array<Field, kMaxFields> fields{};
    std::uint8_t count = 0;
  };
  std::array<Order, static_cast<std::size_t>(Event::unknown) + 1> orders_{};
};

// Event and memory-kind names, spelt by trace_format.h.
constexpr std::size_t kKnownEvents = static_cast<std::size_t>(Event::unknown);
constexpr auto kEventNames = [] {
  std::array<std::string_view, kKnownEvents> names{};
  for (std::size_t i = 0; i < kKnownEvents; ++i) names[i] = format::name(static_cast<Event>(i));
  return names;
}();
constexpr NameTable<Event, kKnownEvents> kEventTable(kEventNames);

constexpr std::size_t kKnownMemoryKinds = static_cast<std::size_t>(format::MemoryKind::unknown);
constexpr auto kMemoryKindNames = [] {
  std::array<std::string_view, kKnownMemoryKinds> names{};
  for (std::size_t i = 0; i < kKnownMemoryKinds; ++i) names[i] = format::name(static_cast<format::MemoryKind>(i));
  return names;
}();
constexpr NameTable<format::MemoryKind, kKnownMemoryKinds> kMemoryKindTable(kMemoryKindNames);

struct Scalar {
  enum class Type : std::uint8_t { string, unsigned_integer, negative_integer, null, other };
  Type type = Type::other;
  std::string_view text;
  std::uint64_t u = 0;
  std::int64_t i = 0;
  std::optional<bool> boolean;  // set for true and false (Type::other)
};

// Where each string and integer field is stored in a TraceEvent: a table
// lookup per field instead of a switch. Which entries are set is in the
// masks: a value-initialised member pointer in a constant expression is
// not reliably null (GCC gives it offset 0, a real member).
using StringMember = std::string_view TraceEvent::*;
using UintMember = std::uint64_t TraceEvent::*;
constexpr auto kStringMembers = [] {
  std::array<StringMember, kFields.size()> m{};
  auto at = [&](Field f) -> StringMember& { return m[static_cast<std::size_t>(f)]; };
  at(Field::format) = &TraceEvent::format_name;
  at(Field::host) = &TraceEvent::host;
  at(Field::exe) = &TraceEvent::exe;
  at(Field::pool) = &TraceEvent::pool;
  at(Field::name) = &TraceEvent::name;
  at(Field::api) = &TraceEvent::api;
  at(Field::kind) = &TraceEvent::kind;
  at(Field::cause) = &TraceEvent::cause;
  at(Field::what) = &TraceEvent::what;
  at(Field::reason) = &TraceEvent::reason;
  return m;
}();
constexpr auto kUintMembers = [] {
  std::array<UintMember, kFields.size()> m{};
  auto at = [&](Field f) -> UintMember& { return m[static_cast<std::size_t>(f)]; };
  at(Field::start_unix_ns) = &TraceEvent::start_unix_ns;
  at(Field::t) = &TraceEvent::t;
  at(Field::tid) = &TraceEvent::tid;
  at(Field::total) = &TraceEvent::total;
  at(Field::id) = &TraceEvent::id;
  at(Field::size) = &TraceEvent::size;
  at(Field::stack) = &TraceEvent::stack;
  at(Field::allocated) = &TraceEvent::allocated;
  at(Field::reserved) = &TraceEvent::reserved;
  at(Field::cached_free) = &TraceEvent::cached_free;
  at(Field::largest_free) = &TraceEvent::largest_free;
  at(Field::device_free) = &TraceEvent::device_free;
  at(Field::device_total) = &TraceEvent::device_total;
  at(Field::free_blocks) = &TraceEvent::free_blocks;
  at(Field::inactive_split) = &TraceEvent::inactive_split;
  at(Field::live) = &TraceEvent::live;
  at(Field::live_bytes) = &TraceEvent::live_bytes;
  at(Field::dropped) = &TraceEvent::dropped;
  at(Field::used) = &TraceEvent::used;
  return m;
}();
constexpr FieldMask kStringMemberFields = bits(Field::format, Field::host, Field::exe, Field::pool, Field::name,
                                               Field::api, Field::kind, Field::cause, Field::what, Field::reason);
constexpr FieldMask kUintMemberFields =
    bits(Field::start_unix_ns, Field::t, Field::tid, Field::total, Field::id, Field::size, Field::stack,
         Field::allocated, Field::reserved, Field::cached_free, Field::largest_free, Field::device_free,
         Field::device_total, Field::free_blocks, Field::inactive_split, Field::live, Field::live_bytes,
         Field::dropped, Field::used);

// Per-line decoding state: which fields were seen, which had the wrong type.
struct LineState {
  // `stored` (if given) holds the fields the previous line stored into the
  // event: at the end, those this line did not store are reset, and it then
  // holds this line's.
  explicit LineState(TraceEvent& event, FieldMask* stored = nullptr) : out(event), stored_(stored) {}
  ~LineState() {
    if (stored_ == nullptr) return;
    reset_fields(out, *stored_ & ~seen);
    *stored_ = seen;
  }

  // Back to its default, each field of `mask`.
  static void reset_fields(TraceEvent& out, FieldMask mask) {
    while (mask != 0) {
      const Field f = static_cast<Field>(std::countr_zero(mask));
      mask &= mask - 1;
      const auto i = static_cast<std::size_t>(f);
      if (kStringMemberFields & bit(f)) {
        out.*kStringMembers[i] = {};
      } else if (kUintMemberFields & bit(f)) {
        out.*kUintMembers[i] = 0;
      } else {
        switch (f) {
          case Field::dev: out.dev = 0; break;
          case Field::ptr: out.ptr = 0; break;
          case Field::block: out.block.reset(); break;
          case Field::stream: out.stream.reset(); break;
          case Field::graph: out.graph = 0; break;
          case Field::exec: out.exec = 0; break;
          case Field::version: out.version = 0; break;
          case Field::pid: out.pid = 0; break;
          case Field::ppid: out.ppid = 0; break;
          case Field::argv: out.argv.clear(); break;
          case Field::frames: out.frames.clear(); break;
          case Field::config: out.config_json.clear(); break;
          case Field::env: out.env_json.clear(); break;
          case Field::rank_env: out.rank_env_json.clear(); break;
          default: break;
        }
      }
    }
  }
  LineState(const LineState&) = delete;
  LineState& operator=(const LineState&) = delete;

  TraceEvent& out;
  Event ev = Event::unknown;  // from the `ev` field, once decoded
  format::MemoryKind memory_kind = format::MemoryKind::unknown;  // from `kind`
  FieldMask seen = 0;
  FieldMask wrong = 0;
  FieldMask nulls = 0;
  std::uint32_t unknown_keys = 0;

  // A value of the wrong type or range, or null, stores nothing: the field
  // is back to its default, whatever an earlier line left in the reused
  // event (a field seen is not reset at the end; the fuzzer found a
  // previous line's ptr kept under an `end` line's unparsable one).
  void set_wrong(Field f) {
    wrong |= bit(f);
    seen |= bit(f);
    reset_fields(out, bit(f));
  }

  [[gnu::always_inline]] void scalar(Field f, const Scalar& v) {
    seen |= bit(f);
    if (v.type == Scalar::Type::null) {
      nulls |= bit(f);
      reset_fields(out, bit(f));
      return;
    }
    const ValueKind kind = kFields[static_cast<std::size_t>(f)].kind;
    switch (kind) {
      case ValueKind::string:
        if (v.type != Scalar::Type::string) return set_wrong(f);
        return store_string(f, v.text);
      case ValueKind::uint:
        if (v.type != Scalar::Type::unsigned_integer) return set_wrong(f);
        return store_uint(f, v.u);
      case ValueKind::int_:
        if (v.type == Scalar::Type::negative_integer) return store_int(f, v.i);
        if (v.type != Scalar::Type::unsigned_integer ||
            v.u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
          return set_wrong(f);
        }
        return store_int(f, static_cast<std::int64_t>(v.u));
      case ValueKind::ordinal:
        if (v.type != Scalar::Type::unsigned_integer || v.u > static_cast<std::uint64_t>(INT_MAX)) {
          return set_wrong(f);
        }
        out.dev = static_cast<int>(v.u);
        return;
      case ValueKind::hex: {
        std::uint64_t value = 0;
        if (v.type != Scalar::Type::string || !parse_hex(v.text, value)) return set_wrong(f);
        store_hex(f, value);
        return;
      }
      case ValueKind::complex:
        return set_wrong(f);
    }
  }

  // A string value for field f (a string or hex field). `padded`: 16 bytes
  // from the text's start are readable (it lies in the line buffer), so
  // names are looked up without a memcmp call.
  void string(Field f, std::string_view text, bool padded = false) {
    seen |= bit(f);
    if (kFields[static_cast<std::size_t>(f)].kind == ValueKind::string) return store_string(f, text, padded);
    std::uint64_t value = 0;
    if (!parse_hex(text, value)) return set_wrong(f);
    store_hex(f, value);
  }

  void store_hex(Field f, std::uint64_t value) {
    switch (f) {
      case Field::ptr: out.ptr = value; break;
      case Field::graph: out.graph = value; break;
      case Field::exec: out.exec = value; break;
      default: out.stream = value; break;
    }
  }

  // The text of a string value, as it would be without escapes, when it
  // is one that holds no escape (a hex number, an event or memory kind name:
  // most strings of a line): stored, and true. False, with nothing stored,
  // when only a scan for backslashes could tell. 18 bytes from the text's
  // start must be readable (a line's padding covers them).
  [[gnu::always_inline]] bool string_without_escapes(Field f, std::string_view text) {
    switch (f) {
      case Field::ptr:
      case Field::stream: {
        std::uint64_t value = 0;
        if (!parse_hex_padded(text, value)) return false;
        store_hex(f, value);
        break;
      }
      case Field::ev:
        ev = kEventTable.find_padded(text, Event::unknown);
        if (ev == Event::unknown) return false;
        break;
      case Field::kind:
        memory_kind = kMemoryKindTable.find_padded(text, format::MemoryKind::unknown);
        if (memory_kind == format::MemoryKind::unknown) return false;  // e.g. a mark's push or pop
        out.kind = text;
        break;
      default:
        return false;
    }
    seen |= bit(f);
    return true;
  }

  void store_string(Field f, std::string_view s, bool padded = false) {
    if (f == Field::ev) {
      ev = padded ? kEventTable.find_padded(s, Event::unknown) : kEventTable.find(s, Event::unknown);
      return;
    }
    if (f == Field::kind) {  // kept for alloc and free only, by finish()
      memory_kind = padded ? kMemoryKindTable.find_padded(s, format::MemoryKind::unknown)
                           : kMemoryKindTable.find(s, format::MemoryKind::unknown);
    }
    if (kStringMemberFields & bit(f)) out.*kStringMembers[static_cast<std::size_t>(f)] = s;
  }

  void store_uint(Field f, std::uint64_t u) {
    if (f == Field::block) out.block = u;
    else if (kUintMemberFields & bit(f)) out.*kUintMembers[static_cast<std::size_t>(f)] = u;
  }

  void store_int(Field f, std::int64_t i) {
    switch (f) {
      case Field::version: out.version = i; break;
      case Field::pid: out.pid = i; break;
      case Field::ppid: out.ppid = i; break;
      default: break;
    }
  }

  ParseResult finish() {
    ParseResult result;
    if ((seen & bit(Field::ev)) == 0) return bad(LineProblem::missing_event, Field::ev);
    if ((wrong | nulls) & bit(Field::ev)) return bad(LineProblem::wrong_type, Field::ev);
    out.ev = ev;
    if (out.ev == Event::unknown) {
      result.status = ParseResult::Status::unknown_event;
      return result;
    }
    const Schema& schema = kSchemas[static_cast<std::size_t>(out.ev)];
    const FieldMask allowed = schema.required | schema.optional;
    // null stands for "absent" in an optional field, and is wrong in a required one.
    if (FieldMask bad_null = nulls & schema.required) {
      return bad(LineProblem::wrong_type, first(bad_null));
    }
    if (FieldMask bad_type = wrong & allowed) return bad(LineProblem::wrong_type, first(bad_type));
    if (FieldMask missing = schema.required & ~(seen & ~nulls)) {
      return bad(LineProblem::missing_field, first(missing));
    }
    const FieldMask present = seen & ~nulls & allowed;
    if (!(present & bit(Field::block))) out.block.reset();
    if (!(present & bit(Field::stream))) out.stream.reset();
    if (out.ev == Event::alloc || out.ev == Event::free) {
      out.memory_kind = memory_kind;
    } else if (out.ev == Event::end) {
      out.end_reason = format::parse_end_reason(out.reason);
    }
    result.unknown_fields = unknown_keys;
    if (const FieldMask extra = seen & ~allowed; extra != 0) {
      result.unknown_fields += static_cast<std::uint32_t>(std::popcount(extra));
    }
    return result;
  }

  static Field first(FieldMask mask) { return static_cast<Field>(std::countr_zero(mask)); }

 private:
  FieldMask* stored_;

 public:

  static ParseResult bad(LineProblem problem, Field field) {
    ParseResult r;
    r.status = ParseResult::Status::bad;
    r.problem = problem;
    r.field = field;
    return r;
  }
};


}  // namespace cumemtrace::analyzer::detail
