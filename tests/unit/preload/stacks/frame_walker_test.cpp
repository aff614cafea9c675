// The CFI frame walker (stacks/frame_walker.h) against libunwind, on the
// shapes of stack a program gives it, and its memo: a remembered stack is
// only ever answered when the words its walk read still hold the same
// values. The call-frame interpreter (stacks/cfi_rules.h) is checked on a
// hand-assembled .eh_frame_hdr whose rows are known.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <cstring>
#include <thread>
#include <vector>

#include "stacks/cfi_rules.h"
#include "stacks/frame_walker.h"

namespace cfi = cumemtrace::preload::cfi;
namespace walker = cumemtrace::preload::frame_walker;

namespace {

// libunwind, opened as the preload opens it (RTLD_LOCAL), as the reference.
walker::Backtrace libunwind_backtrace() {
  static const walker::Backtrace fn = [] {
    void* handle = ::dlopen(CUMEMTRACE_LIBUNWIND_SONAME, RTLD_LAZY | RTLD_LOCAL);
    return handle ? reinterpret_cast<walker::Backtrace>(::dlsym(handle, "unw_backtrace")) : nullptr;
  }();
  return fn;
}

using Frames = std::vector<void*>;

struct Both {
  Frames ours;
  Frames libunwinds;
};

// Both walkers from one frame, into plain arrays (a signal handler may
// take them: nothing is allocated). Their first entries are two different
// call sites in this function; everything above must be the same.
struct RawBoth {
  void* ours[128];
  int ours_count;
  void* libunwinds[128];
  int libunwinds_count;

  Both frames() const {
    return {Frames(ours, ours + std::max(ours_count, 0)),
            Frames(libunwinds, libunwinds + std::max(libunwinds_count, 0))};
  }
};

__attribute__((noinline)) void walk_both_into(RawBoth& raw, int max) {
  raw.ours_count = walker::backtrace(raw.ours, max);
  raw.libunwinds_count = libunwind_backtrace()(raw.libunwinds, max);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) Both walk_both(int max) {
  RawBoth raw;
  walk_both_into(raw, max);
  return raw.frames();
}

// `handed_on`: the walker gave the stack to libunwind, which then also
// returns the frames of the walker's own functions that called it, first.
void expect_same_callers(const Both& both, bool handed_on = false) {
  ASSERT_GT(both.libunwinds.size(), 2u);
  if (handed_on) {
    ASSERT_GT(both.ours.size(), both.libunwinds.size());
  } else {
    ASSERT_EQ(both.ours.size(), both.libunwinds.size());
  }
  const std::size_t skipped = both.ours.size() - both.libunwinds.size();
  for (std::size_t i = 1; i < both.libunwinds.size(); ++i) {
    EXPECT_EQ(both.ours[skipped + i], both.libunwinds[i]) << "frame " << i;
  }
}

__attribute__((noinline)) Both recurse(int depth, int max) {
  if (depth == 0) return walk_both(max);
  Both both = recurse(depth - 1, max);
  asm volatile("" ::: "memory");  // not a tail call: every level keeps its frame
  return both;
}

// A variable-length array makes GCC address the frame from rbp: the frame's
// CFA rule is rbp-based, and the saved rbp values matter to the walk.
__attribute__((noinline)) Both through_vla(int bytes, int max) {
  char buffer[bytes];
  asm volatile("" : : "r"(buffer) : "memory");  // the array is used: it stays
  Both both = recurse(3, max);
  asm volatile("" : : "r"(buffer) : "memory");
  return both;
}

class FrameWalker : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!walker::available()) GTEST_SKIP() << "no _dl_find_object or not x86-64";
    ASSERT_NE(libunwind_backtrace(), nullptr);
    walker::set_fallback(libunwind_backtrace());
  }
};

TEST_F(FrameWalker, WalksWhatLibunwindWalksAtEveryDepth) {
  for (int depth : {0, 1, 5, 20, 60}) {
    SCOPED_TRACE(depth);
    expect_same_callers(recurse(depth, 128));
  }
}

