#include "read/line_shapes.h"

#include <bit>
#include <climits>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace cumemtrace::analyzer::detail {
namespace {

// Whether the `n` bytes at `line` are those at `constant`, n at most
// kMaxRunBytes. Both have 32 readable bytes from their start (the line's
// padding, the shape's spare bytes); `wanted` has the low n bits set. Two
// 16-byte compares, with no branch on the length.
[[gnu::always_inline]] inline bool same_bytes(const char* line, const char* constant, std::size_t n,
                                              std::uint32_t wanted) {
#if defined(__SSE2__)
  (void)n;
  const auto equal = [](const char* a, const char* b) {
    return static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(a)), _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)))));
  };
  const std::uint32_t equal_bytes = equal(line, constant) | (equal(line + 16, constant + 16) << 16);
  return (equal_bytes & wanted) == wanted;
#else
  (void)wanted;
  return std::memcmp(line, constant, n) == 0;
#endif
}

// The 8 bytes at `p` less '0': digit values, the first in the lowest byte.
std::uint64_t digit_values(const char* p) {
  static_assert(std::endian::native == std::endian::little, "eight_digits() reads the first digit lowest");
  return load_word(p) - 0x30 * kEachByte;
}

// The value of the 8 digits in `digits` (0..9 per byte, the first digit in
// the lowest byte): pairs, then quads, then the whole, by multiplications.
std::uint64_t eight_digits(std::uint64_t digits) {
  digits = digits * 10 + (digits >> 8);
  return (((digits & 0x000000FF000000FFull) * (100 + (1000000ull << 32))) +
          (((digits >> 16) & 0x000000FF000000FFull) * (1 + (10000ull << 32)))) >>
         32;
}

constexpr std::array<std::uint64_t, 9> kPowersOfTen = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

// The number of ASCII digits at `p`, up to 16 (readable 16 bytes).
[[gnu::always_inline]] inline std::size_t count_digits(const char* p) {
#if defined(__SSE2__)
  const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(chunk, _mm_set1_epi8('0' - 1)),
                                      _mm_cmplt_epi8(chunk, _mm_set1_epi8('9' + 1)));
  const auto others = ~static_cast<unsigned>(_mm_movemask_epi8(digit));  // bit 16 and up set: at most 16
  return static_cast<std::size_t>(std::countr_zero(others));
#else
  std::size_t n = 0;
  while (n < 16 && static_cast<unsigned>(p[n] - '0') <= 9) ++n;
  return n;
#endif
}

// A canonical JSON unsigned integer at `p`: 0, or 1 to 19 digits without a
// leading zero (so below 2^64). Sets `length` to its digits. The line's
// '\n' ends it at the latest; 32 bytes from `p` are readable. Eight digits
// per step, with no loop over bytes: a byte loop's exit is a mispredicted
// branch per number.
[[gnu::always_inline]] inline bool plain_number(const char* p, std::uint64_t& value, std::size_t& length) {
  length = count_digits(p);
  if (length == 16) length += count_digits(p + 16);
  if (length == 0 || length > 19 || (length > 1 && *p == '0')) return false;
  if (length <= 8) {  // most numbers: one step
    value = eight_digits(digit_values(p) << (8 * (8 - length)));
    return true;
  }
  std::uint64_t v = 0;
  std::size_t done = 0;
  for (; length - done >= 8; done += 8) v = v * 100000000 + eight_digits(digit_values(p + done));
  if (const std::size_t rest = length - done; rest != 0) {
    // The rest moved to the top bytes, zeros (leading zero digits) below.
    v = v * kPowersOfTen[rest] + eight_digits(digit_values(p + done) << (8 * (8 - rest)));
  }
  value = v;
  return true;
}

// Whether `text` (in a line, 32 readable bytes) is the slot's last text.
[[gnu::always_inline]] inline bool repeats_last(const LineShapes::Slot& slot, std::string_view text) {
  return !text.empty() && text.size() == slot.last_length &&
         same_bytes(text.data(), slot.last_text.data(), text.size(), (std::uint32_t{1} << text.size()) - 1);
}

// Notes `text` as the slot's last (the caller notes what it gave), or
// nothing if it is too long to keep.
void remember_last(const LineShapes::Slot& slot, std::string_view text) {
  if (text.empty() || text.size() > 16) {
    slot.last_length = 0;
    return;
  }
  std::memcpy(slot.last_text.data(), text.data(), text.size());
  slot.last_length = static_cast<std::uint8_t>(text.size());
}

}  // namespace

[[gnu::always_inline]] inline bool LineShapes::Run::matches(const char* line, const Shape& shape) const {
  return same_bytes(line, shape.constants.data() + offset, length, wanted);
}

const LineShapes::Shape* LineShapes::candidate(const char* begin, std::size_t attempt) {
  if (attempt == 0) {
    // The shape last seen with this event name, found without a branch on
    // which kind the line is (alloc and free lines alternate at random).
    // Almost always right: its first run is left to decode() to check.
    guess_name_ = name_slot(begin);
    guess_ = by_name_[guess_name_];
    return guess_ < count_ ? &shapes_[guess_] : nullptr;
  }
  const std::size_t index = attempt - 1;
  if (index == guess_ || index >= count_) return nullptr;
  const Shape& shape = shapes_[index];
  return shape.first_run().matches(begin, shape) ? &shape : nullptr;
}

