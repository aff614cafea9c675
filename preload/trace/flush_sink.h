// Where the trace's bytes go: a file descriptor, through a zstd stream when
// the path ends in ".zst". Callers hand it whole lines; it never leaves a
// partial line (plain) or a partial block (zstd) behind a write error, so a
// trace that hit a full disk stays readable up to the last line it holds.
//
// Everything except open() is async-signal-safe: write(2), ftruncate(2),
// lseek(2), sigprocmask, and zstd compression into buffers allocated at
// open(). The caller serialises calls (the writer's output lock).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct ZSTD_CCtx_s;

namespace cumemtrace::preload::flush {

class TraceSink {
 public:
  TraceSink() = default;
  TraceSink(const TraceSink&) = delete;
  TraceSink& operator=(const TraceSink&) = delete;
  ~TraceSink();

  // Takes ownership of `fd`. False (and the descriptor closed) if the zstd
  // stream cannot be set up.
  bool open(int fd, std::string path, bool compress);
  bool is_open() const { return fd_ >= 0; }
  bool compressed() const { return zstd_ != nullptr; }

  // Appends `size` bytes holding `lines` whole lines. Returns the number of
  // lines that could not be written (a warning is printed the first time).
  std::uint64_t write_lines(const char* data, std::size_t size, std::uint64_t lines);

  // Hands everything appended so far to the kernel; for zstd, ends the
  // current block so a reader can decode every line written so far. Returns
  // lines lost.
  std::uint64_t flush();

  // zstd: ends the frame. Every later write_lines starts a new frame
  // (concatenated frames are one valid stream). Returns lines lost.
  std::uint64_t end_frame();

  // The file offset after which everything may be rolled back; everything
  // before it is written (plain) or fully flushed (zstd).
  off_t durable_offset() const { return durable_; }
  // Everything handed to write_lines is in the file, whole (nothing waits
  // in the compressor).
  bool all_durable() const { return lines_since_durable_ == 0 && durable_ == written_; }
  // zstd: the file ends inside a frame (a later frame_end or a recovery
  // closes it).
  bool frame_open() const { return in_frame_; }
  // Cuts the file back to `offset` (a value from durable_offset()).
  void roll_back_to(off_t offset);

  // Closes the descriptor without writing anything more.
  void close();

  const std::string& path() const { return path_; }

  // The calling thread blocks every signal (the writer thread): writes need
  // not block SIGXFSZ around themselves.
  static void note_signals_blocked_on_this_thread();

 private:
  std::uint64_t write_raw(const char* data, std::size_t size);  // false on error
  std::uint64_t compress(const char* data, std::size_t size, int directive);
  std::uint64_t fail(int err, std::uint64_t lines);

  int fd_ = -1;
  std::string path_;
  ZSTD_CCtx_s* zstd_ = nullptr;
  std::unique_ptr<char[]> zstd_out_;
  std::size_t zstd_out_size_ = 0;
  off_t written_ = 0;  // bytes in the file
  off_t durable_ = 0;  // see durable_offset()
  std::uint64_t lines_since_durable_ = 0;
  bool in_frame_ = false;
  bool broken_ = false;  // a zstd stream cut by a write error: nothing more can follow
  bool warned_ = false;
};

}  // namespace cumemtrace::preload::flush