TEST_F(FrameWalker, StopsAtTheDepthAskedFor) {
  const Both both = recurse(20, 7);
  EXPECT_EQ(both.ours.size(), 7u);
  expect_same_callers(both);
}

TEST_F(FrameWalker, FramesAddressedFromRbpAreWalked) {
  for (int bytes : {16, 1000, 40000}) {
    SCOPED_TRACE(bytes);
    const walker::Counters before = walker::thread_counters();
    expect_same_callers(through_vla(bytes, 128));
    EXPECT_EQ(walker::thread_counters().fell_back, before.fell_back);
  }
}

TEST_F(FrameWalker, WalksOtherThreadsToTheirStart) {
  Both both;
  walker::Counters counters;
  std::thread([&] {
    both = recurse(4, 128);
    counters = walker::thread_counters();
  }).join();
  expect_same_callers(both);
  EXPECT_EQ(counters.fell_back, 0u);
  EXPECT_EQ(counters.walked, 1u);
}

RawBoth g_in_handler;

__attribute__((noinline)) void recurse_into(RawBoth& raw, int depth) {
  if (depth == 0) {
    walk_both_into(raw, 128);
    return;
  }
  recurse_into(raw, depth - 1);
  asm volatile("" ::: "memory");
}

void handler(int) { recurse_into(g_in_handler, 2); }

// A signal frame (__restore_rt's CFI is an expression) is not walked by the
// rules: the whole stack goes to the fallback, and is still right.
TEST_F(FrameWalker, HandsSignalFramesToTheFallback) {
  // The thread's first capture sets it up (its memo, its stack's bounds),
  // which is not async-signal-safe; the capture in the handler is not the
  // first, as in a program whose hooks ran before any signal came.
  expect_same_callers(recurse(1, 128));
  struct sigaction action {}, old{};
  action.sa_handler = &handler;
  ASSERT_EQ(::sigaction(SIGUSR1, &action, &old), 0);
  const walker::Counters before = walker::thread_counters();
  ::raise(SIGUSR1);
  ::sigaction(SIGUSR1, &old, nullptr);
  expect_same_callers(g_in_handler.frames(), /*handed_on=*/true);
  EXPECT_EQ(walker::thread_counters().fell_back, before.fell_back + 1);
}

// The same function called from the same stack position twice: the second
// capture is answered from the memo, and is the same stack.
__attribute__((noinline)) Frames capture_here(int max) {
  void* out[64];
  const int n = walker::backtrace(out, max);
  asm volatile("" ::: "memory");
  return Frames(out, out + n);
}

__attribute__((noinline)) Frames caller_a(int max) {
  Frames f = capture_here(max);
  asm volatile("" ::: "memory");
  return f;
}

__attribute__((noinline)) Frames caller_b(int max) {
  Frames f = capture_here(max);
  asm volatile("nop" ::: "memory");  // not folded into caller_a
  return f;
}

TEST_F(FrameWalker, RemembersAStackCapturedAgainFromTheSamePlace) {
  std::vector<Frames> got;
  const walker::Counters before = walker::thread_counters();
  for (int i = 0; i < 5; ++i) got.push_back(caller_a(32));
  const walker::Counters after = walker::thread_counters();
  for (const Frames& f : got) EXPECT_EQ(f, got.front());
  EXPECT_EQ(after.walked - before.walked, 1u);
  EXPECT_EQ(after.remembered - before.remembered, 4u);
}