void LineShapes::remember(const Shape& shape) {
  by_name_[guess_name_] = static_cast<std::uint8_t>(&shape - shapes_.data());
}

const char* LineShapes::decode(const Shape& shape, const char* begin, LineState& state) {
  // What string_without_escapes() does for a known event name. Every store
  // below marks its field seen, whatever the value (LineState::scalar()
  // and string() do, set_wrong() too): all at once.
  state.seen |= bit(Field::ev) | shape.fields;
  state.ev = shape.ev;
  TraceEvent& out = state.out;
  const char* p = begin;
  for (std::size_t i = 0; i < shape.value_count; ++i) {
    const Slot& slot = shape.slots[i];
    if (!slot.before.matches(p, shape)) return nullptr;
    p += slot.before.length;
    const Field f = slot.field;
    std::size_t length = 0;
    if (!slot.is_string) {
      std::uint64_t number = 0;
      if (!plain_number(p, number, length)) return nullptr;
      p += length;
      if (slot.how == Store::uint_member) {
        out.*slot.uint_member = number;
      } else if (slot.how == Store::block) {
        out.block = number;
      } else if (slot.how == Store::device) {
        if (number > static_cast<std::uint64_t>(INT_MAX)) state.set_wrong(f);
        else out.dev = static_cast<int>(number);
      } else if (slot.how == Store::unknown_key) {
        ++state.unknown_keys;  // skipped, as simdjson's path skips it
      } else {
        Scalar s;
        s.type = Scalar::Type::unsigned_integer;
        s.u = number;
        state.scalar(f, s);  // a range check, or a number where a string belongs
      }
      continue;
    }
    if (!plain_ascii_string(p, length)) return nullptr;
    const std::string_view text(p, length);
    p += length;
    switch (slot.how) {
      case Store::string_member:
        out.*slot.string_member = text;
        break;
      case Store::hex: {
        std::uint64_t number = 0;
        if (parse_hex_padded(text, number)) out.ptr = number;
        else state.set_wrong(f);
        break;
      }
      case Store::unknown_key:
        ++state.unknown_keys;
        break;
      case Store::stream: {
        std::uint64_t number = 0;
        if (repeats_last(slot, text)) {
          out.stream = slot.last_number;
        } else if (parse_hex_padded(text, number)) {
          out.stream = number;
          remember_last(slot, text);
          slot.last_number = number;
        } else {
          state.set_wrong(f);
        }
        break;
      }
      case Store::memory_kind:
        // What string_without_escapes() stores for a known memory kind.
        if (repeats_last(slot, text)) {
          state.memory_kind = slot.last_kind;
          out.kind = text;
        } else if (state.string_without_escapes(f, text)) {
          remember_last(slot, text);
          slot.last_kind = state.memory_kind;
        } else {
          state.string(f, text, true);
        }
        break;
      default: {
        // Every string field has a store of its own (choose_store): here a
        // string stands where a number belongs, and LineState marks it wrong.
        Scalar s;
        s.type = Scalar::Type::string;
        s.text = text;
        state.scalar(f, s);
        break;
      }
    }
  }
  if (!shape.tail.matches(p, shape)) return nullptr;
  p += shape.tail.length;
  return *p == '\n' ? p : nullptr;
}

// The event's name, hashed: up to 16 bytes after `{"ev":"`, cut at the
// name's closing quote (what follows is the first value, different on
// every line).
std::size_t LineShapes::name_slot(const char* begin) {
  std::uint64_t first = 0;
  std::uint64_t second = 0;
#if defined(__SSE2__) && defined(__x86_64__)
  const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(begin + kNameOffset));
  const auto quotes = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(chunk, _mm_set1_epi8('"'))));
  const auto length = static_cast<char>(std::countr_zero(quotes | 0x10000u));
  const __m128i index = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m128i name = _mm_and_si128(chunk, _mm_cmplt_epi8(index, _mm_set1_epi8(length)));
  first = static_cast<std::uint64_t>(_mm_cvtsi128_si64(name));
  second = static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(name, name)));
#else
  char name[16] = {};
  for (std::size_t i = 0; i < 16 && begin[kNameOffset + i] != '"'; ++i) name[i] = begin[kNameOffset + i];
  std::memcpy(&first, name, 8);
  std::memcpy(&second, name + 8, 8);
#endif
  return static_cast<std::size_t>(((first * 0x9E3779B97F4A7C15ull) ^ (second * 0xC2B2AE3D27D4EB4Full)) >> 58);
}

