#include "read/line_parser.h"

#include <simdjson.h>


#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "read/line_parser_schema.h"
#include "read/line_shapes.h"

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
  env_json.clear();
  rank_env_json.clear();
  header = nullptr;
}

namespace detail {

static_assert(LineParser::kPadding >= simdjson::SIMDJSON_PADDING);

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

// Decodes with simdjson's On-Demand API: stage 1 indexes the line, then only
// the values the event uses are parsed, straight into the TraceEvent (no DOM
// tape, no copies of the line). Any error simdjson reports, including one met
// while skipping an unknown field's value, makes the line "invalid JSON".
struct LineParser::Impl {
  explicit Impl(bool use_shapes) : use_shapes(use_shapes) {}

  simdjson::ondemand::parser line_parser;
  FieldPrediction prediction;
  // Lines in a shape seen before skip simdjson (see line_shapes.h).
  const bool use_shapes;
  LineShapes shapes;

  // Decodes the line at `begin` if it has a known shape: true, with its
  // '\n' in `end`. It must end with a '\n' that has kPadding readable bytes
  // after it. False, with nothing kept in `out`, for any other line.
  bool decode_shape(const char* begin, TraceEvent& out, ParseResult& result, const char*& end) {
    if (!use_shapes) return false;
    for (std::size_t attempt = 0; attempt <= shapes.size(); ++attempt) {
      const LineShapes::Shape* shape = shapes.candidate(begin, attempt);
      if (shape == nullptr) continue;
      prepare(out);
      LineState state(out, &stored);  // on a miss, resets what the attempt stored
      end = LineShapes::decode(*shape, begin, state);
      if (end == nullptr) continue;
      if (attempt != 0) shapes.remember(*shape);
      ++lines_by_shape;
      result = state.finish();
      return true;
    }
    return false;
  }

  std::uint64_t lines_by_shape = 0;

  // A single line, copied with a '\n' for decode_shape().
  std::vector<char> single_line;

  // After simdjson decoded a line as a valid event: its shape, for the next.
  void learn_shape(std::string_view line, const ParseResult& result) {
    if (use_shapes && result.status == ParseResult::Status::ok) shapes.learn(line);
  }

  using Value = simdjson::ondemand::value;

  // False: not valid JSON. A value of another type is returned as Type::other.
  static bool to_scalar(Value& value, Scalar& s) {
    using simdjson::ondemand::json_type;
    json_type type;
    if (value.type().get(type)) return false;
    switch (type) {
      case json_type::string:
        s.type = Scalar::Type::string;
        return !value.get_string().get(s.text);
      case json_type::number: {
        simdjson::ondemand::number number;
        if (value.get_number().get(number)) return false;  // also: beyond 64 bits
        switch (number.get_number_type()) {
          case simdjson::ondemand::number_type::unsigned_integer:
            s.type = Scalar::Type::unsigned_integer;
            s.u = number.get_uint64();
            return true;
          case simdjson::ondemand::number_type::signed_integer:
            if (number.get_int64() >= 0) {
              s.type = Scalar::Type::unsigned_integer;
              s.u = static_cast<std::uint64_t>(number.get_int64());
            } else {
              s.type = Scalar::Type::negative_integer;
              s.i = number.get_int64();
            }
            return true;
          default:  // floating point
            s.type = Scalar::Type::other;
            return true;
        }
      }
      case json_type::null: {
        bool is_null = false;
        if (value.is_null().get(is_null) || !is_null) return false;
        s.type = Scalar::Type::null;
        return true;
      }
      case json_type::boolean: {
        bool b = false;
        s.type = Scalar::Type::other;
        if (value.get_bool().get(b)) return false;
        s.boolean = b;
        return true;
      }
      case json_type::array:
      case json_type::object:
        s.type = Scalar::Type::other;  // skipped (and checked) by the enclosing object
        return true;
    }
    return false;
  }

