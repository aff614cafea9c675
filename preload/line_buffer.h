// A JSON Lines fragment builder for the injected side: appends integers, hex
// pointers and escaped strings into a stack buffer, so building an event line
// allocates nothing on the hot path. Lines longer than the inline capacity
// (argv in the header, deep stacks) spill to the heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace cumemtrace::preload {

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
    if (!spilled_ && size_ + s.size() <= kInline) {
      std::memcpy(inline_ + size_, s.data(), s.size());
      size_ += s.size();
      return *this;
    }
    spill();
    heap_.append(s);
    return *this;
  }

  LineBuffer& ch(char c) { return raw(std::string_view(&c, 1)); }

  LineBuffer& u64(std::uint64_t v) {
    char tmp[20];
    std::size_t n = 0;
    do {
      tmp[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    char out[20];
    for (std::size_t i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
    return raw(std::string_view(out, n));
  }

  LineBuffer& i64(std::int64_t v) {
    if (v < 0) {
      ch('-');
      return u64(static_cast<std::uint64_t>(0) - static_cast<std::uint64_t>(v));
    }
    return u64(static_cast<std::uint64_t>(v));
  }

  // "0x…" in lowercase, as TRACE_FORMAT.md wants pointers and stream handles.
  LineBuffer& hex(std::uint64_t v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    char out[20] = {'"', '0', 'x'};
    char tmp[16];
    std::size_t n = 0;
    do {
      tmp[n++] = kDigits[v & 0xf];
      v >>= 4;
    } while (v != 0);
    std::size_t len = 3;
    for (std::size_t i = 0; i < n; ++i) out[len++] = tmp[n - 1 - i];
    out[len++] = '"';
    return raw(std::string_view(out, len));
  }

  // A JSON string. Invalid UTF-8 (argv may hold any bytes) becomes U+FFFD so
  // every line stays valid JSON for jq, DuckDB and our reader.
  LineBuffer& str(std::string_view s);

  // ,"key":  — the separator and key of the next field.
  LineBuffer& key(std::string_view k) {
    ch(',');
    ch('"');
    raw(k);
    return raw("\":");
  }

  LineBuffer& field(std::string_view k, std::uint64_t v) { return key(k).u64(v); }
  LineBuffer& field_i(std::string_view k, std::int64_t v) { return key(k).i64(v); }
  LineBuffer& field_hex(std::string_view k, std::uint64_t v) { return key(k).hex(v); }
  LineBuffer& field_str(std::string_view k, std::string_view v) { return key(k).str(v); }

 private:
  void spill() {
    if (spilled_) return;
    heap_.assign(inline_, size_);
    spilled_ = true;
  }

  char inline_[kInline];
  std::size_t size_ = 0;
  bool spilled_ = false;
  std::string heap_;
};

}  // namespace cumemtrace::preload
