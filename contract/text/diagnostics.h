// Warnings from the injected side go straight to stderr with write(2): no
// stdio locks, no allocation, safe from any thread and from atexit handlers.
#pragma once

namespace cumemtrace::contract {

// printf-style; prefixed with "cumemtrace: warning: " and ended with '\n'.
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace cumemtrace::contract
