// Exit codes of every cumemtrace command.
#pragma once

namespace cumemtrace::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;  // a --check or `check` verdict failed
inline constexpr int kExitUsage = 2;        // bad usage, unreadable or invalid input
// `advise`: the trace holds no allocations it can replay (a caching
// allocator's segments, or none at all); the output says what to record.
inline constexpr int kExitNotReplayable = 3;
// `top`: the process writing the trace is gone and the trace has no end line.
inline constexpr int kExitWriterGone = 4;
// `run` returns the program's own status: its exit code, 128+N for signal N,
// 127 when the command is not found and 126 when it cannot be executed.
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitCommandNotFound = 127;

}  // namespace cumemtrace::cli
