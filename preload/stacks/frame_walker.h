// A call-stack walker for x86-64 that costs a handful of instructions per
// frame, for the capture at every allocation and free.
//
// libunwind's unw_backtrace was our capture: about 67 instructions a frame
// plus ~200 to set up (callgrind, bench_malloc_free), which made stacks the
// largest cost of a passthrough call. This walker does the same walk from the
// same tables (.eh_frame, through stacks/cfi_rules.h), with two savings:
//  - each code address's rule is computed once, process-wide, and kept in a
//    lock-free table, packed in one word;
//  - a thread that captures again from the same stack position re-reads only
//    the words the last walk from there read (the saved return addresses and
//    the saved rbp values a frame address was computed from). A walk is a
//    function of its starting registers and of those words, so when all of
//    them still hold what they held, the stack is the one recorded, and it is
//    returned without walking. A training loop allocates from the same few
//    positions every step.
// A stack it cannot walk (code without CFI, signal frames, stacks outside the
// thread's own, such as fibers' or sigaltstack's) goes to the fallback
// (libunwind), so no stack is lost to this walker's narrower reach.
#pragma once

#include <cstdint>

namespace cumemtrace::preload::frame_walker {

// unw_backtrace's signature: the fallback's, and this walker's own.
using Backtrace = int (*)(void** out, int max);

// True on x86-64 with a glibc that has _dl_find_object (2.35 and later) and
// CFI for this walker's own code.
bool available();

// Where stacks this walker cannot walk go; nullptr (the start): such a
// stack comes back empty. Set once, before the first capture.
void set_fallback(Backtrace fallback);

// unw_backtrace's contract: up to `max` return addresses of the calling
// thread, innermost first, the first being the one into this function's
// caller; returns the count. A thread's first capture allocates its memo
// and asks glibc for its stack's bounds (not async-signal-safe, as
// libunwind's first capture on a thread is not); later ones allocate nothing.
int backtrace(void** out, int max);

// backtrace(), plus a word kept with each remembered stack for the caller
// (the stack recorder keeps the stack's id there, and so skips interning a
// stack it has seen from the same place). `note` is nullptr when the stack
// is not remembered; otherwise the caller may store a word there whose high
// 32 bits are its `owner` (nonzero, unique to the caller: ids of a forked
// child's recorder mean nothing to its parent's). When the stack is one
// remembered with a note of this owner, count is kNoted, `out` is left
// untouched and *note holds that word.
struct Capture {
  int count = 0;
  std::uint64_t* note = nullptr;
  bool has_slots = false;  // capture_with_slots: `slots` were filled
  bool noted = false;      // capture_with_slots: *note is this owner's (`out` is filled all the same)
};
constexpr int kNoted = -1;
Capture capture(void** out, int max, std::uint32_t owner);

// capture(), plus where on the stack each return address was read:
// slots[i] is the address of out[i], just below the frame of the function
// out[i] returns into. Python frames whose interpreter entry frame lives on
// the C stack (3.12+) are placed by it (python_frames.h). Without
// has_slots (the fallback walked) only `out` was filled. A stack noted by
// this owner comes back whole too, with `noted` set (count is never kNoted).
Capture capture_with_slots(void** out, std::uintptr_t* slots, int max, std::uint32_t owner);

// What this thread's captures did (tests and benchmarks read them).
struct Counters {
  std::uint64_t remembered = 0;  // answered from the memo, without a walk
  std::uint64_t walked = 0;      // walked by the rules
  std::uint64_t fell_back = 0;   // handed to the fallback
};
Counters thread_counters();

}  // namespace cumemtrace::preload::frame_walker
