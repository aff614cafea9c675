#include "read/following_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer::detail {
namespace {

constexpr unsigned char kZstdMagicBytes[4] = {0x28, 0xB5, 0x2F, 0xFD};

class FollowingSource final : public ByteSource {
 public:
  FollowingSource(std::string path, int fd, FollowOptions options)
      : path_(std::move(path)), fd_(fd), options_(std::move(options)) {}
  ~FollowingSource() override { ::close(fd_); }
  FollowingSource(const FollowingSource&) = delete;
  FollowingSource& operator=(const FollowingSource&) = delete;

  // The file's first bytes (up to n, fewer only if the following stopped),
  // handed out again by read().
  std::string_view peek(std::size_t n) {
    while (prefix_.size() < n) {
      char chunk[8];
      const std::size_t got = read_following(chunk, std::min(sizeof chunk, n - prefix_.size()));
      if (got == 0) break;
      prefix_.append(chunk, got);
    }
    return prefix_;
  }

  std::size_t read(char* out, std::size_t capacity) override {
    if (prefix_pos_ < prefix_.size()) {
      const std::size_t n = std::min(capacity, prefix_.size() - prefix_pos_);
      std::memcpy(out, prefix_.data() + prefix_pos_, n);
      prefix_pos_ += n;
      return n;
    }
    return read_following(out, capacity);
  }

  std::uint64_t position() const override { return position_; }
  std::uint64_t size() const override { return 0; }  // still growing: unknown

 private:
  std::size_t read_following(char* out, std::size_t capacity) {
    while (!stopped_) {
      const ssize_t n = ::read(fd_, out, capacity);
      if (n > 0) {
        position_ += static_cast<std::uint64_t>(n);
        return static_cast<std::size_t>(n);
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        throw TraceError(path_ + ": cannot read: " + std::strerror(errno));
      }
      // At the end of what was written. A file cut shorter than what was
      // read was rewritten or truncated: what follows would not continue it.
      struct stat st {};
      if (::fstat(fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < position_) {
        throw TraceError(path_ + ": the file shrank while it was being followed");
      }
      if (options_.on_idle && !options_.on_idle()) {
        stopped_ = true;
        break;
      }
      std::this_thread::sleep_for(options_.poll);
    }
    return 0;
  }

  std::string path_;
  int fd_;
  FollowOptions options_;
  std::uint64_t position_ = 0;
  std::string prefix_;
  std::size_t prefix_pos_ = 0;
  bool stopped_ = false;
};

}  // namespace

std::unique_ptr<ByteSource> open_following_byte_source(const std::string& path, FollowOptions options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw TraceError(path + ": cannot open: " + std::strerror(errno));
  auto file = std::make_unique<FollowingSource>(path, fd, std::move(options));
  // A zstd trace's magic number comes with its first write; a plain one's
  // first byte, '{', already tells it apart.
  std::string_view head = file->peek(1);
  if (!head.empty() && static_cast<unsigned char>(head[0]) == kZstdMagicBytes[0]) head = file->peek(sizeof kZstdMagicBytes);
  if (head.size() == sizeof kZstdMagicBytes && std::memcmp(head.data(), kZstdMagicBytes, sizeof kZstdMagicBytes) == 0) {
    return decompress_zstd(path, std::move(file));
  }
  return file;
}

}  // namespace cumemtrace::analyzer::detail
