// Helpers shared by the text and JSON reports (internal).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_reader.h"

namespace cumemtrace::analyzer::detail {

// The non-null `fn` names of a stack, innermost first (empty when the stack
// is 0 or not in the trace).
std::vector<std::string> function_names(const Analysis& analysis, std::uint64_t stack);

// "libc10_cuda.so" of "/opt/torch/lib/libc10_cuda.so": what follows the last '/'.
std::string_view base_name(std::string_view path);

// What the leak groups (analysis.leaks(0): the allocations still live at
// the end) hold that PyTorch's caching allocator obtained (a frame in
// libc10_cuda.so): its segments, which PyTorch never frees, the process's
// exit giving them back.
std::uint64_t live_bytes_held_by_pytorch_cache(const Analysis& analysis, const std::vector<LeakGroup>& leaks);

// A ratio rounded to six decimals, so JSON shows 0.081 rather than 0.08100000000000002.
double round_ratio(double ratio);

// "18.2%"; "<0.1%" for a small non-zero ratio
std::string percent(double ratio);

// Advice for OOM sentences depends on the pool mode and on the program.
OomAdviceContext advice_context(const TraceHeader& header);

// The figures of DESIGN.md's fragmentation metrics at the end of the trace.
struct FragmentationAtEnd {
  double reserved_unused = 0;
  double cached_free_scattered = 0;
  std::uint64_t inactive_split_bytes = 0;
  double rounding_waste = 0;
  bool has_pool_sample = false;
};
FragmentationAtEnd fragmentation_at_end(const Analysis& analysis);

// 1 - (most allocated while reserved stood at its peak) / (peak reserved
// less the CUDA graph memory in it).
double fragmentation_at_peak_reserved(const MemoryTotals& m);

}  // namespace cumemtrace::analyzer::detail