// caller_a and caller_b reach capture_here at the same stack position (one
// loop, one call depth, frames of the same size): a memo keyed on the
// position alone would answer one with the other's stack. Each answer must
// be its own caller's.
TEST_F(FrameWalker, NeverAnswersWithAnotherCallersStack) {
  Frames first_a, first_b;
  const walker::Counters before = walker::thread_counters();
  Frames (*const callers[])(int) = {&caller_a, &caller_b};
  for (int i = 0; i < 6; ++i) {
    Frames a, b;
    for (int which = 0; which < 2; ++which) (which == 0 ? a : b) = callers[which](32);  // one call site
    ASSERT_EQ(a.size(), b.size());
    if (i == 0) {
      first_a = a;
      first_b = b;
    }
    EXPECT_EQ(a, first_a);
    EXPECT_EQ(b, first_b);
    EXPECT_NE(a[1], b[1]);  // capture_here's return addresses: one in each caller
  }
  const walker::Counters after = walker::thread_counters();
  EXPECT_EQ(after.walked - before.walked, 2u);
  EXPECT_EQ(after.remembered - before.remembered, 10u);
}

__attribute__((noinline)) walker::Capture note_here(void** out, std::uint32_t owner) {
  walker::Capture c = walker::capture(out, 32, owner);
  asm volatile("" ::: "memory");
  return c;
}

TEST_F(FrameWalker, AnswersANoteOnlyToItsOwner) {
  void* out[64];
  const std::uint32_t owners[] = {7, 7, 8};
  walker::Capture got[3];
  for (int i = 0; i < 3; ++i) {
    got[i] = note_here(out, owners[i]);  // one call site: one stack, thrice
    if (i == 0) {
      ASSERT_GT(got[0].count, 0);
      ASSERT_NE(got[0].note, nullptr);
      *got[0].note = std::uint64_t{7} << 32 | 1234;
    }
  }
  const walker::Capture &first = got[0], &again = got[1], &other = got[2];
  EXPECT_EQ(again.count, walker::kNoted);
  EXPECT_EQ(*again.note & 0xffffffffu, 1234u);
  EXPECT_EQ(other.count, first.count);  // another owner gets the frames
}

__attribute__((noinline)) walker::Capture slots_here(void** out, std::uintptr_t* slots, std::uint32_t owner) {
  walker::Capture c = walker::capture_with_slots(out, slots, 32, owner);
  asm volatile("" ::: "memory");
  return c;
}

__attribute__((noinline)) walker::Capture slots_through(int depth, void** out, std::uintptr_t* slots,
                                                        std::uint32_t owner) {
  if (depth == 0) return slots_here(out, slots, owner);
  walker::Capture c = slots_through(depth - 1, out, slots, owner);
  asm volatile("" ::: "memory");  // not a tail call: every level keeps its frame
  return c;
}

// Where each return address lay: inside the thread's stack, each caller's
// above its callee's, and the word there is the frame (what the Python
// frames' placement relies on, python_frames.h). Walked or remembered, and
// noted: the frames and slots come back whole every time.
TEST_F(FrameWalker, SaysWhereEachReturnAddressLay) {
  for (int i = 0; i < 3; ++i) {
    void* out[64];
    std::uintptr_t slots[64];
    const walker::Capture c = slots_through(4, out, slots, 9);
    ASSERT_GT(c.count, 5);
    ASSERT_TRUE(c.has_slots);
    EXPECT_EQ(c.noted, i == 2) << "capture " << i;
    // Frames still live (this test's and its callers'): the slot holds the
    // frame. (This frame's address, not a local's: ASan may keep locals
    // on a heap "fake stack".)
    const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    int live = 0;
    for (int k = 0; k < c.count; ++k) {
      if (slots[k] > here) {
        EXPECT_EQ(*reinterpret_cast<void* const*>(slots[k]), out[k]) << "frame " << k;
        ++live;
      }
      if (k > 0) {
        EXPECT_GT(slots[k], slots[k - 1]) << "frame " << k;
      }
    }
    EXPECT_GE(live, 2);
    if (i == 1) *c.note = std::uint64_t{9} << 32 | 77;  // noted from the next capture on
  }
}

// ---- the call-frame interpreter, on tables assembled by hand -------------