  // The key of `field`, unescaped only when it holds an escape (never in
  // what the preload writes). Empty on error.
  static std::string_view key_of(simdjson::ondemand::field& field, const char* line_end) {
    const char* start = reinterpret_cast<const char*>(field.key().raw());
    const char* p = start;
    while (p < line_end && *p != '"' && *p != '\\') ++p;
    if (p < line_end && *p == '"') return std::string_view(start, static_cast<std::size_t>(p - start));
    std::string_view unescaped;
    if (field.unescaped_key().get(unescaped)) return {};
    return unescaped;
  }

  // Status of a complex field: the JSON was invalid, or the value had the
  // wrong shape (a schema error, reported for the field), or it was fine.
  enum class Decoded : std::uint8_t { ok, wrong, invalid_json };

  static Decoded decode_argv(Value& value, TraceEvent& out) {
    simdjson::ondemand::array array;
    if (value.get_array().get(array)) return Decoded::wrong;
    Decoded status = Decoded::ok;
    for (auto item_result : array) {
      Value item;
      if (std::move(item_result).get(item)) return Decoded::invalid_json;
      Scalar s;
      if (!to_scalar(item, s)) return Decoded::invalid_json;
      if (s.type == Scalar::Type::string) out.argv.push_back(s.text);
      else status = Decoded::wrong;
    }
    return status;
  }

  static Decoded decode_frame(Value& value, StackFrame& frame, const char* line_end) {
    simdjson::ondemand::object object;
    if (value.get_object().get(object)) return Decoded::wrong;
    bool has_ip = false;
    bool ok = true;
    frame.py = false;
    for (auto field_result : object) {
      if (field_result.error()) return Decoded::invalid_json;
      simdjson::ondemand::field& field = field_result.value_unsafe();  // no copy: see decode()
      const std::string_view key = key_of(field, line_end);
      Scalar s;
      if (!to_scalar(field.value(), s)) return Decoded::invalid_json;
      std::uint64_t number = 0;
      const bool is_null = s.type == Scalar::Type::null;
      const bool is_string = s.type == Scalar::Type::string;
      if (key == "py") {
        // A Python frame names a function and a source line, no address.
        ok &= s.boolean.has_value();
        frame.py = s.boolean.value_or(false);
      } else if (key == "ip") {
        ok &= is_string && parse_hex(s.text, frame.ip);
        has_ip = true;
      } else if (key == "fn") {
        if (is_null) continue;
        ok &= is_string;
        frame.fn = s.text;
        frame.has_fn = is_string;
      } else if (key == "module") {
        if (is_null) continue;
        ok &= is_string;
        frame.module = s.text;
      } else if (key == "off") {
        if (is_null) continue;
        ok &= is_string && parse_hex(s.text, number);
        frame.off = number;
      } else if (key == "file") {
        if (is_null) continue;
        ok &= is_string;
        frame.file = s.text;
      } else if (key == "line") {
        if (is_null) continue;
        ok &= s.type == Scalar::Type::unsigned_integer;
        frame.line = s.u;
      }
    }
    return ok && (has_ip || frame.py) ? Decoded::ok : Decoded::wrong;
  }

  static Decoded decode_frames(Value& value, TraceEvent& out, const char* line_end) {
    simdjson::ondemand::array array;
    if (value.get_array().get(array)) return Decoded::wrong;
    Decoded status = Decoded::ok;
    for (auto item_result : array) {
      Value item;
      if (std::move(item_result).get(item)) return Decoded::invalid_json;
      const Decoded frame = decode_frame(item, out.frames.emplace_back(), line_end);
      if (frame == Decoded::invalid_json) return frame;
      if (frame == Decoded::wrong) status = frame;
    }
    return status;
  }

