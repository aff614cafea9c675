#include "pending/pending_recovery.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <vector>

#include "pending/log_records.h"
#include "pending/pending_log.h"
#include "pending/record_lines.h"

namespace cumemtrace::contract::pending {
namespace {

using Status = RecoveryResult::Status;

RecoveryResult failure(std::string why) {
  RecoveryResult r;
  r.status = Status::failed;
  r.message = std::move(why);
  return r;
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class Mapping {
 public:
  Mapping(int fd, std::size_t size) : size_(size) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<const char*>(p);
  }
  ~Mapping() {
    if (base_ != nullptr) ::munmap(const_cast<char*>(base_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const char* base() const { return base_; }

 private:
  const char* base_ = nullptr;
  std::size_t size_;
};

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// A record of the pending file, where it is and where it falls in the trace.
struct Found {
  std::uint64_t seq;
  const char* record;  // its RecordHeader
};

// Whether the record's lines lie inside it as log_records.h lays them out: a
// damaged file must not send the formatter out of the mapping.
bool lines_fit(const RecordHeader& r, const char* record) {
  const char* p = record + sizeof r;
  const char* end = record + r.size;
  for (std::uint32_t i = 0; i < r.lines; ++i) {
    if (end - p < static_cast<std::ptrdiff_t>(sizeof(LineHeader))) return false;
    LineHeader lh;
    std::memcpy(&lh, p, sizeof lh);
    p += sizeof lh;
    const std::uint64_t bytes = lh.ev_size == kCompactLine
                                    ? (lh.body_size == sizeof(CompactEvent) ? lh.body_size : ~0ull)
                                    : std::uint64_t{lh.ev_size} + lh.body_size;
    if (bytes > static_cast<std::uint64_t>(end - p)) return false;
    p += bytes;
  }
  return true;
}

// Every record the trace lacks, in the order the process recorded them.
std::vector<Found> gather(const char* base, std::uint64_t file_size, const Header& h, int mark) {
  std::vector<Found> found;
  const std::uint64_t slots = h.slots.load(std::memory_order_acquire);
  for (std::uint64_t s = 0; s < slots; ++s) {
    const std::uint64_t at = std::uint64_t{h.header_bytes} + s * h.slot_bytes;
    if (at + h.slot_bytes > file_size) break;
    const auto* chunk = reinterpret_cast<const LogChunk*>(base + at);
    const std::uint64_t room = h.slot_bytes - sizeof(LogChunk);
    const std::uint32_t committed = chunk->committed.load(std::memory_order_acquire);
    std::uint32_t offset = chunk->marks[mark].load(std::memory_order_acquire);
    if (committed > room || chunk->capacity > room) continue;
    const char* bytes = base + at + sizeof(LogChunk);
    while (offset + sizeof(RecordHeader) <= committed) {
      RecordHeader r;
      std::memcpy(&r, bytes + offset, sizeof r);
      if (r.size < sizeof r || r.size % kRecordAlign != 0 || offset + r.size > committed ||
          !lines_fit(r, bytes + offset)) {
        break;  // damaged: what follows in this chunk cannot be found
      }
      found.push_back({r.seq, bytes + offset});
      offset += r.size;
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.seq < b.seq; });
  return found;
}

// The lines of `found`, formatted as the writer would have.
std::string format_lines(const std::vector<Found>& found, const Header& h, std::uint64_t& last_t,
                         std::uint64_t& lines) {
  const std::uint32_t apis = std::min(h.api_count.load(std::memory_order_acquire), kMaxApiNames);
  auto api_of = [&](const char* pointer) -> const char* {
    const auto key = reinterpret_cast<std::uintptr_t>(pointer);
    for (std::uint32_t i = 0; i < apis; ++i) {
      if (h.apis[i].ptr.load(std::memory_order_acquire) == key) return h.apis[i].name;
    }
    return "unknown";
  };
  const TickReference clock = h.clocks[h.clock_index.load(std::memory_order_acquire) & 1];
  std::string out;
  for (const Found& f : found) {
    RecordHeader r;
    std::memcpy(&r, f.record, sizeof r);
    const std::uint64_t monotonic = r.ticks != 0 && h.uses_tsc != 0 ? monotonic_at(clock, r.t) : r.t;
    last_t = std::max(monotonic > h.start_ns ? monotonic - h.start_ns : 0, last_t);
    char digits[24];
    const std::string_view t_text(digits, static_cast<std::size_t>(
                                              std::to_chars(digits, digits + sizeof digits, last_t).ptr - digits));
    for_each_record_line(f.record + sizeof r, r.lines, api_of, [&](std::string_view ev, std::string_view body) {
      out.append("{\"ev\":\"").append(ev).append("\",\"t\":").append(t_text).append(body).append("}\n");
      ++lines;
    });
  }
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Appends `text` to the trace: as it is, or as a zstd frame of its own.
bool append(int fd, const std::string& text, bool compressed) {
  if (!compressed) return write_all(fd, text.data(), text.size());
  std::string frame(ZSTD_compressBound(text.size()), '\0');
  const std::size_t n = ZSTD_compress(frame.data(), frame.size(), text.data(), text.size(), 1);
  if (ZSTD_isError(n)) {
    errno = EIO;
    return false;
  }
  return write_all(fd, frame.data(), n);
}

}  // namespace

std::string pending_path_of(const std::string& trace_path) { return trace_path + kSuffix; }

RecoveryResult recover_pending(const std::string& trace_path, const EndFields& end_fields) {
  const std::string pending_path = pending_path_of(trace_path);
  const Fd pending(::open(pending_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (pending.get() < 0) {
    if (errno == ENOENT) return {};
    return failure(errno_text("cannot open " + pending_path));
  }
  // The writer holds this lock for as long as it lives (and a second
  // recovery while this one runs).
  if (::flock(pending.get(), LOCK_EX | LOCK_NB) != 0) {
    RecoveryResult r;
    r.status = errno == EWOULDBLOCK ? Status::writer_alive : Status::failed;
    if (r.status == Status::failed) r.message = errno_text("cannot lock " + pending_path);
    return r;
  }
  struct stat st{};
  if (::fstat(pending.get(), &st) != 0) return failure(errno_text("cannot read " + pending_path));
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < kHeaderBytes) return failure(pending_path + " is too short to be a pending file");
  const Mapping map(pending.get(), file_size);
  if (map.base() == nullptr) return failure(errno_text("cannot map " + pending_path));
  const auto& h = *reinterpret_cast<const Header*>(map.base());
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion || h.header_bytes < sizeof(Header) ||
      h.slot_bytes <= sizeof(LogChunk)) {
    return failure(pending_path + " is not a pending file of this cumemtrace version");
  }
  RecoveryResult result;
  result.pid = h.pid;
  if (h.ended.load(std::memory_order_acquire) != 0) {
    ::unlink(pending_path.c_str());
    result.status = Status::already_ended;
    return result;
  }

  const Fd trace(::open(trace_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (trace.get() < 0) return failure(errno_text("cannot open " + trace_path + " to complete it"));
  // Lines past the last commit are written again from their records: a
  // write in progress when the process died may have left only part of them.
  const std::uint32_t commit = h.commit.load(std::memory_order_acquire);
  const int mark = (commit & kSecondMarkIsCurrent) != 0 ? 1 : 0;
  const std::uint64_t cut = (commit & kWriteInProgress) != 0 ? h.batch_start.load() : h.durable.load();
  struct stat trace_st{};
  if (::fstat(trace.get(), &trace_st) != 0) return failure(errno_text("cannot read " + trace_path));
  if (cut > static_cast<std::uint64_t>(trace_st.st_size)) {
    return failure(trace_path + " is shorter than its writer wrote it: it was changed after the process died");
  }
  const bool compressed = ends_with(trace_path, ".zst");
  const std::vector<Found> found = gather(map.base(), file_size, h, mark);
  std::uint64_t last_t = h.last_t.load();
  std::string text = format_lines(found, h, last_t, result.lines);

  if (::ftruncate(trace.get(), static_cast<off_t>(cut)) != 0 || ::lseek(trace.get(), 0, SEEK_END) < 0) {
    return failure(errno_text("cannot cut " + trace_path + " back to its last whole line"));
  }
  // A zstd frame the writer had not ended: an empty last block ends it
  // (RFC 8878, 3.1.1.2: Last_Block set, Raw, size 0).
  static constexpr char kEmptyLastBlock[3] = {0x01, 0x00, 0x00};
  if (compressed && h.frame_open.load() != 0 && !write_all(trace.get(), kEmptyLastBlock, sizeof kEmptyLastBlock)) {
    return failure(errno_text("cannot write " + trace_path));
  }
  if (!text.empty() && !append(trace.get(), text, compressed)) return failure(errno_text("cannot write " + trace_path));
  result.records = found.size();
  result.dropped = h.dropped.load();

  std::string end = "{\"ev\":\"end\",\"t\":" + std::to_string(last_t) + ",\"reason\":\"killed\"";
  if (end_fields) end += end_fields(trace_path);
  end += ",\"dropped\":" + std::to_string(result.dropped) + "}\n";
  if (!append(trace.get(), end, compressed) || ::fsync(trace.get()) != 0) {
    return failure(errno_text("cannot write " + trace_path));
  }
  ++result.lines;
  ::unlink(pending_path.c_str());
  result.status = Status::recovered;
  return result;
}

}  // namespace cumemtrace::contract::pending
