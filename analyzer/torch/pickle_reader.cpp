#include "torch/pickle_reader.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <unordered_map>

namespace cumemtrace::analyzer::pickle {

std::string_view type_name(Type type) {
  switch (type) {
    case Type::none: return "None";
    case Type::boolean: return "bool";
    case Type::integer: return "int";
    case Type::floating: return "float";
    case Type::string: return "str";
    case Type::bytes: return "bytes";
    case Type::list: return "list";
    case Type::tuple: return "tuple";
    case Type::dict: return "dict";
  }
  return "?";
}

namespace {

// Opcodes, as named by Python's pickletools (Lib/pickletools.py documents
// each one; the byte values are the pickle format itself).
namespace op {
constexpr std::uint8_t MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2';
constexpr std::uint8_t NONE = 'N', NEWTRUE = 0x88, NEWFALSE = 0x89;
constexpr std::uint8_t BININT = 'J', BININT1 = 'K', BININT2 = 'M', LONG1 = 0x8a, LONG4 = 0x8b;
constexpr std::uint8_t BINFLOAT = 'G';
constexpr std::uint8_t SHORT_BINUNICODE = 0x8c, BINUNICODE = 'X', BINUNICODE8 = 0x8d;
constexpr std::uint8_t SHORT_BINBYTES = 'C', BINBYTES = 'B', BINBYTES8 = 0x8e, BYTEARRAY8 = 0x96;
constexpr std::uint8_t EMPTY_LIST = ']', EMPTY_DICT = '}', EMPTY_TUPLE = ')';
constexpr std::uint8_t LIST = 'l', DICT = 'd', TUPLE = 't', TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87;
constexpr std::uint8_t APPEND = 'a', APPENDS = 'e', SETITEM = 's', SETITEMS = 'u';
constexpr std::uint8_t BINPUT = 'q', LONG_BINPUT = 'r', MEMOIZE = 0x94, BINGET = 'h', LONG_BINGET = 'j';
constexpr std::uint8_t PROTO = 0x80, FRAME = 0x95;
}  // namespace op

// Opcodes that name or call code: refused with their own message, because a
// file that holds them was made to do more than carry data.
const char* code_opcode_name(std::uint8_t code) {
  switch (code) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    default: return nullptr;
  }
}

// Valid pickle opcodes outside the subset snapshots use.
const char* other_opcode_name(std::uint8_t code) {
  switch (code) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

std::string hex_byte(std::uint8_t b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 15];
}

}  // namespace

// The pickle virtual machine, restricted to plain data.
class Unpickler {
 public:
  Unpickler(Document& doc, const Limits& limits) : doc_(doc), limits_(limits) {}

