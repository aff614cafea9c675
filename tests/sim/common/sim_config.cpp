#include "sim_config.h"

#include <sys/prctl.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace simcfg {

void warn(const char* var, const char* value, const char* why, const char* fallback) {
  std::fprintf(stderr, "simcuda: warning: ignoring %s='%s' (%s); using the default %s\n", var,
               value, why, fallback);
}

namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

void warn(const char* var, const char* value, const char* fallback) {
  simcfg::warn(var, value, "not a valid value", fallback);
}

Config load() {
  Config c{};
  c.device_memory = 16 * kGiB;
  c.device_count = 1;
  if (const char* v = std::getenv("SIMCUDA_DEVICE_MEMORY"); v && *v) {
    std::size_t bytes = 0;
    // Below 4 MiB nothing useful fits (VMM granularity is 2 MiB); above
    // 64 TiB the address space of several devices would not fit.
    if (parse_size(v, &bytes) && bytes >= (std::size_t{4} << 20) &&
        bytes <= (std::size_t{64} << 40)) {
      c.device_memory = bytes;
    } else {
      warn("SIMCUDA_DEVICE_MEMORY", v, "16GiB");
    }
  }
  if (const char* v = std::getenv("SIMCUDA_DEVICE_COUNT"); v && *v) {
    std::uint64_t n = 0;
    if (parse_uint(v, &n) && n <= 16) {
      c.device_count = static_cast<int>(n);
    } else {
      warn("SIMCUDA_DEVICE_COUNT", v, "1 (allowed: 0..16)");
    }
  }
  struct {
    const char* name;
    std::uint64_t* dst;
  } lat[] = {{"SIMCUDA_ASYNC_LATENCY_US", &c.async_latency_us},
             {"SIMCUDA_MALLOC_LATENCY_US", &c.malloc_latency_us},
             {"SIMCUDA_FREE_LATENCY_US", &c.free_latency_us}};
  for (auto& l : lat) {
    const char* v = std::getenv(l.name);
    if (!v || !*v) continue;
    std::uint64_t us = 0;
    // Cap at 60 s: a larger value is almost certainly a unit mistake.
    if (parse_uint(v, &us) && us <= 60'000'000) {
      *l.dst = us;
    } else {
      warn(l.name, v, "0");
    }
  }
  if (const char* v = std::getenv("SIMCUDA_LOG_UNSUPPORTED"); v && *v) {
    if (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0) {
      c.log_unsupported = *v == '1';
    } else {
      warn("SIMCUDA_LOG_UNSUPPORTED", v, "0");
    }
  }
  return c;
}

}  // namespace

void note_unsupported(const char* name) {
  if (get().log_unsupported) {
    std::fprintf(stderr, "simcuda: %s is not simulated; it answers \"not supported\"\n", name);
  }
}

bool parse_uint(const char* text, std::uint64_t* out) {
  if (!text || !*text) return false;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_size(const char* text, std::size_t* out) {
  if (!text || !*text) return false;
  if (*text < '0' || *text > '9') return false;
  errno = 0;
  char* end = nullptr;
  double number = std::strtod(text, &end);
  if (errno != 0 || end == text || !std::isfinite(number) || number < 0) return false;
  struct {
    const char* suffix;
    double mult;
  } units[] = {{"", 1.0},
               {"B", 1.0},
               {"K", 1024.0},
               {"KB", 1024.0},
               {"KiB", 1024.0},
               {"M", 1048576.0},
               {"MB", 1048576.0},
               {"MiB", 1048576.0},
               {"G", 1073741824.0},
               {"GB", 1073741824.0},
               {"GiB", 1073741824.0},
               {"T", 1099511627776.0},
               {"TB", 1099511627776.0},
               {"TiB", 1099511627776.0}};
  for (auto& u : units) {
    if (std::strcmp(end, u.suffix) == 0) {
      double bytes = number * u.mult;
      if (bytes > 1.8e19) return false;
      *out = static_cast<std::size_t>(bytes);
      return true;
    }
  }
  return false;
}

const Config& get() {
  static const Config cfg = load();
  return cfg;
}

// A sleep ends up to the thread's timer slack late (50 us unless changed:
// "The timer slack values of init (PID 1), the ancestor of all processes,
// are 50,000 nanoseconds", prctl(2) PR_SET_TIMERSLACK), plus the time the scheduler takes to run the woken thread:
// a 1.5 us cuMemMap cost charged with sleep_for would take some 55 us. So a
// short wait spins on the steady clock, and a long one sleeps until it is
// that margin short of its end, then spins. Spinning costs a core while it
// lasts, which is why it is kept to the last stretch; the program's own
// thread's timer slack is left as the program set it.
constexpr std::uint64_t kSpinBelowNs = 200'000;
constexpr std::uint64_t kWakeupMarginNs = 100'000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void wait_ns(std::uint64_t ns) {
  if (ns == 0) return;
  using clock = std::chrono::steady_clock;
  const clock::time_point end = clock::now() + std::chrono::nanoseconds(ns);
  if (ns >= kSpinBelowNs) {
    const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    const std::uint64_t margin = kWakeupMarginNs + (slack > 0 ? static_cast<std::uint64_t>(slack) : 0);
    if (ns > margin) std::this_thread::sleep_until(end - std::chrono::nanoseconds(margin));
  }
  while (clock::now() < end) cpu_relax();
}

// Stream workers are the sim's own threads, one per stream: spinning there
// would keep a core busy for every stream with a "slow kernel" queued (a
// 2-core CI machine has few to spare), so they sleep instead, with a timer
// slack of 1 ns (the least prctl(2) allows: "the minimum 'current' value
// is 1 nanosecond") so that a sleep ends within the scheduler's wake-up time
// rather than up to 50 us late.
void lower_timer_slack() { prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); }

void sleep_us(std::uint64_t us) {
  if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace simcfg
