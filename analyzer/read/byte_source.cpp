#include "read/byte_source.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer::detail {
namespace {

constexpr unsigned char kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};

[[noreturn]] void throw_errno(const std::string& path, const char* what, int err) {
  throw TraceError(path + ": " + what + ": " + std::strerror(err));
}

// Reading a page of a mapped file that was truncated behind it raises
// SIGBUS (mmap(2): "Attempted access to a portion of the buffer that does
// not correspond to the file"). Mapped windows are noted here; a SIGBUS
// inside one maps zero pages over the rest of it, so the read goes on and
// the reader then reports the file as changed, instead of the analyzer
// dying on a file someone truncated. Any other SIGBUS goes to the handler
// that was there before, or kills as it would have. Lock-free slots: the
// handler may only read them.
struct MappedWindow {
  std::atomic<const char*> begin{nullptr};
  std::atomic<std::size_t> size{0};
  std::atomic<int> lost{0};
};
std::array<MappedWindow, 64> g_windows;  // more windows at once: not covered
struct sigaction g_previous_sigbus {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto* address = static_cast<const char*>(info->si_addr);
  for (MappedWindow& window : g_windows) {
    const char* begin = window.begin.load(std::memory_order_acquire);
    const std::size_t size = window.size.load(std::memory_order_acquire);
    if (begin == nullptr || address < begin || address >= begin + size) continue;
    static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto from = reinterpret_cast<std::uintptr_t>(address) / page * page;
    const auto to = reinterpret_cast<std::uintptr_t>(begin) + size;
    void* zeros = ::mmap(reinterpret_cast<void*>(from), to - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                         -1, 0);
    if (zeros == MAP_FAILED) break;
    window.lost.store(1, std::memory_order_relaxed);
    return;  // the read is retried, on zeros
  }
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  // The default action: the faulting read is retried and kills as without us.
  ::signal(SIGBUS, SIG_DFL);
}

// The slot noting a new window, or -1 if all are taken.
int note_window(const char* begin, std::size_t size) {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
  for (std::size_t i = 0; i < g_windows.size(); ++i) {
    const char* empty = nullptr;
    MappedWindow& window = g_windows[i];
    // A free slot has size 0: claimed, it matches nothing until sized.
    if (!window.begin.compare_exchange_strong(empty, begin, std::memory_order_acq_rel)) continue;
    window.lost.store(0, std::memory_order_relaxed);
    window.size.store(size, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
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
    window_slot_ = note_window(static_cast<const char*>(map), span);
    return std::string_view(static_cast<const char*>(map) + (offset - start), length);
  }

  void seek(std::uint64_t offset) override {
    unmap();
    if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) throw_errno(path_, "cannot seek", errno);
    position_ = offset;
    peeked_.clear();
    peek_pos_ = 0;
  }

  bool window_lost_bytes() const override {
    return lost_ || (window_slot_ >= 0 && g_windows[static_cast<std::size_t>(window_slot_)].lost.load() != 0);
  }

 private:
  void unmap() {
    if (map_ == nullptr) return;
    if (window_slot_ >= 0) {
      lost_ = window_lost_bytes();
      MappedWindow& window = g_windows[static_cast<std::size_t>(window_slot_)];
      window.size.store(0, std::memory_order_release);
      window.begin.store(nullptr, std::memory_order_release);
      window_slot_ = -1;
    }
    ::munmap(map_, map_size_);
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
  bool lost_ = false;  // a window of this file lost bytes (see on_sigbus)
  int window_slot_ = -1;  // in g_windows
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

std::unique_ptr<ByteSource> decompress_zstd(std::string path, std::unique_ptr<ByteSource> compressed) {
  return std::make_unique<ZstdSource>(std::move(path), std::move(compressed));
}

}  // namespace cumemtrace::analyzer::detail
