#include "analyze/report_figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cumemtrace/analyzer/report.h"

namespace cumemtrace::analyzer::detail {

std::vector<std::string> function_names(const Analysis& analysis, std::uint64_t stack) {
  std::vector<std::string> names;
  if (stack == 0) return names;
  if (const std::vector<OwnedFrame>* frames = analysis.stacks().find(stack)) {
    for (const OwnedFrame& f : *frames) {
      if (f.fn) names.push_back(*f.fn);
    }
  }
  return names;
}

std::string_view base_name(std::string_view path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::uint64_t live_bytes_held_by_pytorch_cache(const Analysis& analysis, const std::vector<LeakGroup>& leaks) {
  std::uint64_t bytes = 0;
  for (const LeakGroup& group : leaks) {
    const std::vector<OwnedFrame>* frames = group.stack != 0 ? analysis.stacks().find(group.stack) : nullptr;
    if (frames == nullptr) continue;
    // libc10_cuda.so, or a versioned or suffixed build of it.
    const bool from_pytorch_cache = std::any_of(frames->begin(), frames->end(), [](const OwnedFrame& f) {
      return base_name(f.module).starts_with("libc10_cuda.so");
    });
    if (from_pytorch_cache) bytes += group.bytes;
  }
  return bytes;
}

double round_ratio(double ratio) { return std::round(ratio * 1e6) / 1e6; }

std::string percent(double ratio) {
  if (ratio > 0 && ratio < 0.0005) return "<0.1%";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", ratio * 100.0);
  return text;
}

OomAdviceContext advice_context(const TraceHeader& header) {
  OomAdviceContext context;
  context.caching_pool = header.pool != "passthrough";
  auto is_python = [](const std::string& path) {
    const std::string base = path.substr(path.find_last_of('/') + 1);
    return base.rfind("python", 0) == 0;
  };
  context.python = is_python(header.exe) || (!header.argv.empty() && is_python(header.argv[0]));
  return context;
}

FragmentationAtEnd fragmentation_at_end(const Analysis& analysis) {
  FragmentationAtEnd end;
  const MemoryTotals& total = analysis.total();
  end.reserved_unused = ratio_unused(total.allocated.current, total.reserved.current);
  end.rounding_waste = ratio_unused(total.live_requested, total.live_blocks);
  std::uint64_t cached = 0, largest = 0;
  for (const auto& [dev, sample] : analysis.fragmentation().last_pool()) {
    end.has_pool_sample = true;
    cached += sample.cached_free;
    largest = std::max(largest, sample.largest_free);
    end.inactive_split_bytes += sample.inactive_split;
  }
  end.cached_free_scattered = ratio_unused(largest, cached);
  return end;
}

double fragmentation_at_peak_reserved(const MemoryTotals& m) {
  // Graph memory is the driver's graph pool, not the allocator's cache: it is
  // no unused reserved memory (issue 31).
  return ratio_unused(m.allocated_at_reserved_peak, m.reserved.peak - m.graph_at_reserved_peak);
}

}  // namespace cumemtrace::analyzer::detail
