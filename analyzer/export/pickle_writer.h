// A writer of the pickle subset that PyTorch's memory snapshots are made of
// (`torch.cuda.memory._dump_snapshot()`, read back by PyTorch's memory_viz
// and by our own torch/pickle_reader.h), for `export --format
// torch-snapshot`. It writes only the opcodes the real snapshots use: found
// with Debian's /usr/bin/python3 and `pickletools.genops` over the six files
// of ../shared/traces/torch (SOURCES.md), the command is in
// tests/unit/analyzer/export/torch_snapshot_test.cpp. They are also opcodes
// the unpickler of torch/utils/viz/MemoryViz.js implements (its `unpickle`).
//
// The output is protocol 4 as Python's pickler writes it: PROTO, then the
// opcodes in FRAMEs of about 64 KiB (Python's _FRAME_SIZE_TARGET), each frame
// ending on an opcode boundary as Python's unpickler requires ("pickle
// exhausted before end of frame" otherwise). Integers take the smallest of
// BININT1, BININT2, BININT and LONG1 (Python's save_long); strings
// SHORT_BINUNICODE up to 255 bytes, else BINUNICODE (save_str). Lists and
// dicts are built the way Python's _batch_appends / _batch_setitems do:
// items in batches of 1000 between MARK and APPENDS, a lone last item with
// APPEND. The batch size matters to MemoryViz.js, whose APPENDS spreads the
// batch into one call's arguments.
//
// The memo is explicit: memoize() returns the index that MEMOIZE gives the
// value on top of the stack, get() pushes it again (BINGET below 256, else
// LONG_BINGET). Callers memoize what they repeat (keys, frame lists), not
// every value as Python does, so a reader's memo stays as small as ours.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace cumemtrace::analyzer::pickle_out {

// The opcodes written, as the pickle module names them.
enum Opcode : std::uint8_t {
  kProto = 0x80,
  kFrame = 0x95,
  kStop = '.',
  kMark = '(',
  kEmptyDict = '}',
  kEmptyList = ']',
  kSetItems = 'u',
  kAppend = 'a',
  kAppends = 'e',
  kMemoize = 0x94,
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kBinInt = 'J',
  kLong1 = 0x8a,
  kShortBinUnicode = 0x8c,
  kBinUnicode = 'X',
  kNewFalse = 0x89,
  kTuple2 = 0x86,
  kBinFloat = 'G',
  // Only for allocator_settings, copied back from an imported snapshot:
  // what Python's pickler writes for True and None (none of the six real
  // snapshots has one; MemoryViz.js reads both).
  kNewTrue = 0x88,
  kNone = 'N',
};

class PickleWriter {
 public:
  // Writes PROTO 4 at once; nothing else reaches `out` before a frame is full.
  explicit PickleWriter(std::ostream& out);
  PickleWriter(const PickleWriter&) = delete;
  PickleWriter& operator=(const PickleWriter&) = delete;

  // Inline: three or four of them in every entry.
  void integer(std::int64_t value) {
    if (value >= 0 && value <= 0xff) {
      op_le(kBinInt1, static_cast<std::uint64_t>(value), 1);
    } else if (value >= 0 && value <= 0xffff) {
      op_le(kBinInt2, static_cast<std::uint64_t>(value), 2);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      op_le(kBinInt, static_cast<std::uint64_t>(value), 4);
    } else if (value > 0) {
      // LONG1, as Python's encode_long: bit_length // 8 + 1 bytes, so the
      // last byte's sign bit is clear (an address: 6 bytes).
      const int bytes = static_cast<int>(std::bit_width(static_cast<std::uint64_t>(value)) / 8 + 1);
      op_le(kLong1, static_cast<std::uint64_t>(bytes), 1);
      put_le(static_cast<std::uint64_t>(value), bytes);
    } else {
      negative_long(value);
    }
  }
  void unsigned_integer(std::uint64_t value) {  // LONG1 past 2^63 too
    if (value <= static_cast<std::uint64_t>(INT64_MAX)) {
      integer(static_cast<std::int64_t>(value));
    } else {
      op_le(kLong1, 9, 1);  // eight bytes and a zero one for the sign
      put_le(value, 8);
      put_le(0, 1);
    }
  }
  // UTF-8 text; invalid sequences become U+FFFD (Python would refuse them).
  void string(std::string_view text);
  void boolean_false() { op(kNewFalse); }
  void boolean_true() { op(kNewTrue); }
  void none() { op(kNone); }
  void floating(double value);  // BINFLOAT: big-endian IEEE 754
  void tuple2() { op(kTuple2); }  // the top two values as a tuple
  void empty_dict() { op(kEmptyDict); }
  void empty_list() { op(kEmptyList); }
  void mark() { op(kMark); }
  void setitems() { op(kSetItems); }  // key, value pairs since the mark
  void appends() { op(kAppends); }    // items since the mark
  void append() { op(kAppend); }      // the top value into the list below it