  // The `config` object, minified: informational, so any JSON value is kept.
  static bool decode_config(Value& value, std::string& out) {
    using simdjson::ondemand::json_type;
    json_type type;
    if (value.type().get(type)) return false;
    std::string_view raw;
    simdjson::error_code error = simdjson::SUCCESS;
    if (type == json_type::object) {
      simdjson::ondemand::object object;
      error = value.get_object().get(object);
      if (!error) error = object.raw_json().get(raw);
    } else if (type == json_type::array) {
      simdjson::ondemand::array array;
      error = value.get_array().get(array);
      if (!error) error = array.raw_json().get(raw);
    } else {
      Scalar ignored;  // validates the scalar, then keeps its text as written
      raw = value.raw_json_token();
      if (!to_scalar(value, ignored)) return false;
    }
    if (error) return false;
    out.resize(raw.size());
    std::size_t length = 0;
    if (simdjson::minify(raw.data(), raw.size(), out.data(), length)) return false;
    out.resize(length);
    while (!out.empty() && (out.back() == ' ' || out.back() == '\t' || out.back() == '\r' || out.back() == '\n')) {
      out.pop_back();
    }
    return true;
  }

  // The header's `env` object, minified. Another value is checked as
  // `config`'s is (invalid JSON still makes the line invalid) and dropped:
  // the field is informational, and a writer's mistake in it must not make
  // the whole trace unreadable, as a bad header field does.
  static bool decode_env(Value& value, std::string& out) {
    simdjson::ondemand::json_type type;
    if (value.type().get(type)) return false;
    if (!decode_config(value, out)) return false;
    if (type != simdjson::ondemand::json_type::object) out.clear();
    return true;
  }

  // Whether a line that is not an object is valid JSON nonetheless ("[]",
  // "42"), for the bad line's reason.
  static bool is_valid_json(simdjson::ondemand::document& doc, simdjson::ondemand::json_type type) {
    using simdjson::ondemand::json_type;
    simdjson::error_code error = simdjson::SUCCESS;
    switch (type) {
      case json_type::array: {
        simdjson::ondemand::array array;
        std::string_view raw;
        error = doc.get_array().get(array);
        if (!error) error = array.raw_json().get(raw);
        break;
      }
      case json_type::string: {
        std::string_view text;
        error = doc.get_string().get(text);
        break;
      }
      case json_type::number: {
        simdjson::ondemand::number number;
        error = doc.get_number().get(number);
        break;
      }
      case json_type::null: {
        bool is_null = false;
        error = doc.is_null().get(is_null);
        if (!error && !is_null) error = simdjson::INCORRECT_TYPE;
        break;
      }
      case json_type::boolean: {
        bool ignored = false;
        error = doc.get_bool().get(ignored);
        break;
      }
      case json_type::object: break;
    }
    const char* trailing = nullptr;
    return !error && doc.current_location().get(trailing) != simdjson::SUCCESS;
  }

  // Strings with escapes are unescaped here, valid until the next line.
  std::vector<std::uint8_t> scratch;
  std::uint8_t* scratch_end = nullptr;

  void reserve_scratch(std::size_t line_bytes) {
    if (scratch.size() < line_bytes + simdjson::SIMDJSON_PADDING) scratch.resize(line_bytes + simdjson::SIMDJSON_PADDING);
    scratch_end = scratch.data();
  }

  enum class Fast : std::uint8_t { done, general, invalid_json };

  // The common cases: an integer field holding a non-negative integer, a
  // string or hex field holding a string. Anything else (null, a negative
  // number, another type) is left unread for the general path: simdjson's
  // getters do not consume a value of the wrong type.
  [[gnu::always_inline]] Fast decode_fast(const simdjson::ondemand::parser& parser, Value& value, Field f,
                                          LineState& state) {
    switch (kFields[static_cast<std::size_t>(f)].kind) {
      case ValueKind::uint: {
        std::uint64_t u = 0;
        if (value.get_uint64().get(u)) return Fast::general;
        state.seen |= bit(f);
        state.store_uint(f, u);
        return Fast::done;
      }
      case ValueKind::ordinal: {
        std::uint64_t u = 0;
        if (value.get_uint64().get(u)) return Fast::general;
        if (u > static_cast<std::uint64_t>(INT_MAX)) {
          state.set_wrong(f);
        } else {
          state.seen |= bit(f);
          state.out.dev = static_cast<int>(u);
        }
        return Fast::done;
      }
      case ValueKind::string:
      case ValueKind::hex: {
        // The token runs from the opening quote to the next structural
        // character: with nothing between, it ends at the closing quote.
        const std::string_view token = value.raw_json_token();
        simdjson::ondemand::raw_json_string raw;
        if (value.get_raw_json_string().get(raw)) return Fast::general;  // not a string: left unread
        const char* start = reinterpret_cast<const char*>(raw.raw());
        if (token.size() >= 2 && token.back() == '"' &&
            state.string_without_escapes(f, std::string_view(start, token.size() - 2))) {
          return Fast::done;
        }
        std::size_t length = 0;
        // The usual case, no copy at all. Other strings (an escape, a byte
        // over 0x7F) are copied by simdjson, as they are or unescaped.
        if (plain_ascii_string(start, length)) {
          state.string(f, std::string_view(start, length), true);
          return Fast::done;
        }
        std::string_view text;
        if (parser.unescape(raw, scratch_end).get(text)) return Fast::invalid_json;  // a bad escape
        state.string(f, text);
        return Fast::done;
      }
      default:
        return Fast::general;
    }
  }

