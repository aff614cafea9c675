// The cumemtrace trace schema, version 1: event and field names shared by the
// writer (libcumemtrace.so) and every reader. The normative text is
// TRACE_FORMAT.md; this header only gives the names one spelling.
#pragma once

#include <cstdint>
#include <string_view>

namespace cumemtrace::format {

inline constexpr std::string_view kFormatName = "cumemtrace";
inline constexpr int kVersion = 1;

enum class Event : std::uint8_t {
  header,
  device,
  stack,
  alloc,
  free,
  segment_alloc,
  segment_free,
  oom,
  pool,
  mark,
  error,
  end,
  // Graph memory (README, "Additions to the trace format"): a memory node's
  // virtual allocation, an executable graph made from a graph, a graph or
  // executable graph destroyed, the device's graph memory pool.
  graph_alloc,
  graph_exec,
  graph_destroy,
  graph_mem,
  unknown,  // an `ev` this reader does not know: skipped, never an error
};

// What kind of memory an alloc/free is about (the `kind` field).
enum class MemoryKind : std::uint8_t { device, managed, host_pinned, vmm, unknown };

// What a `mark` event marks (its `kind` field): a point in time, or the
// start or end of an NVTX-like range.
enum class MarkKind : std::uint8_t { instant, push, pop, unknown };

// Why a trace ended (the `reason` field of `end`).
enum class EndReason : std::uint8_t { exit, signal, exec, fork_child, unknown };

constexpr std::string_view name(Event e) {
  switch (e) {
    case Event::header: return "header";
    case Event::device: return "device";
    case Event::stack: return "stack";
    case Event::alloc: return "alloc";
    case Event::free: return "free";
    case Event::segment_alloc: return "segment_alloc";
    case Event::segment_free: return "segment_free";
    case Event::oom: return "oom";
    case Event::pool: return "pool";
    case Event::mark: return "mark";
    case Event::error: return "error";
    case Event::end: return "end";
    case Event::graph_alloc: return "graph_alloc";
    case Event::graph_exec: return "graph_exec";
    case Event::graph_destroy: return "graph_destroy";
    case Event::graph_mem: return "graph_mem";
    case Event::unknown: break;
  }
  return "unknown";
}

constexpr Event parse_event(std::string_view s) {
  for (auto e : {Event::header, Event::device, Event::stack, Event::alloc, Event::free,
                 Event::segment_alloc, Event::segment_free, Event::oom, Event::pool,
                 Event::mark, Event::error, Event::end, Event::graph_alloc, Event::graph_exec,
                 Event::graph_destroy, Event::graph_mem}) {
    if (name(e) == s) return e;
  }
  return Event::unknown;
}

constexpr std::string_view name(MemoryKind k) {
  switch (k) {
    case MemoryKind::device: return "device";
    case MemoryKind::managed: return "managed";
    case MemoryKind::host_pinned: return "host_pinned";
    case MemoryKind::vmm: return "vmm";
    case MemoryKind::unknown: break;
  }
  return "unknown";
}

constexpr MemoryKind parse_memory_kind(std::string_view s) {
  for (auto k : {MemoryKind::device, MemoryKind::managed, MemoryKind::host_pinned,
                 MemoryKind::vmm}) {
    if (name(k) == s) return k;
  }
  return MemoryKind::unknown;
}

constexpr std::string_view name(MarkKind k) {
  switch (k) {
    case MarkKind::instant: return "instant";
    case MarkKind::push: return "push";
    case MarkKind::pop: return "pop";
    case MarkKind::unknown: break;
  }
  return "unknown";
}

constexpr MarkKind parse_mark_kind(std::string_view s) {
  for (auto k : {MarkKind::instant, MarkKind::push, MarkKind::pop}) {
    if (name(k) == s) return k;
  }
  return MarkKind::unknown;
}

constexpr std::string_view name(EndReason r) {
  switch (r) {
    case EndReason::exit: return "exit";
    case EndReason::signal: return "signal";
    case EndReason::exec: return "exec";
    case EndReason::fork_child: return "fork_child";
    case EndReason::unknown: break;
  }
  return "unknown";
}

constexpr EndReason parse_end_reason(std::string_view s) {
  for (auto r : {EndReason::exit, EndReason::signal, EndReason::exec, EndReason::fork_child}) {
    if (name(r) == s) return r;
  }
  return EndReason::unknown;
}

// Environment variables read by libcumemtrace.so (the full option table lives
// in contract/options/config.cpp; these are the ones other processes set).
inline constexpr const char* kEnvOutput = "CUMEMTRACE_OUTPUT";
inline constexpr const char* kDefaultOutputTemplate = "cumemtrace.%h.%p.jsonl";

// The header's optional `env` object, an addition to TRACE_FORMAT.md (README.md,
// "Additions to the trace format"): these variables, verbatim, those set when
// the header is written. They are the caching-allocator settings PyTorch
// reads (PYTORCH_ALLOC_CONF is 2.6+'s name for PYTORCH_CUDA_ALLOC_CONF), so
// the analyzer can tell what the run was configured with. No other variable
// is ever recorded: an environment may hold secrets.
inline constexpr const char* kHeaderEnvNames[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                                                  "PYTORCH_NO_CUDA_MEMORY_CACHING"};

// The header's optional `rank_env` object, another addition (README.md): the
// variables by which launchers tell a process its place in a job, those set
// when the library loaded, verbatim. torchrun and torch.distributed set the
// first four; Slurm's srun, Open MPI's mpirun and MPICH/Intel MPI's
// (PMI) launchers set the last three, often without RANK.
inline constexpr const char* kHeaderRankEnvNames[] = {"RANK",         "LOCAL_RANK",           "WORLD_SIZE",
                                                      "LOCAL_WORLD_SIZE", "SLURM_PROCID",
                                                      "OMPI_COMM_WORLD_RANK", "PMI_RANK"};

}  // namespace cumemtrace::format
