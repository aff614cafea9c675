// The pool's policy knobs and the parser of CUMEMTRACE_POOL_CONF (also
// `cumemtrace replay --pool-conf`). The syntax follows PYTORCH_CUDA_ALLOC_CONF
// so users can paste what they already tune: comma-separated `key:value`,
// e.g. "max_split_size_mb:128,roundup_power2_divisions:4,
// garbage_collection_threshold:0.8,expandable_segments:true".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cumemtrace::pool {

inline constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

// How the pool grows.
enum class SegmentPolicy : std::uint8_t {
  // PyTorch's: ≤1 MiB requests from 2 MiB segments, ≤10 MiB from 20 MiB
  // segments, larger requests rounded up to 2 MiB; cached segments are kept
  // until out-of-memory.
  pytorch,
  // The same segment sizes, but growth never raises the peak of reserved
  // memory while cached memory could be given back first: wholly free
  // segments are released before a new one is obtained, and in expandable
  // segments pages under free blocks are unmapped and mapped again where
  // they are needed (pending frees are synchronised first). Below the peak,
  // growth costs nothing extra, so a steady state pays for none of this.
  tight,
};

struct PoolConfig {
  // Blocks at least this large are never split, and a smaller request never
  // takes one (PyTorch's max_split_size_mb). kUnlimited: no such rule.
  std::size_t max_split_size = kUnlimited;
  // A request ≥ max_split_size may take an unsplittable cached block at most
  // this much larger than itself (PyTorch's max_non_split_rounding_mb).
  std::size_t max_non_split_rounding = std::size_t{20} << 20;
  // Round sizes up to one of N steps per power-of-two interval (PyTorch's
  // roundup_power2_divisions), indexed by interval: [0] ≤1 MiB, [1] 1–2 MiB,
  // [2] 2–4 MiB, … [kRoundupIntervals-1] everything above. 0 or 1: only the
  // 512-byte rounding.
  static constexpr std::size_t kRoundupIntervals = 16;
  std::array<std::uint32_t, kRoundupIntervals> roundup_power2_divisions{};
  // When reserved memory exceeds this fraction of the device's total, free
  // cached segments before growing, oldest first (PyTorch's
  // garbage_collection_threshold). 0: off.
  double garbage_collection_threshold = 0.0;
  // Cached free memory in whole free segments above this many bytes is given
  // back to the driver when the pool next synchronises or trims.
  // kUnlimited: keep everything until out-of-memory.
  std::size_t release_threshold = kUnlimited;
  // Large blocks live in one virtual range per stream that grows in place
  // (upstream reserve_range/map), so memory freed anywhere in it can serve a
  // request of any size: on by default, because it is what keeps reserved
  // memory near live memory on workloads whose sizes vary (issue 18:
  // seeds_transformer 1.107x with ordinary segments, 1.001x with these).
  // Where the upstream has no virtual memory (vm_granularity() == 0: the
  // device lacks CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
  // or refuses it later (map fails with an error other than out-of-memory),
  // the pool uses ordinary segments instead. Memory from cuMemCreate cannot
  // be exported with cudaIpcGetMemHandle; the hooks refuse IPC on pool
  // memory they cannot share correctly (preload/hooks/ipc.cpp).
  bool expandable_segments = true;
  // The physical page of expandable segments: each is one cuMemCreate
  // handle, mapped and unmapped whole (cuMemUnmap takes only whole
  // mappings), so a larger page means fewer driver calls per byte moved and
  // grown (PyTorch's Note [Expandable Segments]: mapping cost follows the
  // number of handles, not bytes; its large pool uses 20 MiB pages) and a
  // coarser fit (memory is given back and moved a page at a time). Rounded
  // up to a multiple of the device's granularity; 0: the granularity itself
  // (2 MiB on current GPUs).
  std::size_t expandable_page_size = 0;
  SegmentPolicy segment_policy = SegmentPolicy::tight;
  // Independent shards of the device-wide (cudaMalloc) pool for small blocks,
  // picked per thread, so threads do not meet on one lock. 1: no sharding.
  std::uint32_t device_shards = 8;
};

// One parsed CUMEMTRACE_POOL_CONF. `errors` holds one line per bad entry
// ("unknown key 'foo' (known: …)", "max_split_size_mb: 'x' is not a
// number"); those entries keep their defaults, the good ones apply.
struct PoolConfigParse {
  PoolConfig config;
  std::vector<std::string> errors;
  bool ok() const { return errors.empty(); }
};

// `base`: the settings the entries apply to (the defaults unless given).
PoolConfigParse parse_pool_config(std::string_view text, const PoolConfig& base = PoolConfig{});

// A JSON-able value: null, boolean, unsigned integer, real or string.
using ConfigValue = std::variant<std::nullptr_t, bool, std::uint64_t, double, std::string>;

// Every option in force, in a fixed order, with sizes in bytes and names
// without the `_mb` suffix (max_split_size, release_threshold, …); unlimited
// sizes are null. The trace header's `config` object echoes these.
std::vector<std::pair<std::string, ConfigValue>> describe_pool_config(const PoolConfig& config);

// The same as one compact JSON object text, e.g. for a replay report.
std::string pool_config_json(const PoolConfig& config);

// The setting whose peak reserved memory matches PyTorch's own caching
// allocator (the baseline of the quality targets).
PoolConfig pytorch_pool_config();

}  // namespace cumemtrace::pool