  static ParseResult invalid() { return LineState::bad(LineProblem::invalid_json, Field::count_); }

  // Decodes the object `doc` (one line) into state.out. The caller checks what
  // follows the object. Doc: a document, or a document_reference of a stream.
  template <typename Doc>
  ParseResult decode(const simdjson::ondemand::parser& parser, Doc& doc, const char* line_end, LineState& state) {
    simdjson::ondemand::object object;
    if (doc.get_object().get(object)) return invalid();
    std::array<Field, FieldPrediction::kMaxFields> order{};
    std::size_t position = 0;
    for (auto field_result : object) {
      // Used in place: moving the field out (get()) costs a store-forwarding
      // stall per field with GCC, a third of the decoding time.
      if (field_result.error()) return invalid();
      simdjson::ondemand::field& field = field_result.value_unsafe();
      Field f = prediction.expected(state.ev, position);
      if (f == Field::count_ || !key_is(reinterpret_cast<const char*>(field.key().raw()), f)) {
        f = lookup_field(key_of(field, line_end));
      }
      if (position < order.size()) order[position] = f;
      ++position;
      if (f != Field::count_) {
        const Fast fast = decode_fast(parser, field.value(), f, state);
        if (fast == Fast::done) continue;
        if (fast == Fast::invalid_json) return invalid();
      }
      Decoded decoded = Decoded::ok;
      switch (f) {
        case Field::count_: ++state.unknown_keys; break;  // its value is skipped
        case Field::argv:  // lists are only reset when a line lacks them: empty them first
          state.seen |= bit(f);
          state.out.argv.clear();
          decoded = decode_argv(field.value(), state.out);
          break;
        case Field::frames:
          state.seen |= bit(f);
          state.out.frames.clear();
          decoded = decode_frames(field.value(), state.out, line_end);
          break;
        case Field::config:
          state.seen |= bit(f);
          if (!decode_config(field.value(), state.out.config_json)) decoded = Decoded::invalid_json;
          break;
        case Field::env:
          state.seen |= bit(f);
          if (!decode_env(field.value(), state.out.env_json)) decoded = Decoded::invalid_json;
          break;
        case Field::rank_env:  // informational as `env` is, and checked the same way
          state.seen |= bit(f);
          if (!decode_env(field.value(), state.out.rank_env_json)) decoded = Decoded::invalid_json;
          break;
        default: {
          Scalar s;
          if (!to_scalar(field.value(), s)) return invalid();
          state.scalar(f, s);
          break;
        }
      }
      if (decoded == Decoded::invalid_json) return invalid();
      if (decoded == Decoded::wrong) state.set_wrong(f);
    }
    if (state.ev != Event::unknown) prediction.remember(state.ev, order, position);
    return state.finish();
  }

  // The fields the previous line stored into the event: after each line,
  // those it did not store again are reset (a TraceEvent::reset() per line
  // writes every field, a cost as large as decoding a field or two).
  const TraceEvent* last_out = nullptr;
  FieldMask stored = 0;

