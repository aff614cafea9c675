// The core of the injected side: turns what the hooks saw into trace events.
// It knows nothing of CUDA's headers; hooks pass plain facts in (api, kind,
// device, pointer, size, stream), and device details come from an injected
// query, so the core is unit-tested without CUDA.
//
// An allocation that passed straight through to CUDA (the `passthrough`
// pool of DESIGN.md, and every managed or pinned one) has its segment twin,
// so reserved equals allocated. One served by the caching pool carries its
// `block`, and the pool's segments are written as it obtains and returns
// them (on_segment_alloc / on_segment_free). Virtual memory is the
// exception: cuMemCreate's physical memory is an `alloc` of kind `vmm` (its
// `ptr` is the allocation handle), and what cuMemMap makes usable at an
// address is the segment (`segment_alloc` at map, `segment_free` at unmap).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "options/config.h"
#include "cumemtrace/pool/pool_stats.h"
#include "cumemtrace/trace_format.h"
#include "record/live_table.h"
#include "record/live_usage.h"
#include "stacks/stack_recorder.h"
#include "trace/trace_writer.h"

namespace cumemtrace::preload {

struct DeviceDescription {
  std::string name;
  std::uint64_t total_bytes = 0;
};

// Asks the driver about device `ordinal`; false if it cannot say.
using DeviceQuery = bool (*)(int ordinal, DeviceDescription& out);

struct AllocationFacts {
  const char* api = "";   // the function the application called (a plain ASCII literal)
  format::MemoryKind kind = format::MemoryKind::device;
  int dev = 0;
  std::uintptr_t ptr = 0;  // for kind vmm: the CUmemGenericAllocationHandle
  std::size_t size = 0;    // what the application asked for
  std::optional<std::uintptr_t> stream = std::nullopt;  // for stream-ordered calls
  // False for stream-ordered memory, which a context reset does not free.
  bool context_bound = true;
  // Served by the caching pool: the bytes it set aside (the alloc's `block`);
  // the pool reports its segments itself, so no segment twin is written.
  // 0: passthrough, the driver's allocation is the application's.
  std::size_t block = 0;
};

// Which table a free function gives memory back to.
enum class Releases : std::uint8_t {
  device,       // cudaFree, cuMemFree*, the stream-ordered frees: device and managed memory
  host_pinned,  // cudaFreeHost, cuMemFreeHost
  vmm_handle,   // cuMemRelease
  any_kind,     // whatever is live at the pointer: a free the real library accepted
                // although it was not the matching function (see FreeOutcome::other_kind)
};

struct FreeFacts {
  const char* api = "";
  Releases releases = Releases::device;
  std::uintptr_t ptr = 0;  // for vmm_handle: the handle
  std::optional<std::uintptr_t> stream = std::nullopt;
};

enum class FreeOutcome : std::uint8_t {
  recorded,         // a `free` line was written (or the memory is still referenced: vmm)
  unknown_pointer,  // an `error` line was written; forward the free anyway
  double_free,      // an `error` line was written; forward the free anyway
  other_kind,       // live memory this function does not free: nothing written
};

class Recorder {
 public:
  static constexpr int kMaxDevices = 64;

  // `stacks`: how call stacks are captured (none by default, as in tests).
  Recorder(const contract::Config& config, DeviceQuery query, const StackPlatform& stacks = {});
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // After the real allocation succeeded.
  void on_alloc(const AllocationFacts& facts);

  // Before the real free runs (so the free's line precedes any later alloc
  // that reuses the address). A pointer not live in the table is written as
  // an `error` event (unknown_pointer, or double_free if it was freed lately).
  FreeOutcome on_free(const FreeFacts& facts);

  // cuMemRetainAllocationHandle: one more reference to a vmm handle.
  void on_vmm_retain(std::uint64_t handle);
  // cuMemMap made [ptr, ptr+size) usable, backed by `handle`: a segment_alloc
  // on the handle's device (`fallback_dev` for a handle we never saw).
  void on_map(const char* api, std::uintptr_t ptr, std::size_t size, std::uint64_t handle,
              int fallback_dev);
  // Before cuMemUnmap: every mapped range starting in [ptr, ptr+size) stops
  // being usable (segment_free).
  void on_unmap(std::uintptr_t ptr, std::size_t size);

  // Before cudaDeviceReset / cuDevicePrimaryCtxReset of `dev`: every
  // context-bound allocation on it is freed by the reset, so each gets a
  // `free` (api = the reset function) and its segment twin.
  void on_device_reset(const char* api, int dev);

