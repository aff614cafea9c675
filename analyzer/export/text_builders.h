// Small text builders shared by the streaming writers (timeline, export, HTML):
// numbers without locale or allocation, CSV fields quoted per RFC 4180, JSON
// strings escaped, and a buffer that drains into an std::ostream in large
// writes so a multi-gigabyte output never sits in memory.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer::detail {

void append_uint(std::string& out, std::uint64_t value);
void append_int(std::string& out, std::int64_t value);
void append_hex(std::string& out, std::uint64_t value);  // "0x7f3a00000000", as traces write it

// Trace nanoseconds as microseconds with three decimals ("53.001"): the unit
// of Chrome/Perfetto trace-event timestamps, exact (no floating point).
void append_micros(std::string& out, std::uint64_t ns);

// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma,
// a quote, CR or LF, or starts or ends with a space; else as is.
void append_csv_field(std::string& out, std::string_view value);

// A JSON string literal with its quotes. Invalid UTF-8 becomes U+FFFD, so
// the output is always valid JSON whatever bytes the trace held.
void append_json_string(std::string& out, std::string_view value);

// The innermost frame with a function name, or "" when there is none.
std::string_view innermost_function(const std::vector<OwnedFrame>* frames);

// The innermost Python frame as "Trainer.train_step (/work/train.py:42)"
// ("… (/work/train.py)" when its line is unknown), or "" when there is none:
// the line of the program that allocated, where `function` is often
// PyTorch's allocator.
std::string innermost_python_frame(const std::vector<OwnedFrame>* frames);

// Collects output in `text` and writes it to `out` once it is large.
class ChunkedOutput {
 public:
  explicit ChunkedOutput(std::ostream& out) : out_(out) { text.reserve(kChunk + 4096); }
  ~ChunkedOutput() { flush(); }
  ChunkedOutput(const ChunkedOutput&) = delete;
  ChunkedOutput& operator=(const ChunkedOutput&) = delete;

  // Call after each record: writes when enough has collected.
  void maybe_flush() {
    if (text.size() >= kChunk) flush();
  }
  void flush() {
    if (!text.empty()) out_.write(text.data(), static_cast<std::streamsize>(text.size()));
    text.clear();
  }

  std::string text;

 private:
  static constexpr std::size_t kChunk = std::size_t{1} << 16;
  std::ostream& out_;
};

}  // namespace cumemtrace::analyzer::detail
