#include "hooks/step_aside.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "options/config.h"
#include "options/step_aside_rule.h"

namespace cumemtrace::preload {
namespace {

// Verdicts by return address, open addressing, never removed: a process has
// a handful of call sites that allocate device memory. A slot holds
// (address << 1) | verdict, written once with a compare-and-swap, so a
// reader sees a whole entry or none. Full: decided afresh each time (dladdr
// costs a microsecond or so, still far below a cudaMalloc).
constexpr std::size_t kSlots = 256;
std::array<std::atomic<std::uintptr_t>, kSlots> g_verdicts{};

std::size_t slot_of(std::uintptr_t address) { return (address * 0x9E3779B97F4A7C15ull) >> 56; }

bool decide(const void* caller) {
  Dl_info info{};
  if (dladdr(caller, &info) == 0 || !info.dli_fname) return false;
  return contract::steps_aside_for(contract::config().pool_step_aside, info.dli_fname,
                         std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING") != nullptr);
}

// The calling thread's recent verdicts, direct-mapped by return address: a
// training loop allocates from the same few call sites again and again, and
// this makes the question a load and a compare on the hot path (the table
// below costs a hash and a probe: 38 instructions a call in callgrind).
struct RecentVerdict {
  const void* caller = nullptr;  // nullptr: empty (a null caller is never asked)
  bool verdict = false;
};
thread_local RecentVerdict t_recent[4] __attribute__((tls_model("initial-exec")));

// Out of line, so that the hit path above needs no saved registers.
__attribute__((noinline)) bool lookup(const void* caller) noexcept {
  static const bool enabled = contract::config().pool_step_aside != "off";
  if (!enabled) return false;
  const auto address = reinterpret_cast<std::uintptr_t>(caller);
  if (address == 0) return false;
  const std::uintptr_t key = address << 1;
  std::size_t i = slot_of(address);
  for (std::size_t probe = 0; probe < kSlots; ++probe, i = (i + 1) % kSlots) {
    std::uintptr_t seen = g_verdicts[i].load(std::memory_order_acquire);
    if (seen == 0) {
      const bool verdict = decide(caller);
      // Another thread may take the slot meanwhile; either way the verdict
      // stands (it depends on the address alone).
      g_verdicts[i].compare_exchange_strong(seen, key | verdict, std::memory_order_acq_rel);
      return verdict;
    }
    if ((seen & ~std::uintptr_t{1}) == key) return (seen & 1) != 0;
  }
  return decide(caller);
}

}  // namespace

bool pool_steps_aside() noexcept {
  const void* caller = t_hook_caller;
  if (caller == nullptr) return false;
  RecentVerdict& recent = t_recent[(reinterpret_cast<std::uintptr_t>(caller) >> 3) & 3];
  if (recent.caller == caller) return recent.verdict;
  const bool verdict = lookup(caller);
  recent = {caller, verdict};
  return verdict;
}

}  // namespace cumemtrace::preload