  // A misuse the application made (TRACE_FORMAT.md `error`).
  void on_error(const char* api, std::uintptr_t ptr, const char* what);

  // The caching pool's reserved memory changed (pool_glue.cpp): it obtained
  // a segment (api: the driver call; the line says "pool":true) or is about
  // to give one back.
  void on_segment_alloc(int dev, std::uintptr_t ptr, std::size_t size, const char* api);
  void on_segment_free(int dev, std::uintptr_t ptr, std::size_t size);
  // A request the pool could not meet, before its error is returned.
  void on_oom(const char* api, const pool::OomReport& report);
  // A `pool` sample of one device's pool.
  void on_pool_sample(int dev, const pool::PoolStats& stats);
  // Runs in on_exit before the `end` line (the pool's final samples). Set
  // once, before any thread can exit the process.
  void set_before_end(void (*hook)()) { before_end_.store(hook, std::memory_order_release); }

  // A phase boundary from the marker API or NVTX (`name` is any text).
  void on_mark(format::MarkKind kind, std::string_view name);

  // ---- graph memory (README, "Additions to the
  // trace format") --------------------------------------------------------

  // A memory node of `graph` got its virtual range [ptr, ptr+size): a
  // stream-ordered allocation captured into the graph, or
  // cuGraphAddMemAllocNode. A `graph_alloc` line with the calling stack
  // (the capture's); not in the live table: the graph, not the program,
  // owns it, and its pages are the device's graph memory (graph_mem).
  void on_graph_alloc(const char* api, int dev, std::uintptr_t graph, std::uintptr_t ptr, std::size_t size);
  // Whether `ptr` is a memory node's address: a free of it (the captured
  // cudaFreeAsync, or the program's free of memory a launch left it) is
  // neither a free of ours nor a misuse.
  bool is_graph_address(std::uintptr_t ptr);
  // cuGraphInstantiate*: `exec` was made from `graph`.
  void on_graph_exec(const char* api, std::uintptr_t graph, std::uintptr_t exec);
  // cuGraphDestroy (graph != 0; its memory nodes' addresses are forgotten)
  // or cuGraphExecDestroy (exec != 0).
  void on_graph_destroy(const char* api, std::uintptr_t graph, std::uintptr_t exec);
  // The device's graph memory after `api` (only when it changed: hooks/graphs.cpp).
  void on_graph_mem(const char* api, int dev, std::uint64_t used, std::uint64_t reserved);
  // cuGraphLaunch: an instant `mark` named `api` with the executable graph.
  void on_graph_launch(const char* api, std::uintptr_t exec);

  // ---- lifecycle -----------------------------------------------------------

  // Process exit: writes `end` (reason exit, or signal when the program exits
  // from its own handler of a terminating signal: `signo`, 0 if unknown) and
  // closes the trace.
  void on_exit(format::EndReason reason = format::EndReason::exit, int signo = 0);
  // Async-signal-safe. The process ends at once (_exit and its kin) where
  // nothing may be allocated or waited for: writes everything and `end`
  // with reason exit.
  void on_exit_from_signal() noexcept;

  // Async-signal-safe. Writes everything recorded so far (before the
  // program's own handler of a terminating signal runs).
  void flush_from_signal() noexcept;
  // Async-signal-safe. The process is about to die of `signo` (default
  // action): writes everything and `end` with reason signal.
  void on_fatal_signal(int signo) noexcept;

  // Async-signal-safe. Before this process execs another program: writes
  // everything and `end` with reason exec. If the exec fails,
  // on_exec_failed() takes `end` back and recording goes on.
  bool on_exec_begin() noexcept;
  void on_exec_failed() noexcept;

  // This recorder is the parent's, seen from a forked child (which gets a
  // recorder of its own): the buffered lines and the file are the parent's,
  // and locks held by the parent's other threads will never be released, so
  // from here on this recorder touches no lock and records nothing.
  void on_fork_child();

  // Records nothing from now on (a forked child with CUMEMTRACE_FORK=off).
  void stop_recording() { inert_.store(true, std::memory_order_relaxed); }

  // Everything recorded so far reaches the kernel (tests).
  void flush() { writer_.flush(); }

  // In a forked child, before anything is recorded: thread ids cached by
  // the forking thread are the parent's.
  static void forget_thread_ids_after_fork();