// How simdjson's path would store a value of `slot`: the same, by the
// quickest route (LineState::scalar(), string() and string_without_escapes()
// for each kind of field).
void LineShapes::choose_store(Slot& slot) {
  const Field f = slot.field;
  slot.how = Store::general;
  if (f == Field::count_) {
    slot.how = Store::unknown_key;
    return;
  }
  const ValueKind kind = kFields[static_cast<std::size_t>(f)].kind;
  const auto i = static_cast<std::size_t>(f);
  if (!slot.is_string) {
    if (f == Field::block) {
      slot.how = Store::block;
    } else if (kind == ValueKind::uint && (kUintMemberFields & bit(f))) {
      slot.how = Store::uint_member;
      slot.uint_member = kUintMembers[i];
    } else if (kind == ValueKind::ordinal) {
      slot.how = Store::device;
    }
  } else if (kind == ValueKind::string && f != Field::kind && (kStringMemberFields & bit(f))) {
    slot.how = Store::string_member;
    slot.string_member = kStringMembers[i];
  } else if (f == Field::ptr || f == Field::stream) {  // graph and exec: general
    slot.how = f == Field::stream ? Store::stream : Store::hex;
  } else if (f == Field::kind) {
    slot.how = Store::memory_kind;
  }
}

void LineShapes::learn(std::string_view text) {
  if (text.size() > kMaxLearnBytes) return;
  // The scans stop at a '\n', with readable bytes beyond: a copy that has them.
  std::memcpy(learn_buffer_.data(), text.data(), text.size());
  std::memset(learn_buffer_.data() + text.size(), '\n', kLearnPadding);
  const char* const line = learn_buffer_.data();
  const char* const end = line + text.size();

  Shape shape;
  std::size_t run_start = 0;  // where the current run starts in shape.constants
  auto append = [&](const char* from, std::size_t n) {
    if (shape.constant_size + n > kMaxConstantBytes) return false;
    std::memcpy(shape.constants.data() + shape.constant_size, from, n);
    shape.constant_size = static_cast<std::uint16_t>(shape.constant_size + n);
    return true;
  };
  // The run from run_start to the end of the constants so far.
  auto close_run = [&](Run& run) {
    const std::size_t length = shape.constant_size - run_start;
    if (length > kMaxRunBytes) return false;  // a long key: the line is simdjson's
    run.offset = static_cast<std::uint16_t>(run_start);
    run.length = static_cast<std::uint8_t>(length);
    run.wanted = length == 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << length) - 1;
    return true;
  };

  // `{"ev":"NAME"` with a known NAME: part of the first run.
  constexpr std::string_view kStart = R"({"ev":")";
  if (text.substr(0, kStart.size()) != kStart) return;
  const char* p = line + kStart.size();
  std::size_t length = 0;
  if (!plain_ascii_string(p, length)) return;
  shape.ev = kEventTable.find(std::string_view(p, length), Event::unknown);
  if (shape.ev == Event::unknown) return;
  p += length + 1;
  if (!append(line, static_cast<std::size_t>(p - line))) return;

  for (;;) {
    if (*p == '}') {
      if (p + 1 != end || !append(p, 1) || !close_run(shape.tail)) return;
      break;
    }
    // `,"KEY":` then a value; the key with no escape.
    const char* const key_start = p;
    if (p[0] != ',' || p[1] != '"' || !plain_ascii_string(p + 2, length)) return;
    const Field f = lookup_field(std::string_view(p + 2, length));
    p += 2 + length + 1;
    if (*p != ':') return;
    ++p;
    // Lists and objects (argv, frames, config) are simdjson's; so is a
    // second `ev`, which would change the event after the first run.
    if (f == Field::ev || (f != Field::count_ && kFields[static_cast<std::size_t>(f)].kind == ValueKind::complex)) {
      return;
    }
    if (shape.value_count == kMaxValues) return;
    Slot& slot = shape.slots[shape.value_count];
    slot.field = f;
    slot.is_string = *p == '"';
    if (slot.is_string) ++p;  // the opening quote ends the run
    if (!append(key_start, static_cast<std::size_t>(p - key_start)) || !close_run(slot.before)) return;
    std::uint64_t ignored = 0;
    if (slot.is_string ? !plain_ascii_string(p, length) : !plain_number(p, ignored, length)) return;
    p += length;
    run_start = shape.constant_size;
    if (slot.is_string) {  // the closing quote starts the next run
      if (!append(p, 1)) return;
      ++p;
    }
    choose_store(slot);
    if (f != Field::count_) shape.fields |= bit(f);
    ++shape.value_count;
  }

  for (std::size_t i = 0; i < count_; ++i) {
    const Shape& known = shapes_[i];
    if (known.constant_size == shape.constant_size && known.value_count == shape.value_count &&
        std::memcmp(known.constants.data(), shape.constants.data(), shape.constant_size) == 0) {
      return;
    }
  }
  std::size_t index = count_;
  if (count_ < kMaxShapes) {
    ++count_;
  } else {
    index = next_victim_;
    next_victim_ = (next_victim_ + 1) % kMaxShapes;
  }
  shapes_[index] = shape;
  by_name_[name_slot(line)] = static_cast<std::uint8_t>(index);
}

}  // namespace cumemtrace::analyzer::detail
