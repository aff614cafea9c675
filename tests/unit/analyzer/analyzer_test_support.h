// Helpers for the analyzer's unit tests: hand-written trace lines and the
// built `cumemtrace`; processes and files come from tests/support.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "test_support.h"

namespace cumemtrace::analyzer::testing {

using cumemtrace::testing::CommandResult;
using cumemtrace::testing::EnvChanges;
using cumemtrace::testing::file_exists;
using cumemtrace::testing::read_file;
using cumemtrace::testing::run_command;
using cumemtrace::testing::RunningCommand;
using cumemtrace::testing::start_command;
using cumemtrace::testing::TempDir;
using cumemtrace::testing::wait_command;
using cumemtrace::testing::write_file;

// Each line followed by '\n'.
std::string join_lines(const std::vector<std::string>& lines);
std::string header_line(int version = 1);
std::string alloc_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev = 0, int stack = 0);
std::string free_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev = 0);
std::string end_line(std::uint64_t t);

// The built `cumemtrace` and the empty libraries it may preload in tests.
std::string cli_path();
std::string empty_preload(int which = 1);

// Runs the built `cumemtrace` with `args`.
CommandResult cli(std::vector<std::string> args, EnvChanges env = {});

// Whether `haystack` holds `needle`.
bool contains(const std::string& haystack, std::string_view needle);

inline constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

}  // namespace cumemtrace::analyzer::testing
