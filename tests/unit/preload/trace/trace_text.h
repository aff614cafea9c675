// A trace's text and lines, for the writer's tests.
#pragma once

#include <gtest/gtest.h>
#include <zstd.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace cumemtrace::testing {

// Each line of `text`, parsed.
inline std::vector<nlohmann::json> parse_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Decompresses a zstd stream the way a reader of a killed process's trace
// must: frame by frame, stopping quietly where the bytes stop.
inline std::string zstd_decompress_prefix(const std::string& compressed) {
  ZSTD_DCtx* d = ZSTD_createDCtx();
  std::string out;
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  std::vector<char> buf(1 << 16);
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buf.data(), buf.size(), 0};
    const std::size_t rc = ZSTD_decompressStream(d, &o, &in);
    EXPECT_FALSE(ZSTD_isError(rc)) << ZSTD_getErrorName(rc);
    if (ZSTD_isError(rc)) break;
    out.append(buf.data(), o.pos);
    if (o.pos == 0 && in.pos == in.size) break;
  }
  ZSTD_freeDCtx(d);
  return out;
}

}  // namespace cumemtrace::testing
