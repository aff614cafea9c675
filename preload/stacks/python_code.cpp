#include "stacks/python_code.h"

#include <cstring>

namespace cumemtrace::preload::python {
namespace {

// 3.9's co_lnotab (Objects/lnotab_notes.txt of 3.9; PyCode_Addr2Line in
// 3.9.2 Objects/codeobject.c): (byte increment, signed line increment)
// pairs; the line grows while the running address stays at or below the
// instruction's.
int line_lnotab_39(std::span<const std::uint8_t> t, int line, std::uint64_t offset) {
  std::uint64_t address = 0;
  for (std::size_t i = 0; i + 1 < t.size(); i += 2) {
    address += t[i];
    if (address > offset) break;
    line += static_cast<std::int8_t>(t[i + 1]);
  }
  return line;
}

// 3.10's co_linetable (3.10 Objects/codeobject.c, advance() and
// _PyCode_CheckLineNumber): (byte length, signed line delta) pairs, each
// covering the next `length` bytes; a delta of -128 means "no line" and
// leaves the running line as it was; empty ranges only move the line.
int line_linetable_310(std::span<const std::uint8_t> t, int line, std::uint64_t offset) {
  std::uint64_t end = 0;
  for (std::size_t i = 0; i + 1 < t.size(); i += 2) {
    const std::uint64_t start = end;
    end += t[i];
    const auto delta = static_cast<std::int8_t>(t[i + 1]);
    int range_line = -1;
    if (delta != -128) {
      line += delta;
      range_line = line;
    }
    if (end > start && offset < end) return range_line;
  }
  return -1;
}

// The location table's variable-length integers (3.11 Objects/locations.md):
// 6-bit chunks, least significant first, bit 6 set while more follow.
std::uint64_t varint(std::span<const std::uint8_t> t, std::size_t& i) {
  std::uint64_t value = 0;
  unsigned shift = 0;
  while (i < t.size()) {
    const std::uint8_t b = t[i++];
    if (shift < 64) value |= static_cast<std::uint64_t>(b & 63) << shift;
    shift += 6;
    if ((b & 64) == 0) break;
  }
  return value;
}

std::int64_t signed_varint(std::span<const std::uint8_t> t, std::size_t& i) {
  const std::uint64_t u = varint(t, i);
  const auto magnitude = static_cast<std::int64_t>(u >> 1);
  return (u & 1) != 0 ? -magnitude : magnitude;
}

// 3.11+'s location table (Objects/locations.md, the same in 3.11.2 and
// 3.13.5): entries whose first byte has bit 7 set, the code in bits 3-6
// and the length in code units minus one in bits 0-2. Codes: 15 no
// location; 14 long form and 13 no-column form start with a signed line
// delta; 10-12 one-line forms with delta code-10; 0-9 short forms, delta 0.
int line_locations_311(std::span<const std::uint8_t> t, int line, std::uint64_t offset) {
  std::uint64_t pc = 0;
  std::size_t i = 0;
  while (i < t.size()) {
    const std::uint8_t first = t[i++];
    if ((first & 0x80) == 0) return -1;  // not an entry's first byte: a table we misread
    const unsigned code = first >> 3 & 15;
    const unsigned length = (first & 7) + 1;
    std::int64_t delta = 0;
    if (code == 13 || code == 14) {
      delta = signed_varint(t, i);
    } else if (code >= 10 && code <= 12) {
      delta = code - 10;
    }
    // Skip the rest of the entry: the bytes up to the next with bit 7 set.
    while (i < t.size() && (t[i] & 0x80) == 0) ++i;
    line += static_cast<int>(delta);
    if (offset < pc + length) return code == 15 ? -1 : line;
    pc += length;
  }
  return -1;
}

struct StrView {
  const std::uint8_t* data = nullptr;
  std::size_t length = 0;  // code points
  unsigned kind = 0;       // bytes per code point
  bool ascii = false;
};

// A compact str's characters where they lie (Include/cpython/unicodeobject.h:
// state bits 0-1 interned, 2-4 kind, 5 compact, 6 ascii, GCC's order).
bool view_of(const void* str, const Layout& layout, StrView& v) {
  const auto state = load<std::uint32_t>(str, kUnicodeState);
  const unsigned kind = state >> 2 & 7;
  const bool compact = (state >> 5 & 1) != 0;
  v.ascii = (state >> 6 & 1) != 0;
  if (!compact || (kind != 1 && kind != 2 && kind != 4)) return false;
  v.kind = kind;
  v.length = load<std::uint64_t>(str, kUnicodeLength);
  v.data = static_cast<const std::uint8_t*>(str) + (v.ascii ? layout.unicode_ascii_data : layout.unicode_compact_data);
  return true;
}

void append_code_point(std::uint32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | c >> 6));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;  // a lone surrogate (surrogateescape'd file names)
    out.push_back(static_cast<char>(0xE0 | c >> 12));
    out.push_back(static_cast<char>(0x80 | (c >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x110000) {
    out.push_back(static_cast<char>(0xF0 | c >> 18));
    out.push_back(static_cast<char>(0x80 | (c >> 12 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    append_code_point(0xFFFD, out);
  }
}

}  // namespace

int line_for(LineTableKind kind, std::span<const std::uint8_t> table, int first_line, std::uint64_t offset) {
  switch (kind) {
    case LineTableKind::lnotab_39: return line_lnotab_39(table, first_line, offset);
    case LineTableKind::linetable_310: return line_linetable_310(table, first_line, offset);
    case LineTableKind::locations_311: return line_locations_311(table, first_line, offset);
  }
  return -1;
}

bool append_utf8(const void* str, const void* str_type, const Layout& layout, std::size_t max_length,
                 std::string& out) {
  if (str == nullptr || load<const void*>(str, kObjectType) != str_type) return false;
  StrView v;
  if (!view_of(str, layout, v) || v.length > max_length) return false;
  if (v.ascii) {
    out.append(reinterpret_cast<const char*>(v.data), v.length);
    return true;
  }
  for (std::size_t i = 0; i < v.length; ++i) {
    std::uint32_t c = 0;
    if (v.kind == 1) {
      c = v.data[i];
    } else if (v.kind == 2) {
      std::uint16_t unit;
      std::memcpy(&unit, v.data + 2 * i, 2);
      c = unit;
    } else {
      std::memcpy(&c, v.data + 4 * i, 4);
    }
    append_code_point(c, out);
  }
  return true;
}

}  // namespace cumemtrace::preload::python
