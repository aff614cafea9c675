// Out-of-memory failures: what each `oom` event says, and one sentence that
// explains it to the person who hit it (fragmentation or capacity, and what
// to try).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cumemtrace::analyzer {

enum class OomCause { fragmentation, capacity };

struct OomRecord {
  std::uint64_t t = 0;
  std::uint64_t tid = 0;
  int dev = 0;
  std::string api;
  std::uint64_t size = 0;
  std::optional<std::uint64_t> block;  // the rounded request, when the pool gave it
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t cached_free = 0;
  std::uint64_t largest_free = 0;
  std::uint64_t device_free = 0;
  std::uint64_t device_total = 0;
  // CUDA graph memory the driver held on the device then (graph_mem):
  // outside the pool's `reserved`, so it is named when it fills the device.
  std::uint64_t graph_reserved = 0;
  std::string cause;  // as written in the trace ("fragmentation", "capacity", or other)
  std::uint64_t stack = 0;
  std::string phase;  // the mark range open then ("" when none)
};

// What the program was running, for advice that names the right knobs.
struct OomAdviceContext {
  bool caching_pool = true;  // the trace's pool mode is `caching` (or unknown)
  bool python = false;       // the program is a Python interpreter (PyTorch advice applies)
};

// The trace's cause when it names one; otherwise fragmentation when the free
// memory in total (cached free + device free) would have held the request.
OomCause oom_cause(const OomRecord& oom);

// One sentence, e.g. "needed 2.58 GiB (rounded to 2.58 GiB) on device 0 at
// 12.300 s in phase 'step 41/backward'; 4.96 GiB was cached but the largest
// free block was 1.10 GiB and the device had 1.67 GiB free: fragmentation —
// try ...".
std::string explain_oom(const OomRecord& oom, const OomAdviceContext& context);

}  // namespace cumemtrace::analyzer
