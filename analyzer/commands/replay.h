// Replays a trace's allocations through the caching pool (cumemtrace_pool) on
// a simulated device: what would our pool have reserved for this program, on
// how small a device would it have run, how fragmented would it have been?
//
//   ReplayTrace trace = load_replay_trace("train.jsonl");   // throws TraceError
//   ReplayResult r = replay(trace, ReplayOptions{config, capacity});
//   MinCapacity m = find_min_capacity(trace, config);
//
// What is replayed: every `alloc` and `free` of device memory (kinds device
// and vmm; managed and pinned host memory do not live in the device's pool),
// per device, in trace order. An alloc with a `stream` is stream-ordered
// (allocate_async on that stream, as cudaMallocAsync, and as PyTorch's caching
// allocator, whose blocks belong to a stream, behaves); one without is a
// cudaMalloc. The trace's own segment events describe the allocator that
// recorded it (PyTorch's, or ours) and are kept only as the figures to
// compare with. A passthrough trace thus answers "what would the caching pool
// have reserved?". An `oom` event (a request the run could not serve) becomes
// a probe: the replay tries the same request at the same moment and gives it
// back at once, so a replay says whether a setting would have served it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/pool/pool_config.h"
#include "cumemtrace/pool/pool_stats.h"

namespace cumemtrace::analyzer {

// One allocation or free, with the trace's pointer replaced by a dense slot
// number (slots are reused once freed, so a replay needs memory for the live
// set only).
struct ReplayOp {
  // probe: an out-of-memory request of the run, tried and freed at once.
  enum class Type : std::uint8_t { alloc, alloc_async, free, free_async, probe };
  Type type = Type::alloc;
  std::uint16_t device = 0;  // index into ReplayTrace::devices
  std::uint32_t slot = 0;
  std::uint64_t size = 0;    // alloc: bytes requested
  std::uint64_t stream = 0;  // *_async: the stream handle
};

struct ReplayDevice {
  int dev = 0;
  std::uint64_t total = 0;  // from the trace's `device` event; 0 unknown
  // At the run's first out-of-memory failure on this device, what its
  // allocator could use: reserved + the driver's free memory (the `oom`
  // event's figures). 0: no failure, or the event did not say.
  std::uint64_t usable_at_oom = 0;
};

// A request the run could not serve (an `oom` event).
struct ReplayOom {
  std::uint64_t t = 0;
  int dev = 0;
  std::uint64_t size = 0;
};

// Where a trace's allocations came from, for the advice (advise.h): whether
// they are a program's own objects or a caching allocator's segments.
struct ReplayOrigin {
  bool torch_snapshot = false;     // imported from a PyTorch snapshot (blocks: tensors)
  std::vector<std::string> argv;   // the traced command, when recorded
  std::string torch_alloc_conf;    // PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF the run had
  bool run_setting_known = false;  // the trace says which (a snapshot may not)
  bool torch_uncached = false;     // PYTORCH_NO_CUDA_MEMORY_CACHING was set: per-tensor allocations
  bool torch_frames = false;       // some stack passes through PyTorch's libraries
  std::uint64_t allocs_with_stack = 0;
  // Allocations whose stack passes through a caching allocator's library
  // (caching_allocators.h), the first such framework, and how many of those
  // are whole multiples of 2 MiB (PyTorch's segment sizes).
  std::uint64_t allocs_from_caching_allocator = 0;
  std::string caching_allocator;
  std::uint64_t allocs_in_2mib_multiples = 0;  // of all allocations
};

// A trace's allocations, read once and replayable many times.
struct ReplayTrace {
  std::string path;
  std::string pool_mode;  // the header's `pool`: what recorded the trace
  std::vector<ReplayDevice> devices;
  std::vector<ReplayOp> ops;
  std::uint32_t slots = 0;
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t unknown_frees = 0;     // free of a pointer not live: skipped
  std::uint64_t lost_frees = 0;        // alloc over a live pointer: a free is implied first
  std::uint64_t skipped_kind = 0;      // managed / pinned host allocs and frees
  std::vector<ReplayOom> ooms;         // the run's failures, in order (each also a probe op)
  // The program's steps: the mark that recurs most often (at least 3
  // times), its numbers folded ("step 41" -> "step #"), and where in `ops`
  // each of its steps begins. Empty when the trace has no such mark.
  std::string step_mark;
  std::vector<std::size_t> step_starts;
  ReplayOrigin origin;
  // The trace's own figures (its allocator's), as `report` computes them.
  std::uint64_t trace_peak_reserved = 0;
  std::uint64_t trace_peak_allocated = 0;
  bool truncated = false;
};

// Throws TraceError (trace_reader.h) when the trace cannot be read.
ReplayTrace load_replay_trace(const std::string& path);

class TraceReader;
struct TraceEvent;

// The same, from events another reader loop yields (`report` builds its
// advice in its one pass over the trace): consume() every event, then
// finish() once.
class ReplayTraceBuilder {
 public:
  explicit ReplayTraceBuilder(std::string path);
  ~ReplayTraceBuilder();
  void consume(const TraceEvent& event);
  // Past this many allocations, keep only their count (ReplayTrace::allocs)
  // and the trace's origin: no operations to replay.
  void set_allocation_limit(std::uint64_t allocations);
  bool over_limit() const;
  // `reader`: the trace's header and whether it was cut short. The trace's
  // own peaks come from `peak_reserved` / `peak_allocated`.
  ReplayTrace finish(const TraceReader& reader, std::uint64_t peak_reserved, std::uint64_t peak_allocated);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct ReplayOptions {
  pool::PoolConfig config;
  // Every device's capacity in bytes. nullopt: the trace's `device` total
  // where known, else unlimited.
  std::optional<std::size_t> capacity;
  // Per device (ReplayTrace::devices' order), where nonzero: overrides
  // `capacity` for that device.
  std::vector<std::size_t> device_capacities;
  // Replay stream-ordered requests as cudaMalloc / cudaFree: how PyTorch
  // calls the driver when it allocates per tensor (`run --torch-tensors`).
  bool device_wide = false;
  // The reverse: replay cudaMalloc / cudaFree in stream order on stream 0,
  // as PyTorch's caching allocator serves the tensors a `--torch-tensors`
  // trace records one cudaMalloc each.
  bool stream_ordered = false;
};

struct DeviceReplay {
  int dev = 0;
  std::size_t capacity = pool::kUnlimited;
  std::size_t peak_reserved = 0;
  std::size_t peak_allocated = 0;         // bytes requested (live bytes)
  std::size_t peak_allocated_blocks = 0;  // bytes in the pool's blocks
  // The most the program needed at once: peak_allocated, or the live bytes
  // plus a probe's request when it was made, whichever is higher.
  std::size_t peak_demand = 0;
  std::uint64_t ooms = 0;
  std::uint64_t failed_probes = 0;
  pool::PoolStats end;  // the pool's state after the last event
};

struct ReplayResult {
  std::size_t peak_reserved = 0;  // all devices together, at its highest
  std::size_t peak_allocated = 0;
  std::size_t peak_allocated_blocks = 0;
  std::uint64_t allocs = 0;
  std::uint64_t ooms = 0;              // allocations the pool could not serve
  std::uint64_t probes = 0;            // the run's out-of-memory requests tried
  std::uint64_t failed_probes = 0;     // of those, not served either
  std::uint64_t frees_of_failed = 0;   // frees of those: skipped
  std::uint64_t invalid_frees = 0;     // frees the pool refused (should be 0)
  std::uint64_t upstream_allocs = 0;   // segments obtained from the device
  std::uint64_t upstream_frees = 0;
  std::uint64_t synchronizes = 0;  // the host waited for the device
  std::uint64_t orderings = 0;     // the pool ordered the device instead (no wait)
  // The steady state of the program's steps (ReplayTrace::step_starts): the
  // steps after the first quarter, and what the pool asked of the device
  // during them, all devices together. Zero when the trace has no steps.
  struct SteadySteps {
    std::uint64_t steps = 0;       // all the trace's steps
    std::uint64_t steady = 0;      // of those, after the warm-up quarter
    std::uint64_t upstream_allocs = 0;  // segments obtained and ranges mapped
    std::uint64_t upstream_frees = 0;   // segments given back and ranges unmapped
    std::uint64_t synchronizes = 0;
  } steady;
  // DESIGN.md's metrics, all devices pooled: when reserved memory peaked,
  // and after the last event.
  pool::FragmentationMetrics at_peak;
  pool::FragmentationMetrics at_end;
  std::vector<DeviceReplay> devices;
};

ReplayResult replay(const ReplayTrace& trace, const ReplayOptions& options);

// Whether every request was served, the run's out-of-memory ones included.
inline bool served_everything(const ReplayResult& r) { return r.ooms == 0 && r.failed_probes == 0; }

struct MinCapacity {
  std::size_t capacity = 0;  // the smallest device that ran without out-of-memory
  std::size_t peak_live = 0;  // the highest device's peak of live bytes, unlimited
  std::size_t peak_demand = 0;  // the same with the run's failed requests (DeviceReplay::peak_demand)
  std::uint32_t replays = 0;
  bool found = false;        // false: even the largest capacity tried failed
};

// The smallest per-device capacity, a multiple of `granularity`, on which the
// trace replays without out-of-memory: binary search between the peak of live
// bytes (nothing smaller can work) and the unlimited replay's peak reserved
// (which must work). Out-of-memory is not strictly monotonic in capacity for
// an allocator, so this is the capacity at which the search met a success
// with a failure one granule below.
MinCapacity find_min_capacity(const ReplayTrace& trace, const pool::PoolConfig& config,
                              std::size_t granularity = std::size_t{2} << 20);
// The same with `options`' config and call mode (its capacities are ignored).
// `unlimited`: the replay with those on an unlimited device, when the caller
// has it already (it is the search's first step).
MinCapacity find_min_capacity(const ReplayTrace& trace, const ReplayOptions& options,
                              std::size_t granularity = std::size_t{2} << 20,
                              const ReplayResult* unlimited = nullptr);

// `--capacity`: a size as parse_size() (units.h) reads it ("80GiB", "512 MiB",
// "1.5GB", "4096"), or "unlimited" for pool::kUnlimited. nullopt otherwise.
std::optional<std::size_t> parse_capacity(std::string_view text);

// `--pool-conf`: "pytorch" is PyTorch's own policy (the baseline), anything
// else is CUMEMTRACE_POOL_CONF syntax; "" is the pool's default. Errors are
// one line each.
pool::PoolConfigParse parse_replay_pool_conf(std::string_view text);

}  // namespace cumemtrace::analyzer
