#include "cumemtrace/analyzer/oom.h"

#include "cumemtrace/analyzer/units.h"

namespace cumemtrace::analyzer {

namespace {
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
// PyTorch refuses max_split_size_mb at or below its large-block size (20 MiB);
// the pool takes the same keys, so advice stays valid for both.
constexpr std::uint64_t kMinMaxSplitMiB = 21;

std::uint64_t needed(const OomRecord& oom) { return oom.block.value_or(oom.size); }

// A max_split_size_mb below the request: blocks at least that big are then
// kept whole for requests like this one instead of being carved up.
std::uint64_t max_split_suggestion_mib(std::uint64_t request) {
  const std::uint64_t mib = request / kMiB;
  if (mib <= kMinMaxSplitMiB) return 0;
  std::uint64_t n = 1;
  while (n * 2 < mib) n *= 2;
  return n > kMinMaxSplitMiB ? n : 0;
}
}  // namespace

OomCause oom_cause(const OomRecord& oom) {
  if (oom.cause == "fragmentation") return OomCause::fragmentation;
  if (oom.cause == "capacity") return OomCause::capacity;
  return oom.cached_free + oom.device_free >= needed(oom) ? OomCause::fragmentation : OomCause::capacity;
}

std::string explain_oom(const OomRecord& oom, const OomAdviceContext& context) {
  std::string s = "needed " + format_bytes(oom.size);
  if (oom.block) s += " (rounded to " + format_bytes(*oom.block) + ")";
  s += " on device " + std::to_string(oom.dev) + " at " + format_seconds(oom.t);
  if (!oom.phase.empty()) s += " in phase '" + oom.phase + "'";
  s += "; ";
  const std::string conf = context.caching_pool || !context.python ? "CUMEMTRACE_POOL_CONF" : "PYTORCH_CUDA_ALLOC_CONF";

  if (oom_cause(oom) == OomCause::fragmentation) {
    s += format_bytes(oom.cached_free) + " was cached but the largest free block was " +
         format_bytes(oom.largest_free) + " and the device had " + format_bytes(oom.device_free) +
         " free: fragmentation, the free memory is in pieces smaller than the request — try " + conf + "=";
    if (const std::uint64_t mib = max_split_suggestion_mib(needed(oom)); mib != 0) {
      s += "max_split_size_mb:" + std::to_string(mib) + " (blocks above that size are then kept whole) or " +
           conf + "=";
    }
    s += "expandable_segments:True, or free cached memory";
    if (context.python) s += " (torch.cuda.empty_cache())";
    return s;
  }

  const std::uint64_t free_total = oom.cached_free + oom.device_free;
  s += format_bytes(oom.allocated) + " was allocated and only " + format_bytes(free_total) +
       " was free in total (" + format_bytes(oom.cached_free) + " cached, " + format_bytes(oom.device_free) +
       " on the device)";
  // Memory the device lacks that neither this process's pool nor its free
  // space accounts for: other processes, the CUDA context, allocations made
  // around cumemtrace.
  // The driver's graph pool (graph_mem) is no part of the pool's reserved:
  // when it holds a large part of the device (a quarter or more), it is
  // what to cut, not other processes.
  if (oom.graph_reserved > 0 && oom.graph_reserved * 4 >= oom.device_total && oom.device_total > 0) {
    s += "; " + format_bytes(oom.graph_reserved) + " of the device's " + format_bytes(oom.device_total) +
         " was CUDA graph memory (the memory nodes of instantiated graphs): capacity, graph memory holds the "
         "device — destroy the graph executables you no longer launch, then cudaDeviceGraphMemTrim() returns "
         "their memory";
    return s;
  }
  const std::uint64_t accounted = oom.reserved + oom.graph_reserved + oom.device_free;
  const std::uint64_t elsewhere = oom.device_total > accounted ? oom.device_total - accounted : 0;
  if (elsewhere > 0 && free_total + elsewhere >= needed(oom) && elsewhere * 10 >= oom.device_total) {
    s += "; " + format_bytes(elsewhere) + " of the device's " + format_bytes(oom.device_total) +
         " was held outside this process's memory pool: capacity, the device is shared — stop the other "
         "processes on it (nvidia-smi lists them) or run on another device";
    return s;
  }
  s += ": capacity, the program needs more memory than the device has";
  if (oom.device_total > 0) s += " (" + format_bytes(oom.device_total) + ")";
  s += context.python ? " — reduce the batch size, use activation checkpointing or mixed precision, or free "
                        "tensors you no longer need"
                      : " — reduce the batch or problem size, or free buffers you no longer need";
  s += ", or spread the work over more devices";
  return s;
}

}  // namespace cumemtrace::analyzer