  const TraceWriter& writer() const { return writer_; }
  std::uint64_t live_count() const { return live_.count() + vmm_.count(); }
  std::uint64_t live_bytes() const { return live_.bytes() + vmm_.bytes(); }

  // ---- the query API of cumemtrace.h (record/queries.cpp) ----------------
  // Cold: a test harness asks between tests. The first call of any turns
  // the totals on (LiveUsage); none is for a signal handler.

  // Figures of device `dev`, or of all devices for -1; false for another.
  bool usage(int dev, UsageFigures& out);
  void reset_peaks();
  std::uint32_t checkpoint();
  // The allocations held now that were made since `checkpoint`, the
  // `keep` largest, largest first; `total` says how many there are.
  std::vector<HeldAllocation> held_since(std::uint32_t checkpoint, std::size_t keep, std::uint64_t& total);
  // Arms the watch (cumemtrace_query_watch); kNoWatch disarms.
  void watch(std::uint32_t checkpoint, std::uint64_t above_bytes);
  // What the last watch kept, largest first (`total`: how many were held).
  std::vector<HeldAllocation> watched(std::size_t keep, std::uint64_t& total);
  // A stack's frames as cumemtrace_query_stack writes them; empty if unknown.
  std::string describe_stack(std::uint32_t id) { return stacks_.describe(id); }

 private:
  bool ensure_trace_open();
  void describe_device_once(int dev);
  void write_header();
  // reason, live and live_bytes of the `end` line; the writer adds
  // `dropped`. No allocation: the signal paths use it.
  void append_end_fields(contract::LineBuffer& end, format::EndReason reason) const;
  // Inlined into on_free: one frame fewer for the stack capture to walk.
  [[gnu::always_inline]] inline void emit_free(const char* api, std::uintptr_t ptr, const LiveAllocation& a,
                                               std::optional<std::uintptr_t> stream);
  // ,"stack":<id> for an alloc/free/oom/error event: captures the calling
  // thread's stack, writing its `stack` event first if it is new. Called
  // only once the trace is open (the stack event must follow the header).
  [[gnu::always_inline]] void append_stack(contract::LineBuffer& body) {
    body.field("stack", stacks_.current_stack_id());
  }
  // A free's own stack, only with CUMEMTRACE_FREE_STACKS=1: a bad free's
  // `error` line carries its stack either way.
  [[gnu::always_inline]] std::uint32_t free_stack_id() { return config_.free_stacks ? stacks_.current_stack_id() : 0; }

  // Turns the query API's totals on, once (queries.cpp).
  void start_queries();
  // An allocation took the total to `total`, over the watch line: keeps
  // the largest allocations made since the watch's checkpoint. On the
  // allocating thread, once per arming: no allocation, one table lock at a
  // time.
  [[gnu::noinline]] void take_watch_snapshot(std::uint64_t total) noexcept;

  // What the watch keeps (cumemtrace_query_watch): a fixed array, so
  // taking it allocates nothing.
  struct WatchSnapshot {
    static constexpr std::size_t kKept = 64;
    static constexpr int kIdle = 0, kArmed = 1, kTaking = 2, kTaken = 3;
    std::atomic<int> state{kIdle};  // the claim: armed -> taking by one thread
    std::uint64_t line = 0;         // written before state becomes armed
    std::uint32_t since = 0;
    std::array<HeldAllocation, kKept> kept{};
    std::size_t stored = 0;
    std::uint64_t total = 0;
  };

  const contract::Config& config_;
  const DeviceQuery query_;
  const std::uint64_t start_unix_ns_;
  TraceWriter writer_;
  LiveUsage usage_;  // before the tables, which count into it
  LiveTable live_{usage_};
  VmmHandles vmm_{usage_};
  std::once_flag queries_once_;
  std::mutex watch_mutex_;  // between arming and reading (never taken by the snapshot)
  WatchSnapshot watch_;
  MappedRanges mapped_;
  StackRecorder stacks_;

  std::atomic<void (*)()> before_end_{nullptr};
  std::atomic<bool> inert_{false};
  std::once_flag open_once_;
  std::atomic<bool> open_failed_{false};
  std::mutex device_mutex_;
  // Memory nodes' addresses → their graph (cold: capture and graph
  // construction only).
  std::mutex graph_mutex_;
  std::unordered_map<std::uintptr_t, std::uintptr_t> graph_addresses_;
  std::atomic<bool> device_described_[kMaxDevices] = {};
};

}  // namespace cumemtrace::preload
