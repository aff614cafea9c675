#include "byte_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer::detail {
namespace {

constexpr unsigned char kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};

[[noreturn]] void throw_errno(const std::string& path, const char* what, int err) {
  throw TraceError(path + ": " + what + ": " + std::strerror(err));
}

// A file descriptor, plus a few bytes already read to sniff the format that
// are handed out again before the rest of the file.
class FileSource final : public ByteSource {
 public:
  FileSource(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<std::uint64_t>(st.st_size);
    // Standard input may be a file opened at another offset: read() it only.
    mappable_ = fd_ != STDIN_FILENO && size_ > 0;
  }
  ~FileSource() override {
    unmap();
    if (fd_ > STDIN_FILENO) ::close(fd_);
  }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  // Reads the first bytes (up to n) to look at them; read() returns them again.
  std::string_view peek(std::size_t n) {
    while (peeked_.size() < n) {
      char chunk[16];
      std::size_t got = read_fd(chunk, std::min(sizeof chunk, n - peeked_.size()));
      if (got == 0) break;
      peeked_.append(chunk, got);
    }
    return peeked_;
  }

  std::size_t read(char* out, std::size_t capacity) override {
    if (peek_pos_ < peeked_.size()) {
      std::size_t n = std::min(capacity, peeked_.size() - peek_pos_);
      std::memcpy(out, peeked_.data() + peek_pos_, n);
      peek_pos_ += n;
      return n;
    }
    return read_fd(out, capacity);
  }

  std::uint64_t position() const override { return position_; }
  std::uint64_t size() const override { return size_; }

  std::string_view map_window(std::uint64_t offset, std::size_t length) override {
    unmap();
    if (!mappable_ || offset >= size_) return {};
    length = static_cast<std::size_t>(std::min<std::uint64_t>(length, size_ - offset));
    static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t start = offset / page * page;  // mmap's offset must be page-aligned
    const std::size_t span = length + static_cast<std::size_t>(offset - start);
    void* map = ::mmap(nullptr, span, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd_, static_cast<off_t>(start));
    if (map == MAP_FAILED) {
      mappable_ = false;  // read() still works
      return {};
    }
    ::madvise(map, span, MADV_SEQUENTIAL);  // read ahead, drop behind
    map_ = map;
    map_size_ = span;
    return std::string_view(static_cast<const char*>(map) + (offset - start), length);
  }

  void seek(std::uint64_t offset) override {
    unmap();
    if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) throw_errno(path_, "cannot seek", errno);
    position_ = offset;
    peeked_.clear();
    peek_pos_ = 0;
  }

 private:
  void unmap() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
    map_ = nullptr;
  }

  std::size_t read_fd(char* out, std::size_t capacity) {
    for (;;) {
      ssize_t n = ::read(fd_, out, capacity);
      if (n >= 0) {
        position_ += static_cast<std::uint64_t>(n);
        return static_cast<std::size_t>(n);
      }
      if (errno != EINTR) throw_errno(path_, "cannot read", errno);
    }
  }

  std::string path_;
  int fd_;
  std::uint64_t size_ = 0;
  std::uint64_t position_ = 0;
  std::string peeked_;
  std::size_t peek_pos_ = 0;
  bool mappable_ = false;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
};

class ZstdSource final : public ByteSource {
 public:
  ZstdSource(std::string path, std::unique_ptr<ByteSource> compressed)
      : path_(std::move(path)), compressed_(std::move(compressed)), dctx_(ZSTD_createDCtx()),
        in_buffer_(ZSTD_DStreamInSize()) {
    if (dctx_ == nullptr) throw TraceError(path_ + ": cannot create a zstd decompressor");
  }
  ~ZstdSource() override { ZSTD_freeDCtx(dctx_); }
  ZstdSource(const ZstdSource&) = delete;
  ZstdSource& operator=(const ZstdSource&) = delete;

  std::size_t read(char* out, std::size_t capacity) override {
    ZSTD_outBuffer output{out, capacity, 0};
    while (output.pos == 0) {
      // A decoder that filled the whole output last time may hold more
      // decoded bytes: drain it before reading more input.
      if (in_.pos == in_.size && !may_hold_output_) {
        if (input_done_) return 0;
        in_.size = compressed_->read(in_buffer_.data(), in_buffer_.size());
        in_.src = in_buffer_.data();
        in_.pos = 0;
        if (in_.size == 0) {
          input_done_ = true;
          // A non-zero hint means the last frame is incomplete: a killed writer.
          ended_inside_frame_ = last_hint_ != 0;
          return 0;
        }
      }
      std::size_t hint = ZSTD_decompressStream(dctx_, &output, &in_);
      if (ZSTD_isError(hint)) {
        throw TraceError(path_ + ": corrupt zstd data: " + ZSTD_getErrorName(hint));
      }
      last_hint_ = hint;
      may_hold_output_ = output.pos == output.size;
    }
    return output.pos;
  }

  bool ended_inside_frame() const override { return ended_inside_frame_; }
  std::uint64_t position() const override { return compressed_->position(); }
  std::uint64_t size() const override { return compressed_->size(); }

 private:
  std::string path_;
  std::unique_ptr<ByteSource> compressed_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_buffer_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  std::size_t last_hint_ = 0;
  bool input_done_ = false;
  bool may_hold_output_ = false;
  bool ended_inside_frame_ = false;
};

}  // namespace

std::unique_ptr<ByteSource> open_byte_source(const std::string& path) {
  int fd = STDIN_FILENO;
  if (path != "-") {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_errno(path, "cannot open", errno);
  }
  auto file = std::make_unique<FileSource>(path, fd);
  std::string_view head = file->peek(sizeof kZstdMagic);
  if (head.size() == sizeof kZstdMagic && std::memcmp(head.data(), kZstdMagic, sizeof kZstdMagic) == 0) {
    return std::make_unique<ZstdSource>(path, std::move(file));
  }
  return file;
}

}  // namespace cumemtrace::analyzer::detail
