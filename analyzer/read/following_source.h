// A trace followed while it is being written, as `tail -f` follows a file
// (internal; `cumemtrace top` and `run --live`).
//
// At the end of the bytes written so far, read() does not return 0 (which
// the reader takes for the end of the trace) but sleeps and polls for more,
// so a line still being written is simply waited for: the reader never sees
// it cut. Between polls it hands control to the caller (on_idle), which
// redraws a view, checks that the writer lives, or stops the following:
// then read() returns 0 and the reader ends as at a file's end.
//
// A `.jsonl.zst` trace is followed too: the preload writes one zstd frame
// for the whole run and flushes it (ZSTD_e_flush) after each batch of lines
// (preload/trace/flush_merge.cpp), so every byte written so far ends a
// complete block that a streaming decompressor decodes; a block still being
// written stays inside the decompressor until its last bytes arrive.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "read/byte_source.h"

namespace cumemtrace::analyzer::detail {

struct FollowOptions {
  // Sleep between two polls at the data's end: the only wait, never a spin.
  std::chrono::milliseconds poll{100};
  // Called before each sleep at the data's end; false stops the following
  // (read() returns 0 from then on). Null: follow until the process ends.
  std::function<bool()> on_idle;
};

// Opens `path` (a regular file, which must exist) for following; a zstd
// stream is recognised by its magic number once its first 4 bytes are
// there (until then, on_idle is called as at any end of data). Throws
// TraceError if the file cannot be opened or read, or shrinks.
std::unique_ptr<ByteSource> open_following_byte_source(const std::string& path, FollowOptions options);

}  // namespace cumemtrace::analyzer::detail