class EhFrameBuilder {
 public:
  EhFrameBuilder() : bytes_(4096, 0) {}
  std::uintptr_t base() const { return reinterpret_cast<std::uintptr_t>(bytes_.data()); }
  std::uintptr_t code() const { return base() + 0x10000; }  // never read: only compared

  // One CIE ("zR", pc-relative sdata4 addresses, data alignment -8, the
  // x86-64 initial row) and FDEs covering [code()+start, +length).
  void add_fde(std::uint32_t start, std::uint32_t length, std::vector<std::uint8_t> instructions) {
    fdes_.push_back({start, length, std::move(instructions)});
  }

  const std::uint8_t* build(bool signal_frame = false) {
    std::size_t at = 0x100;  // .eh_frame after the header
    const std::size_t cie = at;
    std::vector<std::uint8_t> body = {0, 0, 0, 0, 1, 'z', 'R'};
    if (signal_frame) body.push_back('S');
    body.insert(body.end(), {0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1});
    at = put_record(at, body);
    std::vector<std::pair<std::uint32_t, std::size_t>> table;
    for (const Fde& fde : fdes_) {
      const std::size_t record = at;
      std::vector<std::uint8_t> fbody(12, 0);
      const auto cie_pointer = static_cast<std::uint32_t>(record + 4 - cie);
      std::memcpy(fbody.data(), &cie_pointer, 4);
      const auto pc_begin = static_cast<std::int32_t>(code() + fde.start - (base() + record + 8));
      std::memcpy(fbody.data() + 4, &pc_begin, 4);
      std::memcpy(fbody.data() + 8, &fde.length, 4);
      fbody.push_back(0);  // no augmentation data
      fbody.insert(fbody.end(), fde.instructions.begin(), fde.instructions.end());
      at = put_record(at, fbody);
      table.emplace_back(static_cast<std::uint32_t>(code() + fde.start - base()), record);
    }
    const std::uint8_t header[] = {1, 0x1b, 0x03, 0x3b};
    std::memcpy(bytes_.data(), header, 4);
    const auto frame_pointer = static_cast<std::int32_t>(0x100 - 4);
    std::memcpy(bytes_.data() + 4, &frame_pointer, 4);
    const auto count = static_cast<std::uint32_t>(table.size());
    std::memcpy(bytes_.data() + 8, &count, 4);
    for (std::size_t i = 0; i < table.size(); ++i) {
      const auto initial = static_cast<std::int32_t>(table[i].first);
      const auto fde = static_cast<std::int32_t>(table[i].second);
      std::memcpy(bytes_.data() + 12 + i * 8, &initial, 4);
      std::memcpy(bytes_.data() + 16 + i * 8, &fde, 4);
    }
    return bytes_.data();
  }

 private:
  struct Fde {
    std::uint32_t start, length;
    std::vector<std::uint8_t> instructions;
  };
  std::size_t put_record(std::size_t at, std::vector<std::uint8_t> body) {
    while ((body.size() + 4) % 8 != 0) body.push_back(0);  // DW_CFA_nop padding
    const auto length = static_cast<std::uint32_t>(body.size());
    std::memcpy(bytes_.data() + at, &length, 4);
    std::memcpy(bytes_.data() + at + 4, body.data(), body.size());
    return at + 4 + body.size();
  }
  std::vector<std::uint8_t> bytes_;
  std::vector<Fde> fdes_;
};

cfi::FrameRule frame(bool from_rbp, std::int32_t cfa_offset, bool rbp_saved = false, std::int16_t rbp_offset = 0) {
  return {.kind = cfi::RuleKind::frame, .cfa_from_rbp = from_rbp, .rbp_saved = rbp_saved,
          .rbp_offset = rbp_offset, .cfa_offset = cfa_offset};
}

void expect_rule(const cfi::FrameRule& got, const cfi::FrameRule& want) {
  EXPECT_EQ(got.kind, want.kind);
  if (want.kind != cfi::RuleKind::frame) return;
  EXPECT_EQ(got.cfa_from_rbp, want.cfa_from_rbp);
  EXPECT_EQ(got.cfa_offset, want.cfa_offset);
  EXPECT_EQ(got.rbp_saved, want.rbp_saved);
  if (want.rbp_saved) {
    EXPECT_EQ(got.rbp_offset, want.rbp_offset);
  }
}

