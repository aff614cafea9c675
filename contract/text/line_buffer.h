// A JSON Lines fragment builder for the injected side: appends integers, hex
// pointers and escaped strings into a stack buffer, so building an event line
// allocates nothing on the hot path. Lines longer than the inline capacity
// (argv in the header, deep stacks) spill to the heap.
#pragma once

#include <cassert>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace cumemtrace::contract {

class LineBuffer {
 public:
  static constexpr std::size_t kInline = 480;

  LineBuffer() = default;
  LineBuffer(const LineBuffer&) = delete;
  LineBuffer& operator=(const LineBuffer&) = delete;

  std::string_view view() const {
    return spilled_ ? std::string_view(heap_) : std::string_view(inline_, size_);
  }

  LineBuffer& raw(std::string_view s) {
    // An empty view may have no data at all: memcpy from null is undefined
    // even for 0 bytes (UBSan).
    if (!s.empty()) std::memcpy(grow(s.size()), s.data(), s.size());
    return *this;
  }

  LineBuffer& ch(char c) {
    *grow(1) = c;
    return *this;
  }

  // Numbers are formatted straight into the line: room for the longest
  // form is taken, and what the number did not use is given back.
  LineBuffer& u64(std::uint64_t v) {
    char* p = grow(20);  // 20 digits always fit
    return give_back(static_cast<std::size_t>(p + 20 - std::to_chars(p, p + 20, v).ptr));
  }

  LineBuffer& i64(std::int64_t v) {
    char* p = grow(20);  // sign + 19 digits
    return give_back(static_cast<std::size_t>(p + 20 - std::to_chars(p, p + 20, v).ptr));
  }

  // "0x…" in lowercase, as TRACE_FORMAT.md wants pointers and stream handles.
  LineBuffer& hex(std::uint64_t v) {
    char* p = grow(19);  // quotes, 0x and 16 digits
    p[0] = '"';
    p[1] = '0';
    p[2] = 'x';
    char* end = std::to_chars(p + 3, p + 18, v, 16).ptr;  // lowercase digits
    *end++ = '"';
    return give_back(static_cast<std::size_t>(p + 19 - end));
  }

  // A JSON string. Invalid UTF-8 (argv may hold any bytes) becomes U+FFFD so
  // every line stays valid JSON for jq, DuckDB and our reader.
  LineBuffer& str(std::string_view s) {
    if (needs_escaping(s)) return str_escaped(s);
    char* p = grow(s.size() + 2);
    p[0] = '"';
    std::memcpy(p + 1, s.data(), s.size());
    p[s.size() + 1] = '"';
    return *this;
  }

  // ,"key":  — the separator and key of the next field (keys are plain ASCII).
  LineBuffer& key(std::string_view k) {
    char* p = grow(k.size() + 4);
    p[0] = ',';
    p[1] = '"';
    std::memcpy(p + 2, k.data(), k.size());
    p[k.size() + 2] = '"';
    p[k.size() + 3] = ':';
    return *this;
  }

  LineBuffer& field(std::string_view k, std::uint64_t v) { return key(k).u64(v); }
  LineBuffer& field_i(std::string_view k, std::int64_t v) { return key(k).i64(v); }
  LineBuffer& field_hex(std::string_view k, std::uint64_t v) { return key(k).hex(v); }
  LineBuffer& field_str(std::string_view k, std::string_view v) { return key(k).str(v); }
  LineBuffer& field_true(std::string_view k) {
    std::memcpy(key(k).grow(4), "true", 4);
    return *this;
  }
  // A string the caller knows needs no escaping: a CUDA function name or a
  // schema word (format::name). Checked in debug builds.
  LineBuffer& field_plain(std::string_view k, std::string_view v) {
    assert(!needs_escaping(v));
    char* p = key(k).grow(v.size() + 2);
    p[0] = '"';
    std::memcpy(p + 1, v.data(), v.size());
    p[v.size() + 1] = '"';
    return *this;
  }

 private:
  // Room for `n` more bytes; returns where they go.
  char* grow(std::size_t n) {
    if (!spilled_ && size_ + n <= kInline) {
      char* p = inline_ + size_;
      size_ += n;
      return p;
    }
    return grow_on_heap(n);
  }

  char* grow_on_heap(std::size_t n);

  // Drops the last `n` bytes (room taken by grow() and not used).
  LineBuffer& give_back(std::size_t n) {
    if (spilled_) [[unlikely]] {
      heap_.resize(heap_.size() - n);
    } else {
      size_ -= n;
    }
    return *this;
  }

  static bool needs_escaping(std::string_view s) {
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x80 || c == '"' || c == '\\') return true;
    }
    return false;
  }

  LineBuffer& str_escaped(std::string_view s);

  char inline_[kInline];
  std::size_t size_ = 0;
  bool spilled_ = false;
  std::string heap_;
};

}  // namespace cumemtrace::contract
