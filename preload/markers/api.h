// Recording marks from inside libcumemtrace.so: the exported marker API
// (cumemtrace.h) and the NVTX injection both come through here. Never
// throws into the application.
#pragma once

#include <string_view>

namespace cumemtrace::preload {

// `domain` keys separate nesting (NVTX domains); nullptr is the default
// domain, shared by cumemtrace_range_* and NVTX's plain ranges.
void record_mark(std::string_view name) noexcept;
// The new range's level (0: outermost), -1 if it could not be recorded.
int record_range_push(const void* domain, std::string_view name) noexcept;
// The closed range's level, -1 when no range of `domain` was open.
int record_range_pop(const void* domain) noexcept;

}  // namespace cumemtrace::preload
