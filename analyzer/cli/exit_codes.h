// Exit codes of every cumemtrace command.
#pragma once

namespace cumemtrace::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;  // a --check or `check` verdict failed
inline constexpr int kExitUsage = 2;        // bad usage, unreadable or invalid input
// `run` returns the program's own status: its exit code, 128+N for signal N,
// 127 when the command is not found and 126 when it cannot be executed.
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitCommandNotFound = 127;

}  // namespace cumemtrace::cli
