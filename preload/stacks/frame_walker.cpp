#include "stacks/frame_walker.h"

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>

#include "stacks/cfi_rules.h"

namespace cumemtrace::preload::frame_walker {
namespace {

using cfi::FrameRule;
using cfi::RuleKind;

// ---- rules, process-wide -------------------------------------------------
//
// Open addressing, insert-only: a slot's address is claimed once with a CAS
// and its rule published with a release store, so a reader that finds the
// address either sees the rule or a 0 it treats as a miss. Never cleared: a
// library unloaded and another loaded at the same address would keep the old
// rules (as libunwind's per-thread caches do until unw_flush_cache); the
// stack bounds check below keeps such a walk inside the thread's stack.
constexpr unsigned kRuleBits = 14;  // 16 Ki code addresses, 256 KiB of .bss touched as used
constexpr std::size_t kRuleMask = (std::size_t{1} << kRuleBits) - 1;
constexpr int kRuleProbes = 8;

struct RuleSlot {
  std::atomic<std::uintptr_t> address{0};
  std::atomic<std::uint64_t> rule{0};
};
RuleSlot g_rules[std::size_t{1} << kRuleBits];

std::size_t rule_index(std::uintptr_t address) {
  return static_cast<std::size_t>((address * 0x9E3779B97F4A7C15ull) >> (64 - kRuleBits));
}

[[gnu::noinline]] std::uint64_t compute_and_keep_rule(std::uintptr_t address) {
  const std::uint64_t rule = cfi::rule_for(address).pack();
  std::size_t index = rule_index(address);
  for (int probe = 0; probe < kRuleProbes; ++probe, index = (index + 1) & kRuleMask) {
    RuleSlot& slot = g_rules[index];
    std::uintptr_t held = 0;
    if (slot.address.compare_exchange_strong(held, address, std::memory_order_acq_rel)) {
      slot.rule.store(rule, std::memory_order_release);
      return rule;
    }
    if (held == address) return rule;  // another thread is publishing the same rule
  }
  return rule;  // crowded: computed again next time
}

inline std::uint64_t rule_at(std::uintptr_t address) {
  std::size_t index = rule_index(address);
  for (int probe = 0; probe < kRuleProbes; ++probe, index = (index + 1) & kRuleMask) {
    RuleSlot& slot = g_rules[index];
    const std::uintptr_t held = slot.address.load(std::memory_order_acquire);
    if (held == address) {
      const std::uint64_t rule = slot.rule.load(std::memory_order_acquire);
      if (rule != 0) return rule;
      break;
    }
    if (held == 0) break;
  }
  return compute_and_keep_rule(address);
}

// ---- this thread's stack -------------------------------------------------

struct ThreadStack {
  std::uintptr_t low = 0;
  std::uintptr_t high = 0;  // 0: not asked yet; low == high: unknown (all captures fall back)
};
thread_local ThreadStack t_stack __attribute__((tls_model("initial-exec")));

[[gnu::noinline]] void learn_thread_stack() {
  pthread_attr_t attr;
  void* address = nullptr;
  std::size_t size = 0;
  t_stack = ThreadStack{1, 1};
  if (::pthread_getattr_np(::pthread_self(), &attr) != 0) return;
  if (::pthread_attr_getstack(&attr, &address, &size) == 0 && size > 0) {
    t_stack.low = reinterpret_cast<std::uintptr_t>(address);
    t_stack.high = t_stack.low + size;
  }
  ::pthread_attr_destroy(&attr);
}

// ---- the memo, per thread ------------------------------------------------

constexpr int kMemoFrames = 48;     // deeper requests are walked every time
constexpr int kMemoRbpWords = 8;    // a walk that needs more saved rbp values is not remembered
constexpr unsigned kMemoSets = 8;
constexpr unsigned kMemoWays = 4;   // stacks that start at the same position (two call sites, one depth)

// One word a walk read, and what it held.
struct Check {
  std::uintptr_t address;
  std::uintptr_t value;
};

// One remembered walk, keyed by where it started (pc, sp, and rbp when the
// walk used it as it was). checks[0, count) are the return addresses it read, in
// order (their values are the frames); after them come the saved rbp values
// a frame address was computed from, and the 0 that ended the walk, if one
// did. One flat list: re-reading them is one tight loop.
struct MemoEntry {
  std::uintptr_t sp = 0;  // 0: empty
  std::uintptr_t pc = 0;  // backtrace() and capture() start at different ones
  std::uintptr_t entry_rbp = 0;
  std::int32_t max = 0;
  std::int32_t count = 0;
  std::int32_t checks = 0;
  bool uses_entry_rbp = false;
  std::uint64_t note = 0;  // the caller's (Capture::note); 0 until it sets one
  Check check[kMemoFrames + kMemoRbpWords + 1];
};

struct ThreadMemo {
  MemoEntry entries[kMemoSets * kMemoWays];
  unsigned next_way[kMemoSets] = {};
  Counters counters;
};
thread_local ThreadMemo* t_memo __attribute__((tls_model("initial-exec"))) = nullptr;

pthread_key_t g_memo_key;
std::once_flag g_memo_key_once;

ThreadMemo* thread_memo() {
  if (t_memo != nullptr) [[likely]] return t_memo;
  std::call_once(g_memo_key_once, [] {
    ::pthread_key_create(&g_memo_key, [](void* memo) {
      t_memo = nullptr;
      std::free(memo);
    });
  });
  void* memory = std::calloc(1, sizeof(ThreadMemo));
  if (memory == nullptr) return nullptr;
  t_memo = new (memory) ThreadMemo();
  ::pthread_setspecific(g_memo_key, t_memo);
  return t_memo;
}

unsigned memo_set(std::uintptr_t sp, int max) {
  return static_cast<unsigned>(((sp >> 4) ^ static_cast<std::uintptr_t>(max)) * 0x9E3779B97F4A7C15ull >> 61) %
         kMemoSets;
}

using Word = std::uintptr_t;
inline Word word_at(std::uintptr_t address) { return *reinterpret_cast<const Word*>(address); }

// True when every word `entry`'s walk read still holds what it held.
__attribute__((no_sanitize("address", "thread"))) bool still_holds(const MemoEntry& entry, std::uintptr_t rbp) {
  if (entry.uses_entry_rbp && entry.entry_rbp != rbp) return false;
  for (int i = 0; i < entry.checks; ++i) {
    if (word_at(entry.check[i].address) != entry.check[i].value) return false;
  }
  return true;
}

// ---- the walk ------------------------------------------------------------

// What a walk read, for remembering it: the words that decided its path.
struct WalkTrace {
  std::uintptr_t slot[kMemoFrames];
  std::uintptr_t rbp_slot[kMemoFrames];
  std::uintptr_t rbp_value[kMemoFrames];
  bool rbp_needed[kMemoFrames];
  std::uintptr_t zero_slot = 0;  // the 0 return address that ended the walk, if one did
  int rbp_loads = 0;
  bool uses_entry_rbp = false;
};

enum class WalkEnd { complete, unwalkable };

// `pc` is exact for the first frame; every later one is a return address,
// whose rule is the call's (pc - 1). Every address read lies in
// [sp, t_stack.high): above the frame the walk is in, inside the thread's
// stack. `trace` is null when the walk is too deep to remember.
__attribute__((no_sanitize("address", "thread"))) WalkEnd walk(std::uintptr_t pc, std::uintptr_t sp,
                                                               std::uintptr_t rbp, void** out, int max,
                                                               int& count, WalkTrace* trace,
                                                               std::uintptr_t* slots) {
  const std::uintptr_t high = t_stack.high;
  int rbp_source = -1;  // -1: rbp as it was at the start; else the load that set it
  std::uintptr_t lookup = pc;
  count = 0;
  while (count < max) {
    const FrameRule rule = FrameRule::unpack(rule_at(lookup));
    if (rule.kind == RuleKind::outermost) return WalkEnd::complete;
    if (rule.kind != RuleKind::frame) return WalkEnd::unwalkable;
    std::uintptr_t cfa = sp;
    if (rule.cfa_from_rbp) {
      cfa = rbp;
      if (trace != nullptr) {
        if (rbp_source < 0) {
          trace->uses_entry_rbp = true;
        } else {
          trace->rbp_needed[rbp_source] = true;
        }
      }
    }
    cfa += static_cast<std::intptr_t>(rule.cfa_offset);
    // The caller's frame is above this one, and the return address below the
    // stack's top.
    if (cfa < sp + sizeof(Word) || cfa > high) return WalkEnd::unwalkable;
    const std::uintptr_t return_address = word_at(cfa - sizeof(Word));
    if (rule.rbp_saved) {
      const std::uintptr_t at = cfa + static_cast<std::intptr_t>(rule.rbp_offset);
      if (at < sp || at + sizeof(Word) > high) return WalkEnd::unwalkable;
      rbp = word_at(at);
      if (trace != nullptr) {
        rbp_source = trace->rbp_loads++;
        trace->rbp_slot[rbp_source] = at;
        trace->rbp_value[rbp_source] = rbp;
        trace->rbp_needed[rbp_source] = false;
      }
    }
    sp = cfa;
    if (return_address == 0) {
      if (trace != nullptr) trace->zero_slot = cfa - sizeof(Word);
      return WalkEnd::complete;
    }
    if (trace != nullptr) trace->slot[count] = cfa - sizeof(Word);
    if (slots != nullptr) slots[count] = cfa - sizeof(Word);
    out[count++] = reinterpret_cast<void*>(return_address);
    lookup = return_address - 1;
  }
  return WalkEnd::complete;
}

std::uint64_t* remember(ThreadMemo& memo, std::uintptr_t pc, std::uintptr_t sp, std::uintptr_t rbp, int max,
                        void* const* out, int count, const WalkTrace& trace) {
  int rbp_words = 0;
  for (int i = 0; i < trace.rbp_loads; ++i) rbp_words += trace.rbp_needed[i] ? 1 : 0;
  if (rbp_words > kMemoRbpWords) return nullptr;
  const unsigned set = memo_set(sp, max);
  MemoEntry& entry = memo.entries[set * kMemoWays + memo.next_way[set]];
  memo.next_way[set] = (memo.next_way[set] + 1) % kMemoWays;
  int n = 0;
  for (int i = 0; i < count; ++i) entry.check[n++] = {trace.slot[i], reinterpret_cast<std::uintptr_t>(out[i])};
  for (int i = 0; i < trace.rbp_loads; ++i) {
    if (trace.rbp_needed[i]) entry.check[n++] = {trace.rbp_slot[i], trace.rbp_value[i]};
  }
  if (trace.zero_slot != 0) entry.check[n++] = {trace.zero_slot, 0};
  entry.checks = n;
  entry.uses_entry_rbp = trace.uses_entry_rbp;
  entry.entry_rbp = rbp;
  entry.max = max;
  entry.count = count;
  entry.pc = pc;
  entry.sp = sp;
  entry.note = 0;
  return &entry.note;
}

std::atomic<Backtrace> g_fallback{nullptr};

int fall_back(void** out, int max, ThreadMemo* memo) {
  if (memo != nullptr) ++memo->counters.fell_back;
  const Backtrace fallback = g_fallback.load(std::memory_order_acquire);
  return fallback != nullptr ? fallback(out, max) : 0;
}

}  // namespace

bool available() {
#if defined(__x86_64__)
  if (!cfi::available()) return false;
  const FrameRule own = cfi::rule_for(reinterpret_cast<std::uintptr_t>(&backtrace) + 1);
  return own.kind == RuleKind::frame;
#else
  return false;
#endif
}

void set_fallback(Backtrace fallback) { g_fallback.store(fallback, std::memory_order_release); }

Counters thread_counters() {
  const ThreadMemo* memo = t_memo;
  return memo != nullptr ? memo->counters : Counters{};
}

namespace {

// The walk starts in the frame that calls this (always inlined): its pc (the
// next instruction), rsp and rbp. The CFI row is exact at that pc, whatever
// the compiler scheduled around it.
struct Registers {
  std::uintptr_t pc = 0, sp = 0, rbp = 0;
};
[[gnu::always_inline]] inline Registers here() {
  Registers r;
#if defined(__x86_64__)
  asm volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2" : "=r"(r.pc), "=r"(r.sp), "=r"(r.rbp));
#endif
  return r;
}

Capture capture_from(const Registers& start, void** out, int max, std::uint32_t owner,
                     std::uintptr_t* slots = nullptr) {
  if (max <= 0) return {};
  ThreadMemo* memo = thread_memo();
  if (t_stack.high == 0) [[unlikely]] learn_thread_stack();
  if (start.pc == 0 || start.sp < t_stack.low || start.sp >= t_stack.high) return {fall_back(out, max, memo)};

  const bool rememberable = memo != nullptr && max <= kMemoFrames;
  if (rememberable) {
    const unsigned set = memo_set(start.sp, max);
    for (unsigned way = 0; way < kMemoWays; ++way) {
      MemoEntry& entry = memo->entries[set * kMemoWays + way];
      if (entry.sp != start.sp || entry.pc != start.pc || entry.max != max || !still_holds(entry, start.rbp)) {
        continue;
      }
      ++memo->counters.remembered;
      const bool noted = owner != 0 && (entry.note >> 32) == owner;
      if (noted && slots == nullptr) return {kNoted, &entry.note};
      for (int i = 0; i < entry.count; ++i) out[i] = reinterpret_cast<void*>(entry.check[i].value);
      if (slots != nullptr) {
        for (int i = 0; i < entry.count; ++i) slots[i] = entry.check[i].address;
      }
      return {entry.count, &entry.note, slots != nullptr, noted};
    }
  }
  WalkTrace trace;
  int count = 0;
  if (walk(start.pc, start.sp, start.rbp, out, max, count, rememberable ? &trace : nullptr, slots) !=
      WalkEnd::complete) {
    return {fall_back(out, max, memo)};
  }
  if (memo != nullptr) ++memo->counters.walked;
  std::uint64_t* note = rememberable ? remember(*memo, start.pc, start.sp, start.rbp, max, out, count, trace) : nullptr;
  return {count, note, slots != nullptr};
}

}  // namespace

[[gnu::noinline]] int backtrace(void** out, int max) { return capture_from(here(), out, max, 0).count; }

[[gnu::noinline]] Capture capture(void** out, int max, std::uint32_t owner) {
  return capture_from(here(), out, max, owner);
}

[[gnu::noinline]] Capture capture_with_slots(void** out, std::uintptr_t* slots, int max, std::uint32_t owner) {
  return capture_from(here(), out, max, owner, slots);
}

}  // namespace cumemtrace::preload::frame_walker
