// A restricted reader of the pickle subset that PyTorch memory snapshots use
// (`torch.cuda.memory._dump_snapshot()`): dicts, lists, tuples, strings,
// bytes, integers, floats, booleans and None, with the memo and protocol-4
// framing. Every opcode that loads code or builds objects (GLOBAL,
// STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, EXT*) and every
// other opcode outside that subset is refused with a PickleError; nothing in
// the file is ever executed. Refusing rather than skipping matters: Python's
// own pickle.load runs whatever a GLOBAL+REDUCE pair names, which is why a
// snapshot must never be opened with it.
//
//   pickle::Document doc = pickle::Document::parse(bytes);   // throws PickleError
//   pickle::Value root = doc.root();
//   if (auto traces = root.get("device_traces")) ...
//
// Memory is linear in the input and capped (Limits): each opcode byte creates
// at most one value, memo entry or container entry, lengths are checked
// against the bytes that remain before anything is allocated, and the
// reader's own structures are charged against max_memory_bytes as they grow. Values live in one arena and refer to each other by index, so a
// memo reference shares a value instead of copying it, and a hostile cycle
// (a list that contains itself) costs nothing and cannot recurse: readers
// walk a fixed schema, never the whole graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cumemtrace::analyzer::pickle {

// Malformed, refused or over-limit input. what() is one line that says where
// (the byte offset) and why.
class PickleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Limits {
  std::size_t max_input_bytes = std::size_t{1} << 30;  // 1 GiB
  std::size_t max_stack = std::size_t{1} << 20;        // values on the unpickler's stack
  std::size_t max_marks = 1024;                        // MARKs open at once: the nesting depth
  std::size_t max_values = std::size_t{1} << 27;       // values created in all
  // What the values, container entries and memo may take, estimated as they
  // grow: a hostile pickle makes up to ~40 bytes of them per input byte.
  std::size_t max_memory_bytes = std::size_t{1} << 30;
};

enum class Type : std::uint8_t { none, boolean, integer, floating, string, bytes, list, tuple, dict };

std::string_view type_name(Type type);

class Document;

// A handle on one value of a Document; valid while the Document lives.
class Value {
 public:
  Type type() const;
  bool is(Type t) const { return type() == t; }

  // nullopt when the value has another type. Booleans are not integers here.
  std::optional<std::int64_t> as_int() const;
  std::optional<double> as_float() const;  // a float, or an integer converted
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;  // str: UTF-8 as pickled
  std::optional<std::string_view> as_bytes() const;

  // Items of a list or tuple, entries of a dict; 0 for other types.
  std::size_t size() const;
  // The i-th item of a list or tuple (i < size()).
  Value item(std::size_t i) const;
  // The i-th key and value of a dict (i < size()), in insertion order.
  Value key(std::size_t i) const;
  Value value(std::size_t i) const;
  // The value under a string key in a dict; the last one set wins, as in
  // Python. nullopt when the key is absent or this is not a dict.
  std::optional<Value> get(std::string_view key) const;

  std::uint32_t id() const { return id_; }  // stable identity within the document

 private:
  friend class Document;
  Value(const Document* doc, std::uint32_t id) : doc_(doc), id_(id) {}
  const Document* doc_;
  std::uint32_t id_;
};

class Document {
 public:
  // Reads a whole pickle (up to its STOP opcode). Throws PickleError.
  static Document parse(std::string bytes, const Limits& limits = {});
  // Reads a file; errors (missing, unreadable, too large, bad pickle) are
  // PickleErrors whose message starts with the path.
  static Document load_file(const std::string& path, const Limits& limits = {});

  Value root() const { return Value(this, root_); }
  std::size_t value_count() const { return nodes_.size(); }

  Document(Document&&) noexcept = default;
  Document& operator=(Document&&) noexcept = default;

 private:
  friend class Value;
  friend class Unpickler;
  struct Node {
    Type type = Type::none;
    std::uint32_t index = 0;  // containers: into children_; strings/bytes: offset into input_
    std::uint64_t bits = 0;   // integer (two's complement), double bits, bool, string length
  };
  Document() = default;

  std::string input_;
  std::vector<Node> nodes_;
  // List and tuple items; dict entries as key, value, key, value...
  std::vector<std::vector<std::uint32_t>> children_;
  std::uint32_t root_ = 0;
};

}  // namespace cumemtrace::analyzer::pickle
