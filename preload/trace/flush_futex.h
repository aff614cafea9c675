// Futex wait/wake on a std::atomic<uint32_t>: the background writer sleeps on
// one word with a timeout, recording threads wake it. Linux only, like the
// rest of the preload; no lock, no allocation, async-signal-safe.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <ctime>

namespace cumemtrace::preload {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

// Sleeps while `word` still holds `seen`, at most `timeout`.
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, const timespec& timeout) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, &timeout,
            nullptr, 0);
}

inline void futex_wake_all(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
            nullptr, 0);
}

}  // namespace cumemtrace::preload