  void run() {
    const std::string& in = doc_.input_;
    while (true) {
      if (pos_ >= in.size()) fail("the pickle ends without a STOP opcode");
      op_pos_ = pos_;
      const auto code = static_cast<std::uint8_t>(in[pos_++]);
      if (code == op::STOP) {
        if (stack_.size() <= floor()) fail("STOP with an empty stack");
        doc_.root_ = stack_.back();
        return;
      }
      step(code);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw PickleError("offset " + std::to_string(op_pos_) + ": " + why);
  }

  // --- reading arguments -------------------------------------------------
  std::string_view take(std::uint64_t n) {
    const std::string& in = doc_.input_;
    if (n > in.size() - pos_) {
      fail("truncated: an argument of " + std::to_string(n) + " bytes runs past the end of the input");
    }
    std::string_view bytes(in.data() + pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return bytes;
  }
  std::uint64_t read_le(unsigned width) {
    const std::string_view bytes = take(width);
    std::uint64_t value = 0;
    for (unsigned i = 0; i < width; ++i) value |= std::uint64_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
    return value;
  }

  // --- values ------------------------------------------------------------
  // Roughly what an unordered_map node of the memo costs.
  static constexpr std::size_t kMemoEntryBytes = 48;

  void charge(std::size_t bytes) {
    memory_ += bytes;
    if (memory_ > limits_.max_memory_bytes) {
      fail("reading this pickle would take more than " + std::to_string(limits_.max_memory_bytes >> 20) +
           " MiB of memory");
    }
  }

  std::uint32_t make(Type type, std::uint64_t bits = 0, std::uint32_t index = 0) {
    if (doc_.nodes_.size() >= limits_.max_values) {
      fail("more than " + std::to_string(limits_.max_values) + " values");
    }
    charge(sizeof(Document::Node));
    doc_.nodes_.push_back({type, index, bits});
    return static_cast<std::uint32_t>(doc_.nodes_.size() - 1);
  }
  std::uint32_t make_container(Type type, std::vector<std::uint32_t> items = {}) {
    charge(sizeof(std::vector<std::uint32_t>) + items.size() * sizeof(std::uint32_t));
    const auto index = static_cast<std::uint32_t>(doc_.children_.size());
    const std::uint32_t id = make(type, 0, index);
    doc_.children_.push_back(std::move(items));
    return id;
  }
  std::uint32_t make_text(Type type, std::string_view text) {
    return make(type, text.size(), static_cast<std::uint32_t>(text.data() - doc_.input_.data()));
  }
  std::uint32_t make_int(std::int64_t v) { return make(Type::integer, static_cast<std::uint64_t>(v)); }

  // LONG1/LONG4: little-endian two's complement of any length. Snapshots
  // hold addresses and sizes, which fit in 64 bits; wider values are refused
  // rather than silently truncated.
  std::uint32_t make_long(std::string_view bytes) {
    std::size_t n = bytes.size();
    if (n == 0) return make_int(0);
    const bool negative = (static_cast<std::uint8_t>(bytes[n - 1]) & 0x80) != 0;
    const auto fill = static_cast<char>(negative ? 0xff : 0x00);
    while (n > 8 && bytes[n - 1] == fill) --n;  // redundant sign bytes
    if (n > 8) fail("an integer wider than 64 bits");
    std::uint64_t value = negative ? ~std::uint64_t{0} : 0;
    for (std::size_t i = 0; i < n; ++i) {
      value &= ~(std::uint64_t{0xff} << (8 * i));
      value |= std::uint64_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
    }
    // The sign is that of the full encoding; 64 bits must keep it.
    if (negative != (static_cast<std::int64_t>(value) < 0)) fail("an integer wider than 64 bits");
    return make_int(static_cast<std::int64_t>(value));
  }

  // --- the stack ---------------------------------------------------------
  void push(std::uint32_t id) {
    if (stack_.size() >= limits_.max_stack) {
      fail("the pickle stack grows past " + std::to_string(limits_.max_stack) + " values");
    }
    stack_.push_back(id);
  }
  std::uint32_t pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    const std::uint32_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  std::uint32_t top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  // Values above the innermost MARK may be popped; the ones below belong to
  // an enclosing construct.
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<std::uint32_t> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<std::uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  Document::Node& node(std::uint32_t id) { return doc_.nodes_[id]; }

  std::vector<std::uint32_t>& container_of(std::uint32_t id, Type expected, const char* opname) {
    const Document::Node& n = node(id);
    if (n.type != expected) {
      fail(std::string(opname) + " on a " + std::string(type_name(n.type)) + ", not a " +
           std::string(type_name(expected)));
    }
    return doc_.children_[n.index];
  }

  void append(std::uint32_t list, const std::vector<std::uint32_t>& items, const char* opname) {
    auto& children = container_of(list, Type::list, opname);
    charge(items.size() * sizeof(std::uint32_t));
    children.insert(children.end(), items.begin(), items.end());
  }
  void set_items(std::uint32_t dict, const std::vector<std::uint32_t>& pairs, const char* opname) {
    if (pairs.size() % 2 != 0) fail(std::string(opname) + " with an odd number of keys and values");
    auto& children = container_of(dict, Type::dict, opname);
    charge(pairs.size() * sizeof(std::uint32_t));
    children.insert(children.end(), pairs.begin(), pairs.end());
  }

  // --- the memo ----------------------------------------------------------
  void memo_put(std::uint64_t index) {
    if (index > std::numeric_limits<std::uint32_t>::max()) fail("memo index out of range");
    const auto [it, inserted] = memo_.try_emplace(static_cast<std::uint32_t>(index), 0);
    if (inserted) charge(kMemoEntryBytes);
    it->second = top();
  }
  void memo_get(std::uint64_t index) {
    const auto it = memo_.find(static_cast<std::uint32_t>(index));
    if (index > std::numeric_limits<std::uint32_t>::max() || it == memo_.end()) {
      fail("memo index " + std::to_string(index) + " was never stored");
    }
    push(it->second);
  }

  void step(std::uint8_t code) {
    switch (code) {
      case op::PROTO: {
        const auto version = static_cast<std::uint8_t>(take(1)[0]);
        if (version > 5) fail("pickle protocol " + std::to_string(version) + " is newer than 5");
        return;
      }
      case op::FRAME: {
        // Protocol 4 framing only groups opcodes; the length must still fit.
        const std::uint64_t length = read_le(8);
        if (length > doc_.input_.size() - pos_) fail("truncated: a FRAME runs past the end of the input");
        return;
      }
      case op::MARK:
        if (marks_.size() >= limits_.max_marks) {
          fail("nesting deeper than " + std::to_string(limits_.max_marks) + " levels");
        }
        marks_.push_back(stack_.size());
        return;
      case op::POP: pop(); return;
      case op::POP_MARK: pop_mark(); return;
      case op::DUP: push(top()); return;

      case op::NONE: push(make(Type::none)); return;
      case op::NEWTRUE: push(make(Type::boolean, 1)); return;
      case op::NEWFALSE: push(make(Type::boolean, 0)); return;
      case op::BININT:
        push(make_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4)))));
        return;
      case op::BININT1: push(make_int(static_cast<std::int64_t>(read_le(1)))); return;
      case op::BININT2: push(make_int(static_cast<std::int64_t>(read_le(2)))); return;
      case op::LONG1: push(make_long(take(read_le(1)))); return;
      case op::LONG4: {
        const auto length = static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4)));
        if (length < 0) fail("LONG4 with a negative length");
        push(make_long(take(static_cast<std::uint64_t>(length))));
        return;
      }
      case op::BINFLOAT: {
        // Big-endian IEEE 754 double.
        const std::string_view bytes = take(8);
        std::uint64_t bits = 0;
        for (char c : bytes) bits = (bits << 8) | static_cast<std::uint8_t>(c);
        push(make(Type::floating, bits));
        return;
      }

      case op::SHORT_BINUNICODE: push(make_text(Type::string, take(read_le(1)))); return;
      case op::BINUNICODE: push(make_text(Type::string, take(read_le(4)))); return;
      case op::BINUNICODE8: push(make_text(Type::string, take(read_le(8)))); return;
      case op::SHORT_BINBYTES: push(make_text(Type::bytes, take(read_le(1)))); return;
      case op::BINBYTES: push(make_text(Type::bytes, take(read_le(4)))); return;
      case op::BINBYTES8:
      case op::BYTEARRAY8: push(make_text(Type::bytes, take(read_le(8)))); return;

      case op::EMPTY_LIST: push(make_container(Type::list)); return;
      case op::EMPTY_DICT: push(make_container(Type::dict)); return;
      case op::EMPTY_TUPLE: push(make_container(Type::tuple)); return;
      case op::LIST: push(make_container(Type::list, pop_mark())); return;
      case op::TUPLE: push(make_container(Type::tuple, pop_mark())); return;
      case op::DICT: {
        std::vector<std::uint32_t> pairs = pop_mark();
        if (pairs.size() % 2 != 0) fail("DICT with an odd number of keys and values");
        push(make_container(Type::dict, std::move(pairs)));
        return;
      }
      case op::TUPLE1:
      case op::TUPLE2:
      case op::TUPLE3: {
        const std::size_t n = code - op::TUPLE1 + 1u;
        if (stack_.size() < floor() + n) fail("stack underflow");
        std::vector<std::uint32_t> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        push(make_container(Type::tuple, std::move(items)));
        return;
      }

      case op::APPEND: {
        const std::uint32_t item = pop();
        append(top(), {item}, "APPEND");
        return;
      }
      case op::APPENDS: {
        const std::vector<std::uint32_t> items = pop_mark();
        append(top(), items, "APPENDS");
        return;
      }
      case op::SETITEM: {
        const std::uint32_t value = pop();
        const std::uint32_t key = pop();
        set_items(top(), {key, value}, "SETITEM");
        return;
      }
      case op::SETITEMS: {
        const std::vector<std::uint32_t> pairs = pop_mark();
        set_items(top(), pairs, "SETITEMS");
        return;
      }

      case op::BINPUT: memo_put(read_le(1)); return;
      case op::LONG_BINPUT: memo_put(read_le(4)); return;
      case op::MEMOIZE: memo_put(memo_.size()); return;
      case op::BINGET: memo_get(read_le(1)); return;
      case op::LONG_BINGET: memo_get(read_le(4)); return;
      default: break;
    }
    if (const char* name = code_opcode_name(code)) {
      fail(std::string("refused pickle opcode ") + name +
           ": it loads or calls code, and a memory snapshot holds only plain data");
    }
    if (const char* name = other_opcode_name(code)) {
      fail(std::string("unsupported pickle opcode ") + name +
           " (a memory snapshot holds only dicts, lists, tuples, strings, bytes, numbers, booleans and None)");
    }
    fail("byte " + hex_byte(code) + " is not a pickle opcode (not a pickle, or a corrupt one)");
  }

  Document& doc_;
  const Limits& limits_;
  std::size_t pos_ = 0;
  std::size_t op_pos_ = 0;  // where the current opcode starts, for messages
  std::vector<std::uint32_t> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, std::uint32_t> memo_;
  std::size_t memory_ = 0;  // charged so far, against Limits::max_memory_bytes
};

