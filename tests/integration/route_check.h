// Checking a trace against the manifest a route program wrote of what it
// did (tests/apps/route_manifest.h), independently of cumemtrace's reader.
#pragma once

#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

namespace cumemtrace::testing {

// The trace lines a manifest promises, in order: each alloc is preceded by
// its segment twin and each free followed by it (passthrough), except for
// kind vmm, whose segments are its mappings ("map"/"unmap" entries).
std::vector<nlohmann::json> expected_events(const std::vector<nlohmann::json>& manifest);

// The alloc/free/segment/error/oom lines of a trace, in order.
std::vector<nlohmann::json> memory_events(const std::vector<nlohmann::json>& trace);

// Empty if `actual` matches `expected` line for line (every expected field
// equal, `stream` present exactly when expected, `stack` 0 and a `tid` on
// alloc/free/error); else a description of the first difference and both
// sequences.
std::string compare_events(const std::vector<nlohmann::json>& expected,
                           const std::vector<nlohmann::json>& actual);

// compare_events per thread over the alloc and free lines: an entry per
// thread that allocated in the manifest or in the trace, each the first
// difference for that thread (empty when its sequence matches exactly).
std::map<long, std::string> compare_events_per_thread(const std::vector<nlohmann::json>& manifest,
                                                      const std::vector<nlohmann::json>& trace);

// Empty if the whole trace is well formed: header first, end last with no
// dropped lines, `t` non-decreasing, a device line before the first use of
// each device, and `end`'s live count and bytes equal to what the manifest
// left allocated.
std::string check_trace_frame(const std::vector<nlohmann::json>& trace,
                              const std::vector<nlohmann::json>& manifest);

// Empty if no address is allocated again before its free (TRACE_FORMAT.md,
// Order) and no free names an address that is not allocated.
std::string check_address_order(const std::vector<nlohmann::json>& trace);

// name → module of the manifest's "resolve" entries.
std::map<std::string, std::string> resolved_modules(const std::vector<nlohmann::json>& manifest);

}  // namespace cumemtrace::testing
