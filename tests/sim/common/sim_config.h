// SIMCUDA_* environment settings, parsed once, and the sim's host waits.
// The driver (libcuda.so.1) compiles this file, with hidden visibility.
#pragma once

#include <cstddef>
#include <cstdint>

namespace simcfg {

struct Config {
  std::size_t device_memory;        // SIMCUDA_DEVICE_MEMORY, bytes per device
  int device_count;                 // SIMCUDA_DEVICE_COUNT
  std::uint64_t async_latency_us;   // SIMCUDA_ASYNC_LATENCY_US
  std::uint64_t malloc_latency_us;  // SIMCUDA_MALLOC_LATENCY_US
  std::uint64_t free_latency_us;    // SIMCUDA_FREE_LATENCY_US
  bool log_unsupported;             // SIMCUDA_LOG_UNSUPPORTED (0 or 1)
};

// Parsed on first use; a bad value prints one warning and keeps the default.
const Config& get();

// "16GiB", "512MiB", "4096", "1.5GiB", "2G"; false on malformed input.
bool parse_size(const char* text, std::size_t* out);
// Plain non-negative integer; false on malformed input.
bool parse_uint(const char* text, std::uint64_t* out);

// One stderr line naming a function the sim does not model, when
// SIMCUDA_LOG_UNSUPPORTED=1 (the first thing to look at when a client fails
// on the sim but not on a GPU).
void note_unsupported(const char* name);

// The one-line warning of a malformed SIMCUDA_* value:
// "simcuda: warning: ignoring VAR='value' (why); using the default FALLBACK".
void warn(const char* var, const char* value, const char* why, const char* fallback);

// Waits `ns` nanoseconds on the calling thread, a program's own thread, and
// ends close to on time (no-op for 0). Callers never hold a lock.
void wait_ns(std::uint64_t ns);
inline void wait_us(std::uint64_t us) { wait_ns(us * 1000); }

// For the sim's own threads (stream workers): makes their sleeps end close
// to on time by lowering the thread's timer slack, then sleeps.
void lower_timer_slack();
void sleep_us(std::uint64_t us);

}  // namespace simcfg
