#include "cumemtrace/analyzer/trace_reader.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "read/byte_source.h"
#include "cumemtrace/analyzer/units.h"
#include "read/killed_trace.h"
#include "read/line_parser.h"
#include "read/progress.h"

namespace cumemtrace::analyzer {

namespace {
// Big enough that refills are rare, small enough to stay in cache-friendly
// territory; it grows only for a longer line.
constexpr std::size_t kInitialBufferBytes = std::size_t{256} << 10;
constexpr std::size_t kBatchBytes = std::size_t{64} << 10;
// The progress meter reads the clock once per this many lines (a mask).
constexpr std::uint64_t kProgressEveryLines = (std::uint64_t{1} << 15) - 1;

// What a file that is not a trace seems to be, from its first bytes, for
// the one-line error: "first line is not a header" alone leaves a user
// wondering what went wrong when they passed the wrong file.
std::string describe_foreign(std::string_view start) {
  const auto starts_with = [start](std::string_view magic) { return start.substr(0, magic.size()) == magic; };
  struct Signature {
    std::string_view magic;
    const char* what;
  };
  static constexpr Signature kSignatures[] = {
      {"\x1f\x8b", "gzip-compressed data; cumemtrace reads .jsonl or zstd-compressed .jsonl.zst"},
      {"BZh", "bzip2-compressed data; cumemtrace reads .jsonl or zstd-compressed .jsonl.zst"},
      {"\xfd" "7zXZ", "xz-compressed data; cumemtrace reads .jsonl or zstd-compressed .jsonl.zst"},
      {"PK\x03\x04", "a zip archive"},
      {"\x7f" "ELF", "an executable or library"},
      {"v ", "it looks like a heaptrack trace"},
  };
  for (const Signature& s : kSignatures) {
    if (starts_with(s.magic)) return s.what;
  }
  if (start.size() >= 2 && start[0] == '\x80' && start[1] >= '\x02' && start[1] <= '\x05') return "a Python pickle; read a PyTorch memory snapshot with: cumemtrace import-torch FILE -o trace.jsonl";
  const std::size_t first = start.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && start[first] == '[') return "a JSON array, not one JSON object per line";
  return "first line is not a header";
}

std::string quoted(std::string_view s) {
  constexpr std::size_t kMaxShown = 40;
  std::string out = "'";
  for (char c : s.substr(0, kMaxShown)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}
}  // namespace

namespace {
// One string member of a minified object; nullopt for anything else.
std::optional<std::string> string_member(const std::string& object_json, std::string_view name) {
  if (object_json.empty()) return std::nullopt;
  // No exceptions: a header built elsewhere may hold anything.
  const nlohmann::json object = nlohmann::json::parse(object_json, nullptr, false);
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}
}  // namespace

std::optional<std::string> TraceHeader::env(std::string_view name) const { return string_member(env_json, name); }

std::optional<std::string> TraceHeader::rank_env(std::string_view name) const {
  return string_member(rank_env_json, name);
}

namespace {
std::unique_ptr<detail::ByteSource> open_completed(const std::string& path, const ReaderOptions& options) {
  if (options.complete_killed && path != "-") {
    try {
      detail::complete_killed_trace(path);
    } catch (const std::exception&) {
      // Out of memory while recovering: the trace is read as it is.
    }
  }
  return detail::open_byte_source(path);
}
}  // namespace

TraceReader::TraceReader(std::string path, ReaderOptions options)
    : TraceReader(path, open_completed(path, options), options) {}

TraceReader::TraceReader(std::string path, std::unique_ptr<detail::ByteSource> source, ReaderOptions options)
    : path_(std::move(path)), options_(options), source_(std::move(source)) {
  options_.max_line_bytes = std::max<std::size_t>(options_.max_line_bytes, 64);
  parser_ = std::make_unique<detail::LineParser>();
  capacity_ = std::min(kInitialBufferBytes, options_.max_line_bytes + 1);
  buffer_ = std::make_unique<char[]>(capacity_ + detail::LineParser::kPadding);  // zeroed
  data_ = buffer_.get();
  if (options_.progress) progress_ = detail::make_terminal_progress(path_, source_->size());
  read_header();
}

TraceReader::~TraceReader() = default;

bool TraceReader::fill_buffer() {
  if (begin_ > 0) {  // keep only the unfinished line, at the front
    std::memmove(buffer_.get(), buffer_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    scan_ -= begin_;
    begin_ = 0;
  }
  if (end_ == capacity_) grow_or_discard();
  std::size_t n = source_->read(buffer_.get() + end_, capacity_ - end_);
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += n;
  stats_.bytes += n;
  return true;
}

void TraceReader::grow_or_discard() {
  // The buffer holds one unfinished line and nothing else.
  const std::size_t needed = options_.max_line_bytes + 1;  // the line and its newline
  if (capacity_ < needed) {
    std::size_t new_capacity = std::min(capacity_ * 2, needed);
    auto bigger = std::make_unique<char[]>(new_capacity + detail::LineParser::kPadding);
    std::memcpy(bigger.get(), buffer_.get(), end_);
    buffer_ = std::move(bigger);
    data_ = buffer_.get();
    capacity_ = new_capacity;
    return;
  }
  if (stats_.lines == 0) {
    throw TraceError(path_ + ": not a cumemtrace trace (" + describe_foreign(std::string_view(buffer_.get(), end_)) +
                     ", and no line break in its first " + format_bytes(options_.max_line_bytes) + ")");
  }
  // Too long to be a trace line: drop it as it streams past.
  discarding_long_line_ = true;
  begin_ = scan_ = end_ = 0;
}

TraceReader::LineStatus TraceReader::read_line(std::string_view& line) {
  for (;;) {
    if (scan_ < end_) {
      const void* newline = std::memchr(buffer_.get() + scan_, '\n', end_ - scan_);
      if (newline != nullptr) {
        const std::size_t pos = static_cast<std::size_t>(static_cast<const char*>(newline) - buffer_.get());
        line = std::string_view(buffer_.get() + begin_, pos - begin_);
        begin_ = scan_ = pos + 1;
        if (discarding_long_line_) {
          discarding_long_line_ = false;
          return LineStatus::too_long;
        }
        return LineStatus::complete;
      }
      scan_ = end_;
    }
    if (discarding_long_line_) begin_ = scan_ = end_ = 0;
    if (eof_ || !fill_buffer()) {
      if (begin_ == end_ && !discarding_long_line_) return LineStatus::none;
      line = std::string_view(buffer_.get() + begin_, end_ - begin_);
      begin_ = scan_ = end_;
      return LineStatus::partial;
    }
  }
}

void TraceReader::read_header() {
  std::string_view line;
  const LineStatus status = read_line(line);
  if (status == LineStatus::none) {
    if (source_->ended_inside_frame()) {
      throw TraceError(path_ + ": compressed trace cut short before its first line");
    }
    throw TraceError(path_ + ": empty file, not a cumemtrace trace");
  }
  if (status == LineStatus::complete) ++stats_.lines;
  // A header cut short is still parsed: it is the whole trace if it is valid.
  const detail::ParseResult result = parser_->parse(line, event_);
  const bool is_header = result.status != detail::ParseResult::Status::unknown_event &&
                         event_.ev == format::Event::header;
  if (!is_header) throw TraceError(path_ + ": not a cumemtrace trace (" + describe_foreign(line) + ")");
  if (event_.format_name != format::kFormatName) {
    throw TraceError(path_ + ": not a cumemtrace trace (header format is " +
                     quoted(event_.format_name) + ")");
  }
  if (result.status == detail::ParseResult::Status::bad && result.field == detail::Field::version) {
    throw TraceError(path_ + ": unreadable trace format version in the header");
  }
  if (event_.version > kSupportedTraceVersion) {
    throw TraceError(path_ + ": trace format version " + std::to_string(event_.version) +
                     " is newer than this analyzer supports (" +
                     std::to_string(kSupportedTraceVersion) + ")");
  }
  if (event_.version < 1) {
    throw TraceError(path_ + ": unsupported trace format version " + std::to_string(event_.version));
  }
  if (result.status == detail::ParseResult::Status::bad) {
    throw TraceError(path_ + ": bad header line: " + result.describe());
  }
  stats_.unknown_fields += result.unknown_fields;
  header_.format = event_.format_name;
  header_.version = static_cast<int>(event_.version);
  header_.pid = event_.pid;
  header_.ppid = event_.ppid;
  header_.host = event_.host;
  header_.exe = event_.exe;
  header_.argv.assign(event_.argv.begin(), event_.argv.end());
  header_.start_unix_ns = event_.start_unix_ns;
  header_.pool = event_.pool;
  header_.config_json = event_.config_json;
  header_.env_json = event_.env_json;
  header_.rank_env_json = event_.rank_env_json;
  event_.line = 1;
  event_.header = &header_;
  ++stats_.events_by_kind[static_cast<std::size_t>(format::Event::header)];
  if (status == LineStatus::partial) {
    stats_.partial_last_line = true;
    finish();
  }
}

void TraceReader::record_bad_line(std::uint64_t line, std::string reason) {
  ++stats_.bad_lines;
  if (stats_.first_bad_lines.size() < options_.max_recorded_bad_lines) {
    stats_.first_bad_lines.push_back(BadLine{line, std::move(reason)});
  }
}

void TraceReader::finish() {
  if (source_->window_lost_bytes()) throw TraceError(path_ + ": the file shrank while it was being read");
  finished_ = true;
  stats_.lines_by_shape = parser_->lines_by_shape();
  if (progress_) progress_->finish();
  stats_.last_complete_line = stats_.lines;
  stats_.truncated = !stats_.has_end || stats_.partial_last_line || source_->ended_inside_frame();
}

std::uint64_t TraceReader::position() const {
  return mapped_ ? window_offset_ + begin_ : source_->position();
}

// Maps the file from `offset` (a line's start) on; [begin_, end_) becomes
// the window less its last kPadding bytes, which simdjson may read past a
// batch's end.
bool TraceReader::map_window_at(std::uint64_t offset) {
  const std::string_view window = source_->map_window(offset, options_.map_window_bytes);
  if (window.size() <= detail::LineParser::kPadding) return false;
  data_ = window.data();
  window_offset_ = offset;
  window_is_last_ = offset + window.size() >= source_->size();
  begin_ = scan_ = 0;
  end_ = window.size() - detail::LineParser::kPadding;
  return true;
}

// From the buffer to a mapped window, where the buffer's unused bytes start.
bool TraceReader::enter_mapped_mode() {
  // Lines longer than max_line_bytes are read_line()'s to refuse: a batch
  // must not be able to hold one.
  if (!may_map_ || options_.map_window_bytes == 0 || options_.max_line_bytes < kBatchBytes ||
      discarding_long_line_ || eof_) {
    return false;
  }
  const std::size_t unused = end_ - begin_;
  const std::size_t scanned = scan_ - begin_;  // known to hold no newline
  const std::uint64_t offset = source_->position() - unused;
  if (source_->size() <= source_->position() || !map_window_at(offset)) {
    may_map_ = false;  // everything is in the buffer already, or no mapping
    data_ = buffer_.get();
    return false;
  }
  stats_.bytes -= unused;  // counted again as batches take them from the window
  scan_ = std::min(end_, scanned);
  mapped_ = true;
  return true;
}

// Back to read() at begin_ for good: at the file's last bytes (they lack the
// padding, and the file may have grown or end inside a line), or at a line
// longer than the window.
void TraceReader::leave_mapped_mode() {
  source_->seek(window_offset_ + begin_);
  mapped_ = false;
  may_map_ = false;
  eof_ = false;
  data_ = buffer_.get();
  begin_ = scan_ = end_ = 0;
}

bool TraceReader::start_batch() {
  if (!mapped_ && !enter_mapped_mode() && (discarding_long_line_ || scan_ >= end_)) return false;
  for (;;) {
    // The complete lines in the next kBatchBytes: small enough that they are
    // still in the cache when decoded after simdjson's indexing pass over them.
    // [begin_, scan_) holds no newline (read_line scanned it): look after it.
    const std::size_t limit = std::min(end_, std::max(scan_, begin_ + kBatchBytes));
    const void* last = limit > scan_ ? ::memrchr(data_ + scan_, '\n', limit - scan_) : nullptr;
    if (last == nullptr && mapped_ && limit < end_) {
      // A line longer than a batch: in a window, it is a batch of its own
      // (up to the longest line allowed; longer ones are read_line()'s).
      const std::size_t far = std::min(end_, begin_ + options_.max_line_bytes + 1);
      if (far > limit) last = std::memchr(data_ + limit, '\n', far - limit);
    }
    if (last != nullptr) {
      const std::size_t stop = static_cast<std::size_t>(static_cast<const char*>(last) - data_) + 1;
      parser_->start_batch(std::string_view(data_ + begin_, stop - begin_));
      if (mapped_) stats_.bytes += stop - begin_;
      begin_ = scan_ = stop;
      in_batch_ = true;
      return true;
    }
    if (!mapped_) return false;  // a line longer than a batch: read_line() takes it
    // No complete line left in this window: move it to begin_, if that
    // gains anything; else read() the rest.
    if (!window_is_last_ && begin_ > 0 && map_window_at(window_offset_ + begin_)) continue;
    leave_mapped_mode();
    return false;
  }
}

bool TraceReader::accept(const detail::ParseResult& result, std::uint64_t line_number) {
  event_.line = line_number;
  switch (result.status) {
    case detail::ParseResult::Status::bad:
      if (stats_.first_bad_lines.size() < options_.max_recorded_bad_lines) {
        record_bad_line(line_number, result.describe());
      } else {
        ++stats_.bad_lines;
      }
      return false;
    case detail::ParseResult::Status::unknown_event:
      ++stats_.unknown_events;
      ++stats_.events_by_kind[static_cast<std::size_t>(format::Event::unknown)];
      return false;
    case detail::ParseResult::Status::ok:
      break;
  }
  stats_.unknown_fields += result.unknown_fields;
  ++stats_.events_by_kind[static_cast<std::size_t>(event_.ev)];
  if (event_.ev == format::Event::end) {
    stats_.has_end = true;
    stats_.end = EndInfo{event_.t, event_.end_reason, std::string(event_.reason),
                         event_.live, event_.live_bytes, event_.dropped};
  }
  return true;
}

const TraceEvent* TraceReader::next() {
  if (header_pending_) {  // decoded by the constructor, still in event_
    header_pending_ = false;
    return &event_;
  }
  if (finished_) return nullptr;
  for (;;) {
    std::string_view line;
    detail::ParseResult result;
    // The complete lines already in the buffer go as one batch; read_line()
    // takes over for a line that spans reads, a too long one, the end.
    if (in_batch_) {
      if (parser_->next_in_batch(line, event_, result)) {
        if ((++stats_.lines & kProgressEveryLines) == 0 && progress_) {
          progress_->update(position(), stats_.lines);
        }
        if (accept(result, stats_.lines)) return &event_;
        continue;
      }
      in_batch_ = false;
      if (source_->window_lost_bytes()) throw TraceError(path_ + ": the file shrank while it was being read");
    }
    if (start_batch()) continue;
    const LineStatus status = read_line(line);
    if (status == LineStatus::none || status == LineStatus::partial) {
      // Everything before the cut is used; the partial line is not.
      stats_.partial_last_line = status == LineStatus::partial;
      finish();
      return nullptr;
    }
    const std::uint64_t line_number = ++stats_.lines;
    if (progress_) progress_->update(position(), stats_.lines);  // long lines: rare
    if (status == LineStatus::too_long) {
      record_bad_line(line_number, "line longer than " + std::to_string(options_.max_line_bytes) + " bytes");
      continue;
    }
    if (accept(parser_->parse(line, event_), line_number)) return &event_;
  }
}

}  // namespace cumemtrace::analyzer
