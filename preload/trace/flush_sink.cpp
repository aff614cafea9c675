#include "trace/flush_sink.h"

#include <signal.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "text/diagnostics.h"

// libzstd.a calls these weak hooks when a program defines them (zstd's
// tracing). Defined here, hidden, so the preload's private copy of zstd never
// calls into a program's definitions.
extern "C" {
struct ZSTD_Trace;
unsigned long long ZSTD_trace_compress_begin(const ZSTD_CCtx*) { return 0; }
void ZSTD_trace_compress_end(unsigned long long, const ZSTD_Trace*) {}
}

namespace cumemtrace::preload::flush {
namespace {

// Level 1: the trace is JSON, which compresses well even at the fastest
// level, and the writer thread must keep up with the busiest program.
constexpr int kZstdLevel = 1;
// Level 1's fast strategy keeps one candidate per hash slot. Its default
// table (2^13 slots for streams of unknown size) remembers matches from far
// back in the trace, whose offsets cost more bits than the nearly identical
// line just before; a 2^11 table forgets them sooner, so matches come from
// recent lines, often at a repeated offset. Measured with `zstd -1` against
// `zstd --zstd=strategy=1,hlog=11,mml=6` (bytes per line): the bench.sh loop
// under the caching pool 12.5 -> 11.2, passthrough 7.2 -> 6.7, six imported
// PyTorch snapshots 10.5 -> 9.9, the analyzer's synthetic trace 15.9 -> 15.9.
// Smaller (2^10) helps the loop more but the synthetic trace less; higher
// levels are slower and no smaller on these traces below level 12.
constexpr int kZstdHashLog = 11;

thread_local bool t_signals_blocked __attribute__((tls_model("initial-exec"))) = false;

// Writing past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the
// process: a trace must never do that to the program. The signal is blocked
// around our writes (write(2) then fails with EFBIG) and a SIGXFSZ our write
// left pending is taken back. The writer thread blocks it for good.
class XfszBlocked {
 public:
  XfszBlocked() : active_(!t_signals_blocked) {
    if (!active_) return;
    sigemptyset(&xfsz_);
    sigaddset(&xfsz_, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &xfsz_, &previous_);
  }
  ~XfszBlocked() {
    if (!active_) return;
    if (caused_ && !sigismember(&previous_, SIGXFSZ)) {
      const timespec zero{};
      sigtimedwait(&xfsz_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  void note_error(int err) { caused_ |= err == EFBIG; }

 private:
  const bool active_;
  sigset_t xfsz_, previous_;
  bool caused_ = false;
};

std::uint64_t count_lines(const char* p, std::size_t n) {
  return static_cast<std::uint64_t>(std::count(p, p + n, '\n'));
}

}  // namespace

void TraceSink::note_signals_blocked_on_this_thread() { t_signals_blocked = true; }

TraceSink::~TraceSink() {
  close();
  ZSTD_freeCCtx(zstd_);
}

bool TraceSink::open(int fd, std::string path, bool compress) {
  fd_ = fd;
  path_ = std::move(path);
  if (!compress) return true;
  zstd_ = ZSTD_createCCtx();
  zstd_out_size_ = ZSTD_CStreamOutSize();
  zstd_out_.reset(new (std::nothrow) char[zstd_out_size_]);
  if (zstd_ == nullptr || zstd_out_ == nullptr ||
      ZSTD_isError(ZSTD_CCtx_setParameter(zstd_, ZSTD_c_compressionLevel, kZstdLevel)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(zstd_, ZSTD_c_hashLog, kZstdHashLog)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(zstd_, ZSTD_c_checksumFlag, 0))) {
    contract::warn("cannot set up zstd compression for %s; this process is not traced", path_.c_str());
    close();
    return false;
  }
  return true;
}

void TraceSink::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::uint64_t TraceSink::write_raw(const char* data, std::size_t size) {
  XfszBlocked guard;
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, data + done, size - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      written_ += n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      const int err = n < 0 ? errno : ENOSPC;
      guard.note_error(err);
      errno = err;
      return done;
    }
  }
  return done;
}

std::uint64_t TraceSink::fail(int err, std::uint64_t lines) {
  if (!warned_) {
    warned_ = true;
    contract::warn("cannot write the trace %s: %s; events are being dropped", path_.c_str(), std::strerror(err));
  }
  roll_back_to(durable_);
  return lines;
}

void TraceSink::roll_back_to(off_t offset) {
  if (fd_ < 0) return;
  if (written_ != offset) {
    // Best effort: if even this fails the reader still copes with a partial
    // last line (it reports the cut).
    if (::ftruncate(fd_, offset) == 0) written_ = offset;
    ::lseek(fd_, written_, SEEK_SET);
  }
  durable_ = written_;
  lines_since_durable_ = 0;
}

std::uint64_t TraceSink::write_lines(const char* data, std::size_t size, std::uint64_t lines) {
  if (fd_ < 0 || broken_) return lines;
  if (zstd_ != nullptr) {
    const std::uint64_t lost = compress(data, size, ZSTD_e_continue);
    if (lost == 0) lines_since_durable_ += lines;
    return lost == 0 ? 0 : lost + lines;
  }
  const std::size_t done = write_raw(data, size);
  if (done == size) {
    durable_ = written_;
    return 0;
  }
  const int err = errno;
  // Keep the whole lines that did reach the file; cut the partial one.
  const char* last_newline = static_cast<const char*>(memrchr(data, '\n', done));
  const std::size_t kept = last_newline == nullptr ? 0 : static_cast<std::size_t>(last_newline - data) + 1;
  durable_ += static_cast<off_t>(kept);
  return fail(err, lines - count_lines(data, kept));
}

// Feeds `size` bytes (none for a flush or frame end) through the compressor
// and writes its output. Returns the lines lost (all since the last durable
// point) if a write failed.
std::uint64_t TraceSink::compress(const char* data, std::size_t size, int directive) {
  ZSTD_inBuffer in{data, size, 0};
  const auto mode = static_cast<ZSTD_EndDirective>(directive);
  for (;;) {
    ZSTD_outBuffer out{zstd_out_.get(), zstd_out_size_, 0};
    const std::size_t remaining = ZSTD_compressStream2(zstd_, &out, &in, mode);
    if (ZSTD_isError(remaining)) {
      broken_ = true;
      return fail(EIO, lines_since_durable_);
    }
    if (out.pos > 0 && write_raw(zstd_out_.get(), out.pos) != out.pos) {
      // Compressed bytes cannot be cut at a line: back to the last point
      // where the stream was whole, and nothing more can follow it.
      broken_ = true;
      return fail(errno, lines_since_durable_);
    }
    const bool done = mode == ZSTD_e_continue ? in.pos == in.size : remaining == 0;
    if (done) break;
  }
  if (mode != ZSTD_e_continue) {
    durable_ = written_;
    lines_since_durable_ = 0;
  }
  // A frame is open from its first input until ZSTD_e_end finishes it.
  if (mode == ZSTD_e_end) {
    in_frame_ = false;
  } else if (size > 0) {
    in_frame_ = true;
  }
  return 0;
}

std::uint64_t TraceSink::flush() {
  if (fd_ < 0 || broken_ || zstd_ == nullptr) return 0;
  return compress(nullptr, 0, ZSTD_e_flush);
}

std::uint64_t TraceSink::end_frame() {
  if (fd_ < 0 || broken_ || zstd_ == nullptr) return 0;
  return compress(nullptr, 0, ZSTD_e_end);
}

}  // namespace cumemtrace::preload::flush
