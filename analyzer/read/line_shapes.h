// A fast path in front of simdjson for the lines a trace repeats.
//
// A writer puts the same keys in the same order on every line of one kind,
// with no blanks, so between the values of every alloc line the bytes are
// the same: `{"ev":"alloc","t":` 53001 `,"tid":` 4242 `,"api":"` cudaMalloc
// `","kind":"` ... `}`. LineShapes learns those constant bytes (a "shape")
// from a line simdjson has already decoded as a valid event, and decodes a
// later line of that shape by comparing its constant bytes and reading the
// values between them, provided each value is a canonical unsigned integer
// (no sign, fraction, exponent or leading zero; at most 19 digits) or a
// string of printable ASCII without escapes. Anything else (a blank, an
// escape, a byte over 0x7F, another number, an array, a new key order)
// does not match, and the line goes to simdjson as before.
//
// So a line this path accepts is valid JSON whatever simdjson would say
// (it is the grammar's plainest subset), and its values reach LineState
// through the calls simdjson's path makes for them: both give the same
// event and the same verdict. The reader's fuzzer and
// analyzer_line_shapes_test check that, line by line, against simdjson.
//
// Why not simdjson alone: its On-Demand walk over a 150-byte alloc line
// costs 80 to 100 ns (stage 1 indexing included) before the decoder stores
// a value, over half of heaptrack_print's whole time per event (issue 5's
// speed target; `scripts/bench_analyzer.sh`). Matching a known shape reads
// each byte once, with 16-byte compares for the constant runs and the
// value scans. With the analysis made cheaper too, `report` on the
// synthetic trace went from 3,200 to 1,440 instructions per line
// (callgrind, 300,000 lines).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "read/line_parser_schema.h"

namespace cumemtrace::analyzer::detail {

class LineShapes {
 public:
  static constexpr std::size_t kMaxShapes = 16;
  static constexpr std::size_t kMaxValues = 24;
  static constexpr std::size_t kMaxConstantBytes = 480;
  // The longest run of constant bytes: compared in two 16-byte halves.
  // `{"ev":"segment_alloc","t":` is 26.
  static constexpr std::size_t kMaxRunBytes = 32;

  struct Shape;

  // A run of constant bytes, in Shape::constants.
  struct Run {
    std::uint16_t offset = 0;
    std::uint8_t length = 0;
    std::uint32_t wanted = 0;  // the low `length` bits
    bool matches(const char* line, const Shape& shape) const;
  };

  // How a value is stored, chosen when the shape is learnt: the common
  // cases without LineState's per-kind switch, the rest through it.
  enum class Store : std::uint8_t {
    uint_member,    // a number into a plain integer member
    block,          // a number into `block`
    device,         // a number into `dev`, if it is at most INT_MAX
    string_member,  // a string into a plain string member
    hex,            // a string parsed as "0x…" into ptr
    stream,         // the same into stream
    memory_kind,    // `kind`: kept as text, and looked up as a memory kind
    general,        // LineState decides (types, ranges, wrong types)
    unknown_key,    // a key the event does not define: counted, skipped
  };

  // A run of constant bytes, then a value.
  struct Slot {
    Run before;
    Field field = Field::count_;
    bool is_string = false;
    Store how = Store::general;
    UintMember uint_member = nullptr;
    StringMember string_member = nullptr;
    // memory_kind and stream: the last text decoded and what it gave
    // (lines of a shape mostly repeat it: "device", "0x0"), to skip the
    // lookup or the parse next time.
    mutable std::uint8_t last_length = 0;  // 0: none
    mutable format::MemoryKind last_kind = format::MemoryKind::unknown;
    mutable std::uint64_t last_number = 0;
    mutable std::array<char, 48> last_text{};  // up to 16 bytes, and 32 readable
  };

  struct Shape {
    Event ev = Event::unknown;
    std::uint8_t value_count = 0;
    Run tail;  // after the last value
    FieldMask fields = 0;  // of its values: all marked seen, as simdjson's path marks them
    std::array<Slot, kMaxValues> slots{};
    // The constant bytes, back to back; 32 spare bytes so that comparisons
    // may load whole words past a run's end.
    std::uint16_t constant_size = 0;
    std::array<char, kMaxConstantBytes + 32> constants{};

    const Run& first_run() const { return value_count != 0 ? slots[0].before : tail; }
  };

  // The line at `begin` ends with a '\n' that has 32 readable bytes after
  // it (a batch's lines, or a copy). Shapes to try for it are
  // candidate(begin, 0), candidate(begin, 1), ... up to size(): a shape
  // that may fit (the first is a guess; the others start as the line
  // does), or nullptr. Try them in that order.
  const Shape* candidate(const char* begin, std::size_t attempt);

  // Decodes the line at `begin` as having `shape`: stores its values into
  // `state` as simdjson's path would, and returns the line's '\n'. nullptr
  // if it does not have that shape after all; then `state` may hold some
  // values, all in fields its `seen` names, so that LineState's reset
  // clears them: discard it.
  static const char* decode(const Shape& shape, const char* begin, LineState& state);

  // After decode() found `shape` through candidate(): tried first next time.
  void remember(const Shape& shape);

  // Learns the shape of `line` (no '\n'), which simdjson decoded as a valid
  // event, if it is one this path can decode and not known yet. Cheap when
  // it is not: it stops at the first byte outside the grammar.
  void learn(std::string_view line);

  std::size_t size() const { return count_; }

 private:
  static constexpr std::size_t kNameOffset = 7;  // after `{"ev":"`, where every shape starts
  static constexpr std::size_t kMaxLearnBytes = 4096;
  static constexpr std::size_t kLearnPadding = 64;
  static void choose_store(Slot& slot);
  static std::size_t name_slot(const char* begin);

  std::array<Shape, kMaxShapes> shapes_{};
  std::size_t count_ = 0;
  std::size_t next_victim_ = 0;
  // By name_slot(): the shape to try first (kMaxShapes: none).
  std::array<std::uint8_t, 64> by_name_ = [] {
    std::array<std::uint8_t, 64> none{};
    none.fill(static_cast<std::uint8_t>(kMaxShapes));
    return none;
  }();
  std::size_t guess_ = kMaxShapes;  // candidate()'s first, for the current line
  std::size_t guess_name_ = 0;
  std::array<char, kMaxLearnBytes + kLearnPadding> learn_buffer_{};
};

}  // namespace cumemtrace::analyzer::detail
