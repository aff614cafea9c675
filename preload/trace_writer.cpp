#include "trace_writer.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "diagnostics.h"

namespace cumemtrace::preload {
namespace {

// Room for the longest ordinary line beyond the flush threshold, so appending
// a line to a buffer that is about to be flushed does not reallocate.
constexpr std::size_t kSlack = 4096;

}  // namespace

std::uint64_t TraceWriter::monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// Not zero-filled: the pages stay untouched, and cost a process that never
// allocates device memory nothing, until lines are written into them.
TraceWriter::Chunk::Chunk(std::size_t capacity)
    : data_(std::make_unique_for_overwrite<char[]>(capacity)), capacity_(capacity) {}

void TraceWriter::Chunk::grow(std::size_t more) {
  const std::size_t capacity = std::max(capacity_ * 2, size_ + more);
  auto data = std::make_unique_for_overwrite<char[]>(capacity);
  std::memcpy(data.get(), data_.get(), size_);
  data_ = std::move(data);
  capacity_ = capacity;
}

TraceWriter::TraceWriter(std::uint64_t monotonic_start_ns, std::size_t buffer_bytes)
    : start_ns_(monotonic_start_ns),
      flush_threshold_(buffer_bytes),
      active_(buffer_bytes + kSlack),
      spare_(buffer_bytes + kSlack) {}

TraceWriter::~TraceWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TraceWriter::attach(int fd, std::string path, const LineBuffer& header) {
  std::scoped_lock lock(buffer_mutex_, io_mutex_);
  fd_ = fd;
  path_ = std::move(path);
  active_.append(header.view());
  active_.append("\n");
  state_.store(State::open, std::memory_order_release);
}

std::uint64_t TraceWriter::emit(std::initializer_list<Line> lines) {
  // Checked before locking too: after fork or finish, no lock is touched.
  if (state_.load(std::memory_order_acquire) != State::open) {
    dropped_.fetch_add(lines.size(), std::memory_order_relaxed);
    return 0;
  }
  std::unique_lock lock(buffer_mutex_);
  if (state_.load(std::memory_order_relaxed) != State::open) {
    dropped_.fetch_add(lines.size(), std::memory_order_relaxed);
    return last_t_;
  }
  // The monotonic clock never goes back, but two threads may read it in one
  // order and take the lock in the other; the max keeps `t` non-decreasing.
  const std::uint64_t now = monotonic_now_ns();
  const std::uint64_t t = std::max(last_t_, now > start_ns_ ? now - start_ns_ : 0);
  last_t_ = t;
  char digits[24];
  const std::string_view t_text(digits, static_cast<std::size_t>(
                                            std::to_chars(digits, digits + sizeof digits, t).ptr - digits));
  for (const Line& line : lines) {
    active_.append("{\"ev\":\"");
    active_.append(line.ev);
    active_.append("\",\"t\":");
    active_.append(t_text);
    active_.append(line.body.view());
    active_.append("}\n");
  }
  if (active_.size() >= flush_threshold_) {
    // Take the I/O lock before letting go of the buffer lock: writes then
    // reach the file in the order their lines were committed.
    std::unique_lock io(io_mutex_);
    std::swap(active_, spare_);
    lock.unlock();
    write_out(spare_);
  }
  return t;
}

void TraceWriter::finish(const LineBuffer& end_body) {
  if (!is_open()) return;
  emit("end", end_body);
  std::scoped_lock lock(buffer_mutex_, io_mutex_);
  state_.store(State::finished, std::memory_order_release);
  write_out(active_);
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void TraceWriter::abandon_after_fork() {
  // Only the forking thread exists in the child; the locks may have been held
  // by threads that are gone, so they are not touched.
  state_.store(State::finished, std::memory_order_release);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TraceWriter::write_out(Chunk& chunk) {
  const char* p = chunk.data();
  std::size_t left = chunk.size();
  while (left > 0 && fd_ >= 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n > 0) {
      p += n;
      left -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      const int err = n < 0 ? errno : ENOSPC;
      if (!warned_write_error_) {
        warn("cannot write the trace %s: %s; events are being dropped", path_.c_str(),
             std::strerror(err));
        warned_write_error_ = true;
      }
      break;
    }
  }
  if (left > 0) {
    const auto lost = std::count(p, p + left, '\n');
    dropped_.fetch_add(static_cast<std::uint64_t>(lost), std::memory_order_relaxed);
  }
  chunk.clear();
}

}  // namespace cumemtrace::preload
