// Completing the trace of a process that was killed (SIGKILL, the OOM
// killer) from the pending file it left beside it (pending_log.h). Runs in
// `cumemtrace`, never in the traced process: the trace is cut back to its
// last durable line, every recorded event it lacks is appended in the order
// the process recorded them, then the `end` line, reason `killed`, and the
// pending file is removed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace cumemtrace::contract::pending {

struct RecoveryResult {
  enum class Status {
    no_pending_file,  // nothing to do
    writer_alive,     // the process still holds the file: it is running
    already_ended,    // the trace has its end (exec, a late kill): the file was removed
    recovered,
    failed,           // `message` says why; the trace and the pending file are as they were or cut back only
  };
  Status status = Status::no_pending_file;
  std::string message;
  std::uint64_t records = 0;  // records taken from the pending file
  std::uint64_t lines = 0;    // lines appended to the trace, `end` included
  std::uint64_t dropped = 0;  // the writer's dropped count, in `end`
  std::int32_t pid = 0;       // of the killed process
};

// The fields `end` carries between `reason` and `dropped` (",\"live\":…"),
// computed from the trace as it stands once the recovered lines are in.
using EndFields = std::function<std::string(const std::string& trace_path)>;

RecoveryResult recover_pending(const std::string& trace_path, const EndFields& end_fields);

// The pending file of `trace_path`.
std::string pending_path_of(const std::string& trace_path);

}  // namespace cumemtrace::contract::pending
