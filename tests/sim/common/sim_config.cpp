#include "sim_config.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace simcfg {
namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

void warn(const char* var, const char* value, const char* fallback) {
  std::fprintf(stderr,
               "simcuda: warning: ignoring %s='%s' (not a valid value); using "
               "the default %s\n",
               var, value, fallback);
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

void sleep_us(std::uint64_t us) {
  if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace simcfg
