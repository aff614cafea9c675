// Decodes one trace line into a TraceEvent with simdjson's On-Demand parser (one
// parser reused for every line, so no allocation per line once warm) and
// checks it against the schema of TRACE_FORMAT.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cumemtrace/analyzer/trace_event.h"

namespace cumemtrace::analyzer::detail {

// Every field name the format defines, one bit each in a FieldMask.
enum class Field : std::uint8_t {
  ev, format, version, pid, ppid, host, exe, argv, start_unix_ns, pool, config, env, rank_env,
  t, tid, dev, name, total, id, frames, api, kind, ptr, size, block, stream, stack,
  allocated, reserved, cached_free, largest_free, device_free, device_total, cause,
  free_blocks, inactive_split, what, reason, live, live_bytes, dropped,
  graph, exec, used,
  count_,
};
using FieldMask = std::uint64_t;
static_assert(static_cast<int>(Field::count_) <= 64);

std::string_view field_name(Field f);

enum class LineProblem : std::uint8_t {
  none,
  empty_line,
  invalid_json,
  not_an_object,
  missing_field,  // `field` says which
  wrong_type,     // `field` says which (also: a value out of range, bad hex)
  missing_event,  // no `ev`
};

struct ParseResult {
  enum class Status : std::uint8_t { ok, bad, unknown_event } status = Status::ok;
  LineProblem problem = LineProblem::none;
  Field field = Field::count_;
  std::uint32_t unknown_fields = 0;  // fields the event does not define

  // One line of text for a bad line ("missing field 'size'").
  std::string describe() const;
};

class LineParser {
 public:
  // `use_shapes`: decode lines in a shape seen before without simdjson
  // (line_shapes.h); false only to compare both paths in tests.
  explicit LineParser(bool use_shapes = true);
  ~LineParser();
  LineParser(const LineParser&) = delete;
  LineParser& operator=(const LineParser&) = delete;

  // `line` excludes the newline. Bytes up to line.data() + line.size() +
  // kPadding must be readable (simdjson reads ahead). `out` is reset first.
  ParseResult parse(std::string_view line, TraceEvent& out);

  // Batch mode, for a block of complete lines (each ending in '\n'; kPadding
  // readable bytes must follow the block). Lines of known shapes are decoded
  // directly; once a few in the block are not, simdjson's iterate_many
  // indexes the rest of the block at once instead of line by line; each
  // document is checked to be exactly its line, and from the first line that
  // is not (or is not a valid event) to the end of the block, lines go one by
  // one: the results are parse()'s, only faster. The block must stay in place
  // until the batch is done.
  void start_batch(std::string_view lines);
  // Decodes the batch's next line (returned without its '\n') into `out`;
  // false when the batch is done.
  bool next_in_batch(std::string_view& line, TraceEvent& out, ParseResult& result);

  // Lines decoded through a known shape so far (for tests and measurements).
  std::uint64_t lines_by_shape() const;

  static constexpr std::size_t kPadding = 64;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Strict "0x…" lowercase hex, 1 to 16 digits.
bool parse_hex(std::string_view text, std::uint64_t& out);


}  // namespace cumemtrace::analyzer::detail
