#include "export/text_builders.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace cumemtrace::analyzer::detail {

void append_uint(std::string& out, std::uint64_t value) {
  char digits[24];
  auto result = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, result.ptr);
}

void append_int(std::string& out, std::int64_t value) {
  char digits[24];
  auto result = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, result.ptr);
}

void append_hex(std::string& out, std::uint64_t value) {
  char digits[20];
  auto result = std::to_chars(digits, digits + sizeof digits, value, 16);
  out += "0x";
  out.append(digits, result.ptr);
}

void append_micros(std::string& out, std::uint64_t ns) {
  append_uint(out, ns / 1000);
  const unsigned fraction = static_cast<unsigned>(ns % 1000);
  out += '.';
  out += static_cast<char>('0' + fraction / 100);
  out += static_cast<char>('0' + fraction / 10 % 10);
  out += static_cast<char>('0' + fraction % 10);
}

void append_csv_field(std::string& out, std::string_view value) {
  const bool needs_quotes = value.find_first_of(",\"\r\n") != std::string_view::npos ||
                            (!value.empty() && (value.front() == ' ' || value.back() == ' '));
  if (!needs_quotes) {
    out += value;
    return;
  }
  out += '"';
  for (char c : value) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

void append_json_string(std::string& out, std::string_view value) {
  bool plain = true;  // the common case: printable ASCII without quotes or backslashes
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (plain) {
    out += '"';
    out += value;
    out += '"';
    return;
  }
  out += nlohmann::json(std::string(value)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string innermost_python_frame(const std::vector<OwnedFrame>* frames) {
  if (frames == nullptr) return {};
  for (const OwnedFrame& f : *frames) {
    if (!f.py) continue;
    std::string text = f.fn.value_or("??") + " (" + f.file;
    if (f.line) text += ":" + std::to_string(*f.line);
    return text + ")";
  }
  return {};
}

std::string_view innermost_function(const std::vector<OwnedFrame>* frames) {
  if (frames == nullptr) return {};
  for (const OwnedFrame& f : *frames) {
    if (f.fn && !f.fn->empty()) return *f.fn;
  }
  return {};
}

}  // namespace cumemtrace::analyzer::detail
