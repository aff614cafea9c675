// A trace whose process was killed (SIGKILL, the OOM killer) is completed
// before it is read: the events its threads had recorded but not yet
// written are in `<trace>.pending` (contract/pending/pending_log.h), and the
// trace gets them and its `end` line, reason `killed`.
#include <cstdio>
#include <string>
#include <unordered_map>

#include "cumemtrace/analyzer/trace_reader.h"
#include "read/killed_trace.h"
#include "pending/pending_recovery.h"

namespace cumemtrace::analyzer::detail {

// `end`'s live and live_bytes, as the recorder counts them: allocations
// recorded and not freed, whatever their kind.
std::string live_fields(const std::string& path) {
  ReaderOptions options;
  options.complete_killed = false;  // the recovery holds the pending file
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  std::uint64_t bytes = 0;
  try {
    TraceReader reader(path, options);
    while (const TraceEvent* e = reader.next()) {
      if (e->ev == format::Event::alloc) {
        auto [it, added] = live.try_emplace(e->ptr, e->size);
        if (!added) {
          bytes -= it->second;
          it->second = e->size;
        }
        bytes += e->size;
      } else if (e->ev == format::Event::free) {
        if (auto it = live.find(e->ptr); it != live.end()) {
          bytes -= it->second;
          live.erase(it);
        }
      }
    }
  } catch (const TraceError&) {
    // Unreadable: `end` still says the process was killed, with nothing live.
    return ",\"live\":0,\"live_bytes\":0";
  }
  return ",\"live\":" + std::to_string(live.size()) + ",\"live_bytes\":" + std::to_string(bytes);
}

void complete_killed_trace(const std::string& path) {
  const KilledTraceOutcome r = analyzer::complete_killed_trace(path);
  using Status = KilledTraceOutcome::Status;
  if (r.status == Status::completed) {
    std::fprintf(stderr,
                 "cumemtrace: %s: its process was killed; completed it with %llu events recorded before the kill "
                 "(end reason \"killed\")\n",
                 path.c_str(), static_cast<unsigned long long>(r.events));
  } else if (r.status == Status::failed) {
    std::fprintf(stderr, "cumemtrace: cannot complete %s, whose process was killed: %s; reading it as it is\n",
                 path.c_str(), r.message.c_str());
  }
}

}  // namespace cumemtrace::analyzer::detail

namespace cumemtrace::analyzer {

KilledTraceOutcome complete_killed_trace(const std::string& path) {
  const contract::pending::RecoveryResult r = contract::pending::recover_pending(path, &detail::live_fields);
  using Status = contract::pending::RecoveryResult::Status;
  KilledTraceOutcome out;
  switch (r.status) {
    case Status::recovered:
      out.status = KilledTraceOutcome::Status::completed;
      out.events = r.lines - 1;  // the end line is not an event of the run
      break;
    case Status::writer_alive:
      out.status = KilledTraceOutcome::Status::still_running;
      break;
    case Status::failed:
      out.status = KilledTraceOutcome::Status::failed;
      out.message = r.message;
      break;
    case Status::no_pending_file:
    case Status::already_ended:
      break;
  }
  return out;
}

}  // namespace cumemtrace::analyzer