  void prepare(TraceEvent& out) {
    if (&out != last_out) {  // another event: everything is unknown
      out.reset();
      last_out = &out;
      stored = 0;
      return;
    }
    out.ev = Event::unknown;
    out.line = 0;
    out.memory_kind = format::MemoryKind::unknown;
    out.end_reason = format::EndReason::unknown;
    out.header = nullptr;
  }

  ParseResult parse_line(std::string_view line, TraceEvent& out) {
    if (use_shapes && shapes.size() != 0) {
      if (single_line.size() < line.size() + 1 + kPadding) single_line.resize(line.size() + 1 + kPadding);
      std::memcpy(single_line.data(), line.data(), line.size());
      single_line[line.size()] = '\n';
      ParseResult shaped;
      const char* end = nullptr;
      if (decode_shape(single_line.data(), out, shaped, end)) return shaped;
    }
    const ParseResult result = parse_with_simdjson(line, out);
    learn_shape(line, result);
    return result;
  }

  ParseResult parse_with_simdjson(std::string_view line, TraceEvent& out) {
    prepare(out);
    reserve_scratch(line.size());
    if (line.empty()) return LineState::bad(LineProblem::empty_line, Field::count_);
    LineState state(out, &stored);
    simdjson::ondemand::document doc;
    if (line_parser.iterate(line.data(), line.size(), line.size() + kPadding).get(doc)) return invalid();
    simdjson::ondemand::json_type type;
    if (doc.type().get(type)) return invalid();
    if (type != simdjson::ondemand::json_type::object) {
      return is_valid_json(doc, type) ? LineState::bad(LineProblem::not_an_object, Field::count_) : invalid();
    }
    const ParseResult result = decode(line_parser, doc, line.data() + line.size(), state);
    if (result.problem == LineProblem::invalid_json) return result;
    // Anything after the object ("{...}x", "{...}}") makes the line invalid,
    // whatever was wrong with the object itself.
    const char* trailing = nullptr;
    if (!doc.current_location().get(trailing)) return invalid();
    return result;
  }

  // Batch mode (see LineParser::start_batch).
  std::string_view batch;
  std::size_t batch_pos = 0;     // where the next line starts
  bool streaming = false;        // documents still come from `stream`
  bool advance_pending = false;  // the stream still points at the last line's document
  simdjson::ondemand::parser stream_parser;
  simdjson::ondemand::document_stream stream;
  simdjson::ondemand::document_stream::iterator stream_it;
  std::size_t stream_capacity = 0;

  // Lines of known shapes are decoded without simdjson. The others are
  // parsed alone (and their shapes learnt), until kMissesBeforeStreaming of
  // them in one batch outnumber its lines of known shapes: then the rest of
  // the batch goes through simdjson's iterate_many, whose one indexing pass
  // over many lines is cheaper than one per line (a trace from another
  // writer). Stack lines, which no shape fits, mixed with alloc and free
  // lines are parsed alone.
  std::size_t misses = 0;
  std::size_t shaped = 0;  // lines of this batch decoded through a shape
  bool stream_tried = false;  // the stream was started (or cannot be) in this batch
  bool batch_ends_line = false;  // the batch ends with a '\n', as decode_shape() needs

  void start_batch(std::string_view lines) {
    batch = lines;
    batch_pos = 0;
    misses = shaped = 0;
    streaming = false;
    stream_tried = lines.empty() || lines.size() > kMaxBatchBytes;
    batch_ends_line = !lines.empty() && lines.back() == '\n';
  }

  // Starts the stream at the line at `from`, to the batch's end.
  void start_stream(std::size_t from) {
    stream_tried = true;
    advance_pending = false;
    const std::string_view rest = batch.substr(from);
    // iterate_many reports invalid UTF-8 only at the document after the one
    // that holds it, when the bad bytes trail a line's object at the end of
    // the batch ("{...}\xff\n"), so that line would be taken; parse() refuses
    // it. Such a batch goes line by line (found by the fuzzer).
    if (!simdjson::validate_utf8(rest.data(), rest.size())) return;
    // A constant batch size: simdjson reallocates its buffers whenever it changes.
    while (stream_capacity < rest.size()) stream_capacity = stream_capacity ? stream_capacity * 2 : kBatchBytes;
    if (stream_parser.iterate_many(rest.data(), rest.size(), stream_capacity).get(stream)) return;
    stream_it = stream.begin();
    streaming = true;
  }

