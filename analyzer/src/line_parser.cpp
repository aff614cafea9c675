#include "line_parser.h"

#include "name_table.h"

#include <simdjson.h>

#include <array>
#include <bit>
#include <climits>
#include <cstring>
#include <limits>

namespace cumemtrace::analyzer {

void TraceEvent::reset() {
  // Field by field, keeping the vectors' and the string's capacity: no
  // allocation per line, and cheaper than building a fresh TraceEvent.
  ev = format::Event::unknown;
  line = t = tid = ptr = size = stack = total = id = 0;
  dev = 0;
  block.reset();
  stream.reset();
  api = kind = name = cause = what = reason = {};
  memory_kind = format::MemoryKind::unknown;
  frames.clear();
  allocated = reserved = cached_free = largest_free = device_free = device_total = 0;
  free_blocks = inactive_split = 0;
  end_reason = format::EndReason::unknown;
  live = live_bytes = dropped = 0;
  format_name = host = exe = pool = {};
  version = pid = ppid = 0;
  argv.clear();
  start_unix_ns = 0;
  config_json.clear();
  header = nullptr;
}

namespace detail {
namespace {

static_assert(LineParser::kPadding >= simdjson::SIMDJSON_PADDING);

using format::Event;

// How a field's value is checked and stored.
enum class ValueKind : std::uint8_t {
  string,
  uint,     // non-negative integer
  int_,     // any 64-bit signed integer
  hex,      // "0x…" string
  ordinal,  // integer 0..INT_MAX (device)
  complex,  // arrays and objects, decoded from the DOM only
};

struct FieldInfo {
  std::string_view name;
  ValueKind kind;
};

// Indexed by Field.
constexpr std::array<FieldInfo, static_cast<std::size_t>(Field::count_)> kFields{{
    {"ev", ValueKind::string},           {"format", ValueKind::string},
    {"version", ValueKind::int_},        {"pid", ValueKind::int_},
    {"ppid", ValueKind::int_},           {"host", ValueKind::string},
    {"exe", ValueKind::string},          {"argv", ValueKind::complex},
    {"start_unix_ns", ValueKind::uint},  {"pool", ValueKind::string},
    {"config", ValueKind::complex},      {"t", ValueKind::uint},
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
                            F::config)};
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
  at(Event::mark) = {bits(F::ev, F::t, F::tid, F::name, F::kind), 0};
  at(Event::error) = {bits(F::ev, F::t, F::tid, F::api, F::ptr, F::what, F::stack), 0};
  at(Event::end) = {bits(F::ev, F::t, F::reason, F::live, F::live_bytes, F::dropped), 0};
  return s;
}();

constexpr auto kFieldNames = [] {
  std::array<std::string_view, kFields.size()> names{};
  for (std::size_t i = 0; i < kFields.size(); ++i) names[i] = kFields[i].name;
  return names;
}();
constexpr NameTable<Field, kFields.size()> kFieldTable(kFieldNames);

inline Field lookup_field(std::string_view key) { return kFieldTable.find(key, Field::count_); }

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
};

// Where each string and integer field is stored in a TraceEvent: a table
// lookup per field instead of a switch.
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
  return m;
}();

// Per-line decoding state: which fields were seen, which had the wrong type.
struct LineState {
  explicit LineState(TraceEvent& event) : out(event) {}

  TraceEvent& out;
  std::string_view ev_text;
  FieldMask seen = 0;
  FieldMask wrong = 0;
  FieldMask nulls = 0;
  std::uint32_t unknown_keys = 0;

  void set_wrong(Field f) { wrong |= bit(f); seen |= bit(f); }

  [[gnu::always_inline]] void scalar(Field f, const Scalar& v) {
    seen |= bit(f);
    if (v.type == Scalar::Type::null) {
      nulls |= bit(f);
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
        if (f == Field::ptr) out.ptr = value;
        else out.stream = value;
        return;
      }
      case ValueKind::complex:
        return set_wrong(f);
    }
  }

  void store_string(Field f, std::string_view s) {
    if (f == Field::ev) ev_text = s;
    else if (auto member = kStringMembers[static_cast<std::size_t>(f)]) out.*member = s;
  }

  void store_uint(Field f, std::uint64_t u) {
    if (f == Field::block) out.block = u;
    else if (auto member = kUintMembers[static_cast<std::size_t>(f)]) out.*member = u;
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
    out.ev = kEventTable.find(ev_text, Event::unknown);
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
      out.memory_kind = kMemoryKindTable.find(out.kind, format::MemoryKind::unknown);
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

  static ParseResult bad(LineProblem problem, Field field) {
    ParseResult r;
    r.status = ParseResult::Status::bad;
    r.problem = problem;
    r.field = field;
    return r;
  }
};

}  // namespace

std::string_view field_name(Field f) {
  if (f == Field::count_) return "?";
  return kFields[static_cast<std::size_t>(f)].name;
}

std::string ParseResult::describe() const {
  switch (problem) {
    case LineProblem::none: return "ok";
    case LineProblem::empty_line: return "empty line";
    case LineProblem::invalid_json: return "invalid JSON";
    case LineProblem::not_an_object: return "not a JSON object";
    case LineProblem::missing_event: return "missing field 'ev'";
    case LineProblem::missing_field: return "missing field '" + std::string(field_name(field)) + "'";
    case LineProblem::wrong_type:
      return "field '" + std::string(field_name(field)) + "' has the wrong type or value";
  }
  return "bad line";
}