  // MEMOIZE: the value on top of the stack gets the next index, returned.
  std::uint32_t memoize();
  // Pushes the value memoized at `index`.
  void get(std::uint32_t index) {
    if (index <= 0xff) {
      op_le(kBinGet, index, 1);
    } else {
      op_le(kLongBinGet, index, 4);
    }
  }

  // The hot path of an exporter: room for up to `n` bytes written through
  // the returned cursor with the put_* helpers below, then commit(cursor).
  char* reserve(std::size_t n) { return room(n); }
  void commit(char* end) { used_ = static_cast<std::size_t>(end - frame_.data()); }
  static char* put_op(char* p, std::uint8_t code) {
    *p = static_cast<char>(code);
    return p + 1;
  }
  static char* put_get(char* p, std::uint32_t index) {  // as get()
    if (index <= 0xff) {
      p[0] = static_cast<char>(kBinGet);
      p[1] = static_cast<char>(index);
      return p + 2;
    }
    p[0] = static_cast<char>(kLongBinGet);
    for (int i = 0; i < 4; ++i) p[1 + i] = static_cast<char>((index >> (8 * i)) & 0xff);
    return p + 5;
  }
  static char* put_unsigned(char* p, std::uint64_t value) {  // as unsigned_integer(): at most 11 bytes
    int bytes;
    if (value <= 0xff) {
      *p++ = static_cast<char>(kBinInt1);
      bytes = 1;
    } else if (value <= 0xffff) {
      *p++ = static_cast<char>(kBinInt2);
      bytes = 2;
    } else if (value <= static_cast<std::uint64_t>(INT32_MAX)) {
      *p++ = static_cast<char>(kBinInt);
      bytes = 4;
    } else {
      bytes = static_cast<int>(std::bit_width(value) / 8 + 1);  // 9 past 2^63: a zero byte for the sign
      *p++ = static_cast<char>(kLong1);
      *p++ = static_cast<char>(bytes);
    }
    for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>(i < 8 ? (value >> (8 * i)) & 0xff : 0);
    return p + bytes;
  }

  // Call between values: ends the current frame when it is full. Opcodes
  // never straddle frames.
  void boundary() {
    if (used_ >= kFrameTarget) flush_frame();
  }
  // STOP, and everything written out.
  void finish();

  std::uint64_t bytes_written() const { return written_; }

 private:
  static constexpr std::size_t kFrameTarget = std::size_t{64} << 10;
  // The frame is built in a buffer written through a cursor: a push_back
  // per byte was a third of the export's time.
  char* room(std::size_t n) {
    if (used_ + n > frame_.size()) grow(n);
    return frame_.data() + used_;
  }
  void op(std::uint8_t code) { *room(1) = static_cast<char>(code), ++used_; }
  void put_le(std::uint64_t value, int bytes) {
    char* p = room(static_cast<std::size_t>(bytes));
    for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((value >> (8 * i)) & 0xff);
    used_ += static_cast<std::size_t>(bytes);
  }
  void op_le(std::uint8_t code, std::uint64_t value, int bytes) {
    op(code);
    put_le(value, bytes);
  }
  void append_bytes(std::string_view bytes);
  void negative_long(std::int64_t value);
  void grow(std::size_t n);
  void flush_frame();

  std::ostream& out_;
  std::string frame_;  // its first used_ bytes are the frame so far
  std::size_t used_ = 0;
  std::uint32_t memo_size_ = 0;
  std::uint64_t written_ = 0;
};

// Items of a list of `count` values, batched as Python's pickler batches
// them. Between the EMPTY_LIST (and its MEMOIZE, if any) and the items:
//   ListBatches batches(writer, count);
//   for (...) { batches.before_item(); <write the value>; batches.after_item(); }
class ListBatches {
 public:
  static constexpr std::uint64_t kBatchSize = 1000;  // Python's _BATCHSIZE
  ListBatches(PickleWriter& w, std::uint64_t count) : w_(w), left_(count) {}
  void before_item() {
    if (in_batch_ > 0) return;
    batch_ = left_ < kBatchSize ? left_ : kBatchSize;
    if (batch_ > 1) w_.mark();
  }
  void after_item() {
    --left_;
    if (++in_batch_ < batch_) return;
    if (batch_ > 1) {
      w_.appends();
    } else {
      w_.append();
    }
    in_batch_ = 0;
    w_.boundary();
  }

 private:
  PickleWriter& w_;
  std::uint64_t left_;
  std::uint64_t batch_ = 0;
  std::uint64_t in_batch_ = 0;
};

}  // namespace cumemtrace::analyzer::pickle_out
