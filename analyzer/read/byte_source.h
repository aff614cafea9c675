// Where a trace's bytes come from: a plain file or a zstd stream on top of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace cumemtrace::analyzer::detail {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `capacity` bytes into `out`; 0 only at the end of the data. Throws
  // TraceError on a read error or corrupt compressed data.
  virtual std::size_t read(char* out, std::size_t capacity) = 0;
  // True when the data stopped in the middle of a compressed frame (the
  // writer was killed): what came before is still usable.
  virtual bool ended_inside_frame() const { return false; }
  // Bytes taken from the file so far (compressed bytes for a zstd stream),
  // and the file's size, 0 when unknown (a pipe): for progress.
  virtual std::uint64_t position() const = 0;
  virtual std::uint64_t size() const = 0;

  // Zero-copy reading, for a plain file named by its path (not standard
  // input, not compressed): the file's bytes [offset, offset + length)
  // mapped read-only, replacing (and invalidating) the previous window;
  // shorter at the file's end (as of opening), empty when the file cannot
  // be mapped. read() is unaffected: seek() points it at `offset`, and
  // drops the window.
  virtual std::string_view map_window(std::uint64_t /*offset*/, std::size_t /*length*/) { return {}; }
  virtual void seek(std::uint64_t /*offset*/) {}
  // True once part of a mapped window vanished because the file shrank
  // while it was mapped: those bytes read as zeros instead of killing the
  // process with SIGBUS, and the reader must give up on the file.
  virtual bool window_lost_bytes() const { return false; }
};

// Opens `path` ("-": standard input) and, if it starts with the zstd magic
// number, wraps it in a streaming decompressor. Throws TraceError.
std::unique_ptr<ByteSource> open_byte_source(const std::string& path);

// `compressed`'s bytes decompressed as a zstd stream (following_source.cpp
// wraps a file it follows so).
std::unique_ptr<ByteSource> decompress_zstd(std::string path, std::unique_ptr<ByteSource> compressed);

}  // namespace cumemtrace::analyzer::detail
