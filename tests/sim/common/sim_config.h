// SIMCUDA_* environment settings, parsed once per library.
// Both libcuda.so.1 and libcudart.so.13 compile this file (with hidden
// visibility), so each keeps its own copy; only the driver uses most values.
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

// Sleeps for `us` microseconds (no-op for 0). Callers never hold a lock.
void sleep_us(std::uint64_t us);

}  // namespace simcfg
