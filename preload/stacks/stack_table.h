// Interns call stacks: each distinct array of return addresses gets one id,
// and the thread that first sees it writes its `stack` event before the id
// becomes visible to any other thread (TRACE_FORMAT.md: a `stack` event comes
// before the first event that uses its id).
//
// Lock-free open addressing over memory reserved once and touched lazily.
// The hit path — a stack seen before, which is nearly every allocation of a
// training loop — hashes the addresses, probes, compares and returns: no
// lock, no allocation. Only a thread that asks for a stack another thread is
// still publishing waits, and only until that stack's event is written.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace cumemtrace::preload {

class StackTable {
 public:
  // The deepest stack the table stores (CUMEMTRACE_STACKS is capped to it).
  static constexpr std::size_t kMaxDepth = 256;

  using Hasher = std::uint64_t (*)(std::span<const std::uintptr_t> ips);
  static std::uint64_t default_hash(std::span<const std::uintptr_t> ips);

  // `slots` is rounded up to a power of two, of which 3/4 may be filled;
  // `frame_capacity` return addresses are stored in all. `hasher` is
  // replaceable so tests can force collisions.
  StackTable(std::size_t slots, std::size_t frame_capacity, Hasher hasher = &default_hash);
  ~StackTable();
  StackTable(const StackTable&) = delete;
  StackTable& operator=(const StackTable&) = delete;

  // The id of `ips`: 1, 2, 3… in the order stacks are first seen. For a
  // stack not seen before, `on_new(id, ips)` runs first, exactly once, and
  // no caller is given the id before it has returned. 0 for an empty or
  // too deep stack, and once the table is full (for new stacks only).
  // If `on_new` throws, the stack is given 0 from then on.
  template <typename OnNew>
  std::uint32_t intern(std::span<const std::uintptr_t> ips, OnNew&& on_new) {
    return intern_impl(
        ips,
        [](void* context, std::uint32_t id, std::span<const std::uintptr_t> frames) {
          (*static_cast<std::remove_reference_t<OnNew>*>(context))(id, frames);
        },
        const_cast<void*>(static_cast<const void*>(&on_new)));
  }

  // Distinct stacks given an id so far.
  std::uint32_t size() const { return next_id_.load(std::memory_order_relaxed) - 1; }

  // The frames of stack `id`, as interned; empty for an id not (yet) given.
  // For the query API (cumemtrace_query_stack): cold, never on a capture.
  std::span<const std::uintptr_t> frames_of(std::uint32_t id) const;
  // True once a new stack has been turned away for lack of room.
  bool overflowed() const { return overflowed_.load(std::memory_order_relaxed); }

 private:
  using NewStackCallback = void (*)(void* context, std::uint32_t id,
                                    std::span<const std::uintptr_t> ips);

  // `state`: kFilling while the claiming thread stores the frames and writes
  // the stack's event; then its id, or kAbandoned.
  static constexpr std::uint32_t kFilling = 0;
  static constexpr std::uint32_t kAbandoned = UINT32_MAX;
  static constexpr std::uint64_t kEmpty = 0;

  // Plain integers, so zeroed pages hold valid empty slots without being
  // constructed (and touched); `hash` and `state` are only ever accessed
  // through std::atomic_ref.
  struct Slot {
    std::uint64_t hash;         // kEmpty until claimed; never changes after
    std::uint32_t state;
    std::uint32_t depth;        // written before `state` is published
    std::uint64_t first_frame;  // index into frames_
  };
  static std::atomic_ref<std::uint64_t> hash_of(Slot& s) { return std::atomic_ref(s.hash); }
  static std::atomic_ref<std::uint32_t> state_of(Slot& s) { return std::atomic_ref(s.state); }

  std::uint32_t intern_impl(std::span<const std::uintptr_t> ips, NewStackCallback on_new,
                            void* context);
  std::uint32_t fill(Slot& slot, std::span<const std::uintptr_t> ips, NewStackCallback on_new,
                     void* context);
  static std::uint32_t wait_until_published(Slot& slot);
  static void publish(Slot& slot, std::uint32_t state);

  const Hasher hasher_;
  const std::size_t mask_;         // slot count - 1
  const std::size_t max_claimed_;  // 3/4 of the slots: probes stay short
  const std::size_t frame_capacity_;
  Slot* slots_ = nullptr;          // anonymous mappings: zero pages until written
  std::uintptr_t* frames_ = nullptr;
  // By id: first_frame << 16 | depth (0 until the id's frames are stored),
  // only ever accessed through std::atomic_ref. Written once per new stack.
  std::uint64_t* by_id_ = nullptr;
  std::atomic<std::size_t> claimed_{0};
  std::atomic<std::size_t> frames_used_{0};
  std::atomic<std::uint32_t> next_id_{1};
  std::atomic<bool> overflowed_{false};
};

}  // namespace cumemtrace::preload
