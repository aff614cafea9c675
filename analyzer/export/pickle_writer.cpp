#include "export/pickle_writer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

namespace cumemtrace::analyzer::pickle_out {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one
// (overlong forms, surrogates and code points past U+10FFFF included, which
// Python's decoder refuses too).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
    return 0;
  }
  return n;
}

}  // namespace

PickleWriter::PickleWriter(std::ostream& out) : out_(out) {
  frame_.resize(kFrameTarget + 4096);
  const std::array<char, 2> proto{static_cast<char>(kProto), 4};
  out_.write(proto.data(), proto.size());
  written_ += proto.size();
}

void PickleWriter::grow(std::size_t n) { frame_.resize(std::max(frame_.size() * 2, used_ + n)); }

void PickleWriter::append_bytes(std::string_view bytes) {
  std::memcpy(room(bytes.size()), bytes.data(), bytes.size());
  used_ += bytes.size();
}

// LONG1 of a value below -2^31: the shortest two's complement (Python's
// encode_long drops a leading 0xff byte the same way).
void PickleWriter::negative_long(std::int64_t value) {
  int bytes = 1;
  while (bytes < 8 && value < -(std::int64_t{1} << (8 * bytes - 1))) ++bytes;
  op_le(kLong1, static_cast<std::uint64_t>(bytes), 1);
  put_le(static_cast<std::uint64_t>(value), bytes);
}

void PickleWriter::string(std::string_view text) {
  std::string fixed;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i);
    if (n == 0) {
      if (fixed.empty()) fixed.assign(text.substr(0, i));
      fixed += "\xef\xbf\xbd";  // U+FFFD
      ++i;
      continue;
    }
    if (!fixed.empty()) fixed.append(text.substr(i, n));
    i += n;
  }
  std::string_view utf8 = fixed.empty() ? text : std::string_view(fixed);
  if (utf8.size() <= 0xff) {
    op_le(kShortBinUnicode, utf8.size(), 1);
  } else {
    // Longer than BINUNICODE's 4-byte length would be BINUNICODE8, which
    // the snapshots never use: names that long are cut.
    utf8 = utf8.substr(0, std::min<std::size_t>(utf8.size(), 0xffffffffu));
    op_le(kBinUnicode, utf8.size(), 4);
  }
  append_bytes(utf8);
}

void PickleWriter::floating(double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  op(kBinFloat);
  char* p = room(8);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((bits >> (8 * (7 - i))) & 0xff);  // big-endian
  used_ += 8;
}

std::uint32_t PickleWriter::memoize() {
  op(kMemoize);
  return memo_size_++;
}

void PickleWriter::flush_frame() {
  if (used_ == 0) return;
  char header[9];
  header[0] = static_cast<char>(kFrame);
  for (int i = 0; i < 8; ++i) header[1 + i] = static_cast<char>((std::uint64_t{used_} >> (8 * i)) & 0xff);
  out_.write(header, sizeof header);
  out_.write(frame_.data(), static_cast<std::streamsize>(used_));
  written_ += sizeof header + used_;
  used_ = 0;
}

void PickleWriter::finish() {
  op(kStop);
  flush_frame();
  out_.flush();
}

}  // namespace cumemtrace::analyzer::pickle_out
