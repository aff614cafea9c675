// Builds pickles in tests: a small value tree written with the protocol-2
// opcodes Python's pickler uses for plain data, plus raw opcode bytes for
// hand-made (malformed, hostile) inputs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace cumemtrace::testing {

struct PickleValue;
using PickleList = std::vector<PickleValue>;
using PickleDict = std::vector<std::pair<std::string, PickleValue>>;  // string keys, in order

struct PickleValue {
  struct None {};
  struct Tuple {
    PickleList items;
  };
  std::variant<None, bool, std::int64_t, double, std::string, std::shared_ptr<PickleList>,
               std::shared_ptr<PickleDict>, std::shared_ptr<Tuple>>
      v;

  PickleValue() : v(None{}) {}
  PickleValue(bool b) : v(b) {}
  PickleValue(int i) : v(std::int64_t{i}) {}
  PickleValue(std::int64_t i) : v(i) {}
  PickleValue(std::uint64_t i) : v(static_cast<std::int64_t>(i)) {}
  PickleValue(double d) : v(d) {}
  PickleValue(const char* s) : v(std::string(s)) {}
  PickleValue(std::string s) : v(std::move(s)) {}
  PickleValue(PickleList list) : v(std::make_shared<PickleList>(std::move(list))) {}
  PickleValue(PickleDict dict) : v(std::make_shared<PickleDict>(std::move(dict))) {}
  static PickleValue tuple(PickleList items) {
    PickleValue p;
    p.v = std::make_shared<Tuple>(Tuple{std::move(items)});
    return p;
  }
};

namespace pickle_bytes {

inline std::string le(std::uint64_t v, int width) {
  std::string out;
  for (int i = 0; i < width; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// str as BINUNICODE.
inline std::string str(const std::string& s) { return "X" + le(s.size(), 4) + s; }

// An integer as BININT (32-bit) or LONG1 (two's complement, shortest).
inline std::string integer(std::int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) return "J" + le(static_cast<std::uint32_t>(v), 4);
  std::string bytes = le(static_cast<std::uint64_t>(v), 8);
  while (bytes.size() > 1) {
    const auto last = static_cast<unsigned char>(bytes.back());
    const auto prev = static_cast<unsigned char>(bytes[bytes.size() - 2]);
    if ((last == 0x00 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80))) bytes.pop_back();
    else break;
  }
  return "\x8a" + std::string(1, static_cast<char>(bytes.size())) + bytes;
}

inline void write(const PickleValue& value, std::string& out) {
  struct Visitor {
    std::string& out;
    void operator()(PickleValue::None) { out += 'N'; }
    void operator()(bool b) { out += b ? '\x88' : '\x89'; }
    void operator()(std::int64_t i) { out += integer(i); }
    void operator()(double d) {
      std::uint64_t bits;
      static_assert(sizeof bits == sizeof d);
      __builtin_memcpy(&bits, &d, sizeof d);
      out += 'G';
      for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
    }
    void operator()(const std::string& s) { out += str(s); }
    void operator()(const std::shared_ptr<PickleList>& list) {
      out += "](";
      for (const PickleValue& item : *list) write(item, out);
      out += 'e';
    }
    void operator()(const std::shared_ptr<PickleDict>& dict) {
      out += "}(";
      for (const auto& [k, item] : *dict) {
        out += str(k);
        write(item, out);
      }
      out += 'u';
    }
    void operator()(const std::shared_ptr<PickleValue::Tuple>& t) {
      out += '(';
      for (const PickleValue& item : t->items) write(item, out);
      out += 't';
    }
  };
  std::visit(Visitor{out}, value.v);
}

}  // namespace pickle_bytes

// A whole pickle: PROTO 2, the value, STOP.
inline std::string to_pickle(const PickleValue& value) {
  std::string out = "\x80\x02";
  pickle_bytes::write(value, out);
  out += '.';
  return out;
}

}  // namespace cumemtrace::testing
