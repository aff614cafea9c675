// The query API of include/cumemtrace/cumemtrace.h, exported by
// libcumemtrace.so: plain C over the Recorder's queries (record/queries.cpp),
// for a test harness in the traced process (preload/python's pytest plugin
// calls these through ctypes). Nothing here throws into the program: out of
// host memory, a call answers as if nothing were held.
#define CUMEMTRACE_IMPLEMENTATION
#include "cumemtrace/cumemtrace.h"

#include <algorithm>
#include <cstring>

#include "hooks/hook_support.h"

using namespace cumemtrace::preload;

namespace {

// The caller's struct may be older (smaller) or newer (larger) than ours:
// each side reads and writes only what both know.
constexpr std::size_t kUsagePrefix = offsetof(cumemtrace_usage, live_count);  // up to live_bytes

void write_allocations(const std::vector<HeldAllocation>& held, cumemtrace_allocation* out, std::size_t element_size) {
  const std::size_t n = std::min(element_size, sizeof(cumemtrace_allocation));
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < held.size(); ++i) {
    cumemtrace_allocation a{};
    a.ptr = held[i].ptr;
    a.size = held[i].size;
    a.device = held[i].dev;
    a.stack = held[i].stack;
    std::memcpy(bytes + i * element_size, &a, n);
  }
}

// No element may be written with less room than its first two fields.
bool writable(const cumemtrace_allocation* out, std::size_t capacity, std::size_t element_size) {
  return capacity == 0 || (out != nullptr && element_size >= offsetof(cumemtrace_allocation, device));
}

}  // namespace

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))

CUMEMTRACE_EXPORT int cumemtrace_query_usage(int device, struct cumemtrace_usage* out) {
  if (out == nullptr || out->struct_size < kUsagePrefix) return -1;
  try {
    UsageFigures figures;
    if (!recorder().usage(device, figures)) return -1;
    cumemtrace_usage usage{};
    usage.struct_size = static_cast<std::uint32_t>(sizeof usage);
    usage.device = device;
    usage.live_bytes = figures.live_bytes;
    usage.live_count = figures.live_count;
    usage.peak_bytes = figures.peak_bytes;
    // struct_size stays the caller's: it says what the caller has room for.
    const std::uint32_t caller_size = out->struct_size;
    const std::size_t n = std::min<std::size_t>(caller_size, sizeof usage);
    std::memcpy(out, &usage, n);
    out->struct_size = caller_size;
    return 0;
  } catch (...) {
    return -1;
  }
}

CUMEMTRACE_EXPORT void cumemtrace_query_reset_peak(void) {
  try {
    recorder().reset_peaks();
  } catch (...) {
  }
}

CUMEMTRACE_EXPORT uint64_t cumemtrace_query_checkpoint(void) {
  try {
    return recorder().checkpoint();
  } catch (...) {
    return 1;  // every allocation made since the library loaded
  }
}

CUMEMTRACE_EXPORT size_t cumemtrace_query_live_since(uint64_t checkpoint, struct cumemtrace_allocation* out,
                                                     size_t capacity, size_t element_size) {
  if (!writable(out, capacity, element_size)) return 0;
  try {
    // Epochs are 32 bits inside (a checkpoint per test: never wraps in practice).
    const auto since = static_cast<std::uint32_t>(std::min<uint64_t>(checkpoint, UINT32_MAX));
    std::uint64_t total = 0;
    const std::vector<HeldAllocation> held = recorder().held_since(since, capacity, total);
    write_allocations(held, out, element_size);
    return static_cast<size_t>(total);
  } catch (...) {
    return 0;
  }
}

CUMEMTRACE_EXPORT void cumemtrace_query_watch(uint64_t checkpoint, uint64_t above_bytes) {
  try {
    recorder().watch(static_cast<std::uint32_t>(std::min<uint64_t>(checkpoint, UINT32_MAX)), above_bytes);
  } catch (...) {
  }
}

CUMEMTRACE_EXPORT size_t cumemtrace_query_watched(struct cumemtrace_allocation* out, size_t capacity,
                                                  size_t element_size) {
  if (!writable(out, capacity, element_size)) return 0;
  try {
    std::uint64_t total = 0;
    const std::vector<HeldAllocation> kept = recorder().watched(capacity, total);
    write_allocations(kept, out, element_size);
    return static_cast<size_t>(total);
  } catch (...) {
    return 0;
  }
}

CUMEMTRACE_EXPORT size_t cumemtrace_query_stack(uint32_t stack, char* buf, size_t capacity) {
  try {
    const std::string text = recorder().describe_stack(stack);
    if (buf != nullptr && capacity > 0) {
      const std::size_t n = std::min(text.size(), capacity - 1);
      std::memcpy(buf, text.data(), n);
      buf[n] = '\0';
    }
    return text.size();
  } catch (...) {
    if (buf != nullptr && capacity > 0) buf[0] = '\0';
    return 0;
  }
}