Document Document::parse(std::string bytes, const Limits& limits) {
  if (bytes.size() > limits.max_input_bytes) {
    throw PickleError("the input is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                      std::to_string(limits.max_input_bytes));
  }
  if (bytes.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw PickleError("the input is larger than 4 GiB");
  }
  Document doc;
  doc.input_ = std::move(bytes);
  Unpickler(doc, limits).run();
  return doc;
}

Document Document::load_file(const std::string& path, const Limits& limits) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw PickleError(path + ": cannot open: " + std::strerror(errno));
  const std::streamoff size = file.tellg();
  if (size < 0) throw PickleError(path + ": cannot read its size");
  if (static_cast<std::uint64_t>(size) > limits.max_input_bytes) {
    throw PickleError(path + ": " + std::to_string(size) + " bytes, over the limit of " +
                      std::to_string(limits.max_input_bytes));
  }
  std::string bytes(static_cast<std::size_t>(size), '\0');
  file.seekg(0);
  if (!file.read(bytes.data(), size)) throw PickleError(path + ": read error");
  // PyTorch writes snapshots with pickle protocol 4, which opens with PROTO.
  // Without it the file is almost surely something else (a trace, a
  // checkpoint), and "memo index … was never stored" alone would puzzle.
  const bool opens_with_proto = !bytes.empty() && static_cast<std::uint8_t>(bytes[0]) == op::PROTO;
  try {
    return parse(std::move(bytes), limits);
  } catch (const PickleError& e) {
    if (opens_with_proto) throw PickleError(path + ": " + e.what());
    throw PickleError(path + ": not a PyTorch memory snapshot: a pickle of protocol 2 or later, as "
                      "torch.cuda.memory._dump_snapshot writes, starts with byte 0x80 (" + e.what() + ")");
  }
}