namespace {
constexpr std::array<std::uint8_t, 256> kHexDigitValue = [] {
  std::array<std::uint8_t, 256> table{};
  for (auto& v : table) v = 0xFF;
  for (int c = '0'; c <= '9'; ++c) table[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) table[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(c - 'a' + 10);
  return table;
}();
}  // namespace

bool parse_hex(std::string_view text, std::uint64_t& out) {
  if (text.size() < 3 || text.size() > 18 || text[0] != '0' || text[1] != 'x') return false;
  std::uint64_t value = 0;
  std::uint8_t invalid = 0;
  for (std::size_t i = 2; i < text.size(); ++i) {
    const std::uint8_t digit = kHexDigitValue[static_cast<unsigned char>(text[i])];
    invalid |= digit;  // 0xFF for a non-digit: only bit 7 tells
    value = (value << 4) | (digit & 0x0F);
  }
  if (invalid & 0x80) return false;
  out = value;
  return true;
}

struct LineParser::Impl {
  simdjson::dom::parser dom;

  static Scalar to_scalar(simdjson::dom::element value) {
    Scalar s;
    switch (value.type()) {
      case simdjson::dom::element_type::STRING:
        s.type = Scalar::Type::string;
        s.text = value.get_string().value_unsafe();
        break;
      case simdjson::dom::element_type::INT64: {
        std::int64_t i = value.get_int64().value_unsafe();
        if (i >= 0) {
          s.type = Scalar::Type::unsigned_integer;
          s.u = static_cast<std::uint64_t>(i);
        } else {
          s.type = Scalar::Type::negative_integer;
          s.i = i;
        }
        break;
      }
      case simdjson::dom::element_type::UINT64:
        s.type = Scalar::Type::unsigned_integer;
        s.u = value.get_uint64().value_unsafe();
        break;
      case simdjson::dom::element_type::NULL_VALUE:
        s.type = Scalar::Type::null;
        break;
      default:
        s.type = Scalar::Type::other;
        break;
    }
    return s;
  }

  static bool decode_argv(simdjson::dom::element value, TraceEvent& out) {
    simdjson::dom::array array;
    if (value.get_array().get(array)) return false;
    for (simdjson::dom::element item : array) {
      std::string_view arg;
      if (item.get_string().get(arg)) return false;
      out.argv.push_back(arg);
    }
    return true;
  }

  static bool decode_frame(simdjson::dom::element value, StackFrame& frame) {
    simdjson::dom::object object;
    if (value.get_object().get(object)) return false;
    bool has_ip = false;
    for (auto [key, item] : object) {
      Scalar s = to_scalar(item);
      std::uint64_t number = 0;
      if (key == "ip") {
        if (s.type != Scalar::Type::string || !parse_hex(s.text, frame.ip)) return false;
        has_ip = true;
      } else if (key == "fn") {
        if (s.type == Scalar::Type::null) continue;
        if (s.type != Scalar::Type::string) return false;
        frame.fn = s.text;
        frame.has_fn = true;
      } else if (key == "module") {
        if (s.type == Scalar::Type::null) continue;
        if (s.type != Scalar::Type::string) return false;
        frame.module = s.text;
      } else if (key == "off") {
        if (s.type == Scalar::Type::null) continue;
        if (s.type != Scalar::Type::string || !parse_hex(s.text, number)) return false;
        frame.off = number;
      } else if (key == "file") {
        if (s.type == Scalar::Type::null) continue;
        if (s.type != Scalar::Type::string) return false;
        frame.file = s.text;
      } else if (key == "line") {
        if (s.type == Scalar::Type::null) continue;
        if (s.type != Scalar::Type::unsigned_integer) return false;
        frame.line = s.u;
      }
    }
    return has_ip;
  }

  static bool decode_frames(simdjson::dom::element value, TraceEvent& out) {
    simdjson::dom::array array;
    if (value.get_array().get(array)) return false;
    for (simdjson::dom::element item : array) {
      StackFrame& frame = out.frames.emplace_back();
      if (!decode_frame(item, frame)) return false;
    }
    return true;
  }

  ParseResult decode_with_dom(std::string_view line, LineState& state) {
    simdjson::dom::element root;
    if (dom.parse(reinterpret_cast<const std::uint8_t*>(line.data()), line.size(), false).get(root)) {
      return LineState::bad(LineProblem::invalid_json, Field::count_);
    }
    simdjson::dom::object object;
    if (root.get_object().get(object)) return LineState::bad(LineProblem::not_an_object, Field::count_);
    for (auto [key, value] : object) {
      const Field f = lookup_field(key);
      switch (f) {
        case Field::count_: ++state.unknown_keys; break;
        case Field::argv:
          state.seen |= bit(f);
          if (!decode_argv(value, state.out)) state.set_wrong(f);
          break;
        case Field::frames:
          state.seen |= bit(f);
          if (!decode_frames(value, state.out)) state.set_wrong(f);
          break;
        case Field::config:
          state.seen |= bit(f);
          state.out.config_json = simdjson::minify(value);
          break;
        default: state.scalar(f, to_scalar(value)); break;
      }
    }
    return state.finish();
  }
};

LineParser::LineParser() : impl_(std::make_unique<Impl>()) {}
LineParser::~LineParser() = default;

ParseResult LineParser::parse(std::string_view line, TraceEvent& out) {
  out.reset();
  if (line.empty()) return LineState::bad(LineProblem::empty_line, Field::count_);
  LineState state(out);
  return impl_->decode_with_dom(line, state);
}

}  // namespace detail
}  // namespace cumemtrace::analyzer
