// Reading a code object's line table and its strings from raw memory, for
// the Python frame walker: no call into the interpreter, no allocation
// except the std::string a name is copied into (on a cache miss only).
// Pure functions over bytes, so each decoder is unit-tested with tables
// CPython itself produced.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "stacks/python_layout.h"

namespace cumemtrace::preload::python {

// A field of an object in this process, by its offset (unaligned-safe).
template <typename T>
[[gnu::always_inline]] inline T load(const void* base, std::uint32_t offset) {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + offset, sizeof value);
  return value;
}

// The line of the instruction at `offset` of a code object whose first line
// is `first_line`, from its table (`kind`); -1 when the table gives it none.
// `offset`: bytes for lnotab_39 and linetable_310, code units for
// locations_311 (the units each version's frames count in).
int line_for(LineTableKind kind, std::span<const std::uint8_t> table, int first_line, std::uint64_t offset);

// A `str` object's text as UTF-8, appended to `out`; false (and `out`
// unchanged) for a string this reader does not take: not exactly a str
// (`str_type` is &PyUnicode_Type), not compact, or longer than `max_length`
// code points. Compact strings only: every identifier and file name the
// compiler makes is one.
bool append_utf8(const void* str, const void* str_type, const Layout& layout, std::size_t max_length,
                 std::string& out);

// What a cached name keeps of its str, to tell on the next hit whether the
// str at that address still holds the same text: CPython's cached hash
// (computed for every interned name: qualified names always are) and the
// length. Most file names up to 3.12 are never hashed (-1): for those the
// pointer, with the code object's other fields, has to do, for a hit must
// cost a few loads, not a read of the text. A file name freed and another
// allocated at its address, under a new code object at the old one's
// address with the same qualified name, first line and line-table address,
// would keep the old file name: the residue of not being told when an
// object dies.
struct TextSample {
  std::int64_t hash = -1;
  std::uint64_t length = 0;
};
[[gnu::always_inline]] inline TextSample sample_text(const void* str) {
  TextSample sample;
  if (str == nullptr) return sample;
  std::memcpy(&sample.hash, static_cast<const char*>(str) + kUnicodeHash, 8);
  std::memcpy(&sample.length, static_cast<const char*>(str) + kUnicodeLength, 8);
  return sample;
}
// Whether `str` may still hold the text sampled (the test of a cache hit):
// its length and its hash agree. `hashed_since_ok`: a sample taken before
// the str was hashed still matches it (file names); names are hashed when
// they are interned, so theirs must match exactly (a name unhashed when
// sampled is decoded once more when it has been hashed).
[[gnu::always_inline]] inline bool still_matches(const void* str, const TextSample& sample, bool hashed_since_ok) {
  if (str == nullptr) return sample.length == 0 && sample.hash == -1;
  std::int64_t hash;
  std::uint64_t length;
  std::memcpy(&hash, static_cast<const char*>(str) + kUnicodeHash, 8);
  std::memcpy(&length, static_cast<const char*>(str) + kUnicodeLength, 8);
  return length == sample.length && (hash == sample.hash || (hashed_since_ok && sample.hash == -1));
}

// What a code object names, as a cache keeps it to tell that code object
// from another made later at its address: its file, name and line table
// (pointers and the texts' samples) and its first line.
struct CodeIdentity {
  std::uintptr_t file = 0;
  std::uintptr_t name = 0;  // co_qualname (3.11+), else co_name
  std::uintptr_t linetable = 0;
  TextSample name_text;
  TextSample file_text;
  std::int32_t first_line = 0;

  static CodeIdentity of(const Layout& l, const char* code) {
    CodeIdentity id;
    id.file = load<std::uintptr_t>(code, l.code_filename);
    id.name = load<std::uintptr_t>(code, l.code_qualname != kAbsent ? l.code_qualname : l.code_name);
    id.linetable = load<std::uintptr_t>(code, l.code_linetable);
    id.first_line = load<std::int32_t>(code, l.code_firstlineno);
    id.name_text = sample_text(reinterpret_cast<const void*>(id.name));
    id.file_text = sample_text(reinterpret_cast<const void*>(id.file));
    return id;
  }

  // The test of a cache hit: a few loads from the code object and its two
  // strings. Names must match exactly; a file name hashed since it was
  // sampled still matches (TextSample).
  [[gnu::always_inline]] bool still(const Layout& l, const char* code) const {
    const auto now_file = load<std::uintptr_t>(code, l.code_filename);
    const auto now_name = load<std::uintptr_t>(code, l.code_qualname != kAbsent ? l.code_qualname : l.code_name);
    return now_file == file && now_name == name && load<std::uintptr_t>(code, l.code_linetable) == linetable &&
           load<std::int32_t>(code, l.code_firstlineno) == first_line &&
           still_matches(reinterpret_cast<const void*>(name), name_text, false) &&
           still_matches(reinterpret_cast<const void*>(file), file_text, true);
  }
};

}  // namespace cumemtrace::preload::python