TEST(CfiRules, RowsOfAFramePointerFunctionWithAnEarlyReturn) {
  EhFrameBuilder eh;
  eh.add_fde(0, 0x100,
             {0x41, 0x0e, 16, 0x86, 2,  // push rbp: CFA rsp+16, rbp at CFA-16
              0x43, 0x0d, 6,            // mov rbp, rsp: CFA rbp+16
              0x50, 0x0a,               // at 0x14: remember; leave; CFA rsp+8; rbp restored
              0x0c, 7, 8, 0xc6,         //
              0x41, 0x0b});             // at 0x15: ret done; the body goes on: restore_state
  eh.add_fde(0x200, 0x10, {0x07, 16});                    // _start: return address undefined
  eh.add_fde(0x300, 0x10, {0x0f, 2, 0x77, 8});            // CFA by expression
  eh.add_fde(0x400, 0x10, {0x0c, 3, 16});                 // CFA from rbx
  const std::uint8_t* hdr = eh.build();
  const std::uintptr_t code = eh.code();
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 0), frame(false, 8));
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 1), frame(false, 16, true, -16));
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 3), frame(false, 16, true, -16));
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 4), frame(true, 16, true, -16));
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 0x13), frame(true, 16, true, -16));
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 0x14), frame(false, 8));
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 0x15), frame(true, 16, true, -16));
  expect_rule(cfi::rule_from_eh_frame_hdr(hdr, code + 0xff), frame(true, 16, true, -16));
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(hdr, code + 0x100).kind, cfi::RuleKind::unsupported);  // a gap
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(hdr, code - 1).kind, cfi::RuleKind::unsupported);      // before all
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(hdr, code + 0x205).kind, cfi::RuleKind::outermost);
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(hdr, code + 0x305).kind, cfi::RuleKind::unsupported);
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(hdr, code + 0x405).kind, cfi::RuleKind::unsupported);
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(hdr, code + 0x410).kind, cfi::RuleKind::unsupported);
}

TEST(CfiRules, SignalFramesAndBadTablesAreLeftToLibunwind) {
  EhFrameBuilder signal;
  signal.add_fde(0, 0x10, {});
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(signal.build(true), signal.code() + 1).kind, cfi::RuleKind::unsupported);

  EhFrameBuilder unbalanced;
  unbalanced.add_fde(0, 0x10, {0x0b});  // restore_state with nothing remembered
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(unbalanced.build(), unbalanced.code() + 1).kind,
            cfi::RuleKind::unsupported);

  EhFrameBuilder unknown;
  unknown.add_fde(0, 0x10, {0x3f});  // not a call-frame instruction
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(unknown.build(), unknown.code() + 1).kind, cfi::RuleKind::unsupported);

  std::uint8_t wrong_version[32] = {2, 0x1b, 0x03, 0x3b};
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(wrong_version, 0x1000).kind, cfi::RuleKind::unsupported);
  EXPECT_EQ(cfi::rule_from_eh_frame_hdr(nullptr, 0x1000).kind, cfi::RuleKind::unsupported);
}

TEST(CfiRules, PackedRulesComeBackWhole) {
  for (const cfi::FrameRule& rule :
       {frame(false, 8), frame(true, 16, true, -16), frame(false, 1 << 20, true, -32760), frame(true, -24)}) {
    const std::uint64_t word = rule.pack();
    EXPECT_NE(word, 0u);
    expect_rule(cfi::FrameRule::unpack(word), rule);
  }
  EXPECT_EQ(cfi::FrameRule::unpack(cfi::FrameRule{.kind = cfi::RuleKind::outermost}.pack()).kind,
            cfi::RuleKind::outermost);
}

}  // namespace
