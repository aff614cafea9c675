// zstd-compressed data for the reader's tests (analyzer_unit_tests links
// libzstd; import_replay_unit_tests, which shares analyzer_test_support,
// does not, so this is a header of its own).
#pragma once

#include <gtest/gtest.h>
#include <zstd.h>

#include <string>

namespace cumemtrace::analyzer::testing {

// `data` as one zstd frame (level 3, as `zstd` writes by default).
inline std::string zstd_compressed(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

}  // namespace cumemtrace::analyzer::testing