  // Decodes the next line from the stream; false (and nothing yielded) when
  // that line is not exactly one well-formed event document.
  bool next_from_stream(std::size_t line_start, std::string_view line, TraceEvent& out, ParseResult& result) {
    if (advance_pending) {
      ++stream_it;
      advance_pending = false;
    }
    // The document starts where the line does: the first where the stream
    // starts, every other right after its predecessor, which ended its line.
    if (!(stream_it != stream.end())) return false;
    auto doc_result = *stream_it;
    if (doc_result.error()) return false;
    simdjson::ondemand::document_reference& doc = doc_result.value_unsafe();
    prepare(out);
    // The document may run past its line (then it is refused below): room
    // for unescaping any string up to the batch's end.
    reserve_scratch(batch.size() - line_start);
    LineState state(out, &stored);
    result = decode(stream_parser, doc, line.data() + line.size(), state);
    if (result.status == ParseResult::Status::bad) return false;  // parse_line() says why
    // The document must end with the line: the next one starts the next line.
    const char* next = nullptr;
    const simdjson::error_code error = doc.current_location().get(next);
    const std::size_t line_end = line_start + line.size() + 1;
    // At the batch's end, stage 1 leaves out whatever does not complete a
    // document ("{...}\"x\":1}"): then truncated_bytes() is not 0.
    const bool ends_here = error == simdjson::OUT_OF_BOUNDS
                               ? line_end == batch.size() && stream.truncated_bytes() == 0
                               : !error && next == batch.data() + line_end;
    if (!ends_here) return false;
    advance_pending = true;
    return true;
  }

  bool next_in_batch(std::string_view& line, TraceEvent& out, ParseResult& result) {
    if (batch_pos >= batch.size()) return false;
    const std::size_t line_start = batch_pos;
    const char* begin = batch.data() + line_start;
    const char* end = nullptr;
    if (!streaming && batch_ends_line && decode_shape(begin, out, result, end)) {
      line = std::string_view(begin, static_cast<std::size_t>(end - begin));
      batch_pos = line_start + line.size() + 1;
      ++shaped;
      return true;
    }
    const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', batch.size() - line_start));
    const std::size_t length = newline ? static_cast<std::size_t>(newline - begin) : batch.size() - line_start;
    line = std::string_view(begin, length);
    batch_pos = line_start + length + 1;
    if (!streaming && !stream_tried && (!use_shapes || (++misses >= kMissesBeforeStreaming && misses > shaped))) {
      start_stream(line_start);
    }
    if (streaming) {
      // No shapes learnt here: none would be tried before the batch's end.
      if (next_from_stream(line_start, line, out, result)) return true;
      streaming = false;  // the rest of the batch line by line
    }
    result = parse_with_simdjson(line, out);  // its shape is not known: no second try
    learn_shape(line, result);
    return true;
  }

  static constexpr std::size_t kMissesBeforeStreaming = 8;
  static constexpr std::size_t kBatchBytes = std::size_t{64} << 10;
  static constexpr std::size_t kMaxBatchBytes = std::size_t{4} << 20;
};

LineParser::LineParser(bool use_shapes) : impl_(std::make_unique<Impl>(use_shapes)) {}
LineParser::~LineParser() = default;

ParseResult LineParser::parse(std::string_view line, TraceEvent& out) { return impl_->parse_line(line, out); }

void LineParser::start_batch(std::string_view lines) { impl_->start_batch(lines); }

std::uint64_t LineParser::lines_by_shape() const { return impl_->lines_by_shape; }

bool LineParser::next_in_batch(std::string_view& line, TraceEvent& out, ParseResult& result) {
  return impl_->next_in_batch(line, out, result);
}

}  // namespace detail
}  // namespace cumemtrace::analyzer