// --- Value ------------------------------------------------------------------

Type Value::type() const { return doc_->nodes_[id_].type; }

std::optional<std::int64_t> Value::as_int() const {
  const auto& n = doc_->nodes_[id_];
  if (n.type != Type::integer) return std::nullopt;
  return static_cast<std::int64_t>(n.bits);
}

std::optional<double> Value::as_float() const {
  const auto& n = doc_->nodes_[id_];
  if (n.type == Type::floating) return std::bit_cast<double>(n.bits);
  if (n.type == Type::integer) return static_cast<double>(static_cast<std::int64_t>(n.bits));
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  const auto& n = doc_->nodes_[id_];
  if (n.type != Type::boolean) return std::nullopt;
  return n.bits != 0;
}

std::optional<std::string_view> Value::as_string() const {
  const auto& n = doc_->nodes_[id_];
  if (n.type != Type::string) return std::nullopt;
  return std::string_view(doc_->input_.data() + n.index, static_cast<std::size_t>(n.bits));
}

std::optional<std::string_view> Value::as_bytes() const {
  const auto& n = doc_->nodes_[id_];
  if (n.type != Type::bytes) return std::nullopt;
  return std::string_view(doc_->input_.data() + n.index, static_cast<std::size_t>(n.bits));
}

std::size_t Value::size() const {
  const auto& n = doc_->nodes_[id_];
  switch (n.type) {
    case Type::list:
    case Type::tuple: return doc_->children_[n.index].size();
    case Type::dict: return doc_->children_[n.index].size() / 2;
    default: return 0;
  }
}

Value Value::item(std::size_t i) const { return Value(doc_, doc_->children_[doc_->nodes_[id_].index][i]); }
Value Value::key(std::size_t i) const { return Value(doc_, doc_->children_[doc_->nodes_[id_].index][2 * i]); }
Value Value::value(std::size_t i) const {
  return Value(doc_, doc_->children_[doc_->nodes_[id_].index][2 * i + 1]);
}

std::optional<Value> Value::get(std::string_view wanted) const {
  if (type() != Type::dict) return std::nullopt;
  for (std::size_t i = size(); i-- > 0;) {
    if (key(i).as_string() == wanted) return value(i);
  }
  return std::nullopt;
}

}  // namespace cumemtrace::analyzer::pickle
