// Streaming reader of cumemtrace traces (.jsonl, or zstd-compressed; the
// compression is recognised by its magic number, whatever the file's name).
//
//   TraceReader reader("trace.jsonl");          // throws TraceError
//   while (const TraceEvent* e = reader.next()) { ... }
//   reader.stats().truncated, reader.stats().bad_lines, ...
//
// Memory is bounded by the longest line (at most ReaderOptions::max_line_bytes
// plus the read buffer) and the mapped window, never by the length of the
// file. Appending to a file while it is read is fine; a file that shrinks
// while it is read (its mapped pages vanish) throws TraceError.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cumemtrace/analyzer/trace_event.h"
#include "cumemtrace/trace_format.h"

namespace cumemtrace::analyzer {

// A trace that cannot be read at all: missing or unreadable file, not a
// cumemtrace trace, a newer format version, corrupt compression. what() is
// one line that starts with the trace's path.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The highest trace format version this reader understands.
inline constexpr int kSupportedTraceVersion = 1;

struct ReaderOptions {
  // Longer lines are skipped as bad lines, so memory stays bounded on garbage.
  std::size_t max_line_bytes = std::size_t{16} << 20;
  // How many bad lines are kept, with their line numbers, for the report.
  std::size_t max_recorded_bad_lines = 5;
  // A progress line on stderr while reading, when stderr is a terminal and
  // reading takes more than a couple of seconds (the command line's choice).
  bool progress = false;
  // A plain file is read through a window of this many bytes mapped into
  // memory, moved along the file: its pages need no copy into a buffer (the
  // kernel's copy was about a tenth of `report`'s time, mapping costs less
  // than half of that); 0: read() into the buffer only. Standard input and
  // compressed traces are always read().
  std::size_t map_window_bytes = std::size_t{4} << 20;
  // A trace whose process was killed is completed first, in place, from the
  // `<trace>.pending` file it left (killed_trace.h): its last events and
  // its `end`, reason `killed`.
  bool complete_killed = true;
};

struct BadLine {
  std::uint64_t line = 0;
  std::string reason;  // e.g. "invalid JSON", "missing field 'size'"
};

inline constexpr std::size_t kEventKindCount = static_cast<std::size_t>(format::Event::unknown) + 1;

struct ReaderStats {
  std::uint64_t lines = 0;         // complete lines read, the header included
  std::uint64_t lines_by_shape = 0;  // of those, decoded through a known line shape (line_shapes.h)
  std::uint64_t bytes = 0;         // decompressed bytes read
  std::array<std::uint64_t, kEventKindCount> events_by_kind{};  // index: format::Event
  std::uint64_t unknown_events = 0;  // lines with an `ev` this reader does not know
  std::uint64_t unknown_fields = 0;  // fields an event does not define, skipped
  std::uint64_t bad_lines = 0;
  std::vector<BadLine> first_bad_lines;  // the first max_recorded_bad_lines
  bool has_end = false;
  bool partial_last_line = false;  // the file ends inside a line
  bool truncated = false;          // no `end` line, or a partial last line
  std::uint64_t last_complete_line = 0;  // where a truncated trace was cut
  std::optional<EndInfo> end;

  std::uint64_t events(format::Event e) const { return events_by_kind[static_cast<std::size_t>(e)]; }
};

namespace detail {
class ByteSource;
class LineParser;
class ProgressMeter;
struct ParseResult;
}  // namespace detail

// A trace whose process was killed (SIGKILL, the OOM killer) left the
// events it had not yet written in `<trace>.pending`; this appends them and
// an `end` line (reason `killed`) and removes that file. TraceReader does it
// on its own (ReaderOptions::complete_killed); `cumemtrace recover` asks.
struct KilledTraceOutcome {
  enum class Status { nothing_to_do, completed, still_running, failed } status = Status::nothing_to_do;
  std::string message;      // failed: why
  std::uint64_t events = 0;  // completed: lines taken from the pending file
};
KilledTraceOutcome complete_killed_trace(const std::string& path);

class TraceReader {
 public:
  // Opens `path` ("-" is standard input) and reads the header line. Throws
  // TraceError if the file cannot be read or is not a supported trace.
  explicit TraceReader(std::string path, ReaderOptions options = {});
  // The same from `source`, `path` only naming the trace in messages (a
  // trace followed while it is written: read/following_source.h).
  TraceReader(std::string path, std::unique_ptr<detail::ByteSource> source, ReaderOptions options);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // The next event (the header first), or nullptr at the end of the trace.
  // Bad lines and unknown events are skipped here and counted in stats().
  // The event and its string views are valid until the next call. Throws
  // TraceError on a read error or corrupt compressed data.
  const TraceEvent* next();

  const TraceHeader& header() const { return header_; }
  const ReaderStats& stats() const { return stats_; }
  const std::string& path() const { return path_; }

 private:
  enum class LineStatus { complete, too_long, partial, none };
  LineStatus read_line(std::string_view& line);
  bool start_batch();
  bool enter_mapped_mode();
  bool map_window_at(std::uint64_t offset);
  void leave_mapped_mode();
  std::uint64_t position() const;
  bool accept(const detail::ParseResult& result, std::uint64_t line_number);
  bool fill_buffer();
  void grow_or_discard();
  void read_header();
  void record_bad_line(std::uint64_t line, std::string reason);
  void finish();

  std::string path_;
  ReaderOptions options_;
  std::unique_ptr<detail::ByteSource> source_;
  std::unique_ptr<detail::LineParser> parser_;
  std::unique_ptr<detail::ProgressMeter> progress_;  // null: none shown

  // Read buffer: data in [begin_, end_), scanned for '\n' up to scan_; a
  // zeroed tail of simdjson padding always follows capacity_.
  std::unique_ptr<char[]> buffer_;
  std::size_t capacity_ = 0;
  // Where [begin_, end_) lie: buffer_, or a window of the file mapped into
  // memory (then padding bytes of the file follow end_, and the last bytes
  // of the file are read() into the buffer).
  const char* data_ = nullptr;
  bool mapped_ = false;
  bool may_map_ = true;
  bool window_is_last_ = false;
  std::uint64_t window_offset_ = 0;  // the file offset of data_[0] when mapped_
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::size_t scan_ = 0;
  bool eof_ = false;
  bool discarding_long_line_ = false;
  bool in_batch_ = false;  // lines come from parser_'s batch, not read_line()
  bool header_pending_ = true;  // the header event has not been yielded yet
  bool finished_ = false;

  TraceHeader header_;
  ReaderStats stats_;
  TraceEvent event_;
};

}  // namespace cumemtrace::analyzer
