// Call stacks for alloc/free/oom/error events: capture the calling thread's
// stack, intern it, and write its `stack` event the first time it is seen.
// How a stack is captured is injected (the preload uses libunwind; tests use
// fakes), so this part is unit-tested without unwinding anything.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "stacks/frame_namer.h"
#include "stacks/frame_walker.h"
#include "stacks/python_frames.h"
#include "stacks/stack_table.h"
#include "trace/trace_writer.h"

namespace cumemtrace::preload {

// Writes up to `max` return addresses of the calling thread, innermost
// first, with cumemtrace's own frames already left out; returns the count.
using CaptureStack = std::size_t (*)(std::uintptr_t* out, std::size_t max);

// Writes up to `max` return addresses of the calling thread, innermost
// first, own frames included (the signature of libunwind's unw_backtrace);
// returns the count.
using RawBacktrace = int (*)(void** out, int max);

// A raw backtrace and the code whose frames it leaves out: return addresses
// in [own_begin, own_end) (cumemtrace's own code).
struct RawBacktraceRoute {
  RawBacktrace backtrace = nullptr;
  std::uintptr_t own_begin = 0;
  std::uintptr_t own_end = 0;
  // When set, used before `backtrace`: a capture that remembers stacks and
  // keeps a note (here: the stack's id) with each (frame_walker::capture).
  frame_walker::Capture (*noting)(void** out, int max, std::uint32_t owner) = nullptr;
  // When set, used for stacks with Python frames: `noting` plus where each
  // return address lay (frame_walker::capture_with_slots).
  frame_walker::Capture (*with_slots)(void** out, std::uintptr_t* slots, int max, std::uint32_t owner) = nullptr;
};

// What the recorder's process provides for stacks; all null: no stacks.
struct StackPlatform {
  CaptureStack capture = nullptr;
  SymbolTableLookup symbol_table = nullptr;
  // When set, used instead of `capture`, resolved at the first capture (the
  // preload loads libunwind then, not in every process it is injected
  // into). The backtrace is called straight from the recording function's
  // frame (current_stack_id is inlined there), so the unwinder walks no
  // frame of a capture function: every frame costs it about the same.
  RawBacktraceRoute (*raw_backtrace)() = nullptr;
  // When set, Python frames are merged into stacks captured while a thread
  // runs Python code (python_frames.h): how the interpreter's symbols are
  // found. Null: native stacks only (CUMEMTRACE_PYTHON=off).
  python::SymbolLookup python_symbols = nullptr;
};

class StackRecorder {
 public:
  // Room for this many distinct stacks, and return addresses in all; the
  // memory is reserved, not touched, until stacks are stored.
  static constexpr std::size_t kSlots = std::size_t{1} << 17;
  static constexpr std::size_t kFrames = std::size_t{1} << 22;

  // `depth` 0 (CUMEMTRACE_STACKS=0) or no capture function: every id is 0.
  StackRecorder(unsigned depth, const StackPlatform& platform, TraceWriter& writer,
                std::string perf_map_path = {});

  bool enabled() const { return enabled_; }

  // What the header's config says about Python frames ("CPython 3.11.7
  // (libpython3.11.so.1.0)", "native stacks only: …"); empty when the
  // process has no interpreter or Python frames are off. Looks for the
  // interpreter if no capture has yet.
  std::string python_note();

  // Stack `id`'s frames as cumemtrace_query_stack writes them (cumemtrace.h:
  // one line per frame, innermost first, tab-separated); empty when the id
  // is unknown. Names frames now: cold, for the query API only.
  std::string describe(std::uint32_t id);

  // Frames of ours above the application's that a raw backtrace may hold
  // (the hook, its helpers, the recorder), with room to spare.
  static constexpr std::size_t kOwnFramesAllowance = 16;
  // Room asked for our frames at first; it grows to the most of ours seen
  // before the depth-th application frame (at most kOwnFramesAllowance).
  // Walking a frame costs about 50 ns in a big process, whose caches the
  // application has cooled between two allocations (PyTorch on an H100:
  // about 1.5 us for ~28 frames, 0.45 us repeated at once), so the frames
  // walked only to be dropped are worth not walking.
  static constexpr std::size_t kInitialOwnRoom = 4;

  // The id of the calling thread's current stack; when the stack is new, its
  // `stack` event is written before this returns. 0 when capture is off,
  // nothing was captured, or the table is full. Always inlined: the
  // unwinder then starts in the caller's frame, not in one of ours.
  [[gnu::always_inline]] std::uint32_t current_stack_id() {
    if (!enabled_) return 0;
    if (!prepared_.load(std::memory_order_acquire)) [[unlikely]] prepare();
    // A process with a Python interpreter: one relaxed-cost load here, and a
    // thread that runs no Python code leaves python_stack_id at once.
    if (python::PythonFrames* python = python_.load(std::memory_order_acquire)) {
      if (const std::uint32_t id = python_stack_id(*python); id != kNoPythonFrames) return id;
    }
    std::uintptr_t ips[StackTable::kMaxDepth];
    std::size_t n = 0;
    if (backtrace_ == nullptr) {  // a capture function (tests), or none
      if (capture_ != nullptr) n = std::min(capture_(ips, depth_), depth_);
      return intern(std::span<const std::uintptr_t>(ips, n));
    }
    void* raw[StackTable::kMaxDepth + kOwnFramesAllowance];
    const std::size_t room = own_room_.load(std::memory_order_relaxed);
    std::uint64_t* note = nullptr;
    int got = 0;
    if (noting_ != nullptr) {
      const frame_walker::Capture captured = noting_(raw, static_cast<int>(depth_ + room), owner_);
      // The same stack from the same place as before: its id, with no
      // frame filtered and no table probed.
      if (captured.count == frame_walker::kNoted) return static_cast<std::uint32_t>(*captured.note);
      got = captured.count;
      note = captured.note;
    } else {
      got = backtrace_(raw, static_cast<int>(depth_ + room));
    }
    std::size_t own = keep_application_frames(raw, got, ips, n);
    if (static_cast<std::size_t>(got) == depth_ + room && n < depth_ && room < kOwnFramesAllowance) [[unlikely]] {
      // Ours took room from the application's frames: walk again (from
      // this same frame) with all the room, and ask for what we took
      // from now on.
      got = backtrace_(raw, static_cast<int>(depth_ + kOwnFramesAllowance));
      own = keep_application_frames(raw, got, ips, n);
      grow_own_room(own);
      note = nullptr;  // noted under the smaller request, which is not made again
    }
    const std::uint32_t id = intern(std::span<const std::uintptr_t>(ips, n));
    if (note != nullptr && id != 0) *note = std::uint64_t{owner_} << 32 | id;
    return id;
  }

 private:
  // Made on the first capture: the table, and the raw backtrace.
  void prepare();
  // Copies the return addresses outside our code, up to the depth, from
  // `raw` into `ips` (their count into n); returns how many of ours it
  // passed on the way.
  [[gnu::always_inline]] std::size_t keep_application_frames(void* const* raw, int got, std::uintptr_t* ips,
                                                             std::size_t& n) const {
    std::size_t own = 0;
    n = 0;
    for (int i = 0; i < got && n < depth_; ++i) {
      const auto ip = reinterpret_cast<std::uintptr_t>(raw[i]);
      if (ip - own_begin_ >= own_size_) {
        ips[n++] = ip;  // outside our code
      } else {
        ++own;
      }
    }
    return own;
  }
  void grow_own_room(std::size_t own);
  std::uint32_t intern(std::span<const std::uintptr_t> ips);
  // The id of a stack merged from this thread's native and Python frames,
  // or kNoPythonFrames when it runs no Python code now. Not inlined (and the
  // walker's memo note is not used): the native frames are the same for
  // every Python call site since 3.11, so a note cannot stand for the stack.
  static constexpr std::uint32_t kNoPythonFrames = UINT32_MAX;
  [[gnu::noinline]] std::uint32_t python_stack_id(python::PythonFrames& python);
  void detect_python();
  void write_stack_event(std::uint32_t id, std::span<const std::uintptr_t> ips);

  const std::size_t depth_;
  const CaptureStack capture_;
  RawBacktraceRoute (*const resolve_backtrace_)();
  // Set by prepare(), before prepared_.
  RawBacktrace backtrace_ = nullptr;
  frame_walker::Capture (*noting_)(void**, int, std::uint32_t) = nullptr;
  frame_walker::Capture (*with_slots_)(void**, std::uintptr_t*, int, std::uint32_t) = nullptr;
  // This recorder's mark on the notes it keeps with remembered stacks: unique
  // in the process, so a forked child's recorder never takes its parent's ids.
  const std::uint32_t owner_;
  std::uintptr_t own_begin_ = 0;
  std::uintptr_t own_size_ = 0;  // own_end - own_begin: one unsigned compare per frame
  std::atomic<bool> prepared_{false};
  std::atomic<std::size_t> own_room_{kInitialOwnRoom};  // read-mostly: grows a few times at most
  TraceWriter& writer_;
  const bool enabled_;
  FrameNamer namer_;
  // Made on the first capture: a process that never allocates device memory
  // (a shell the program starts) reserves nothing.
  std::once_flag prepare_once_;
  std::unique_ptr<StackTable> table_;
  std::atomic<bool> warned_full_{false};
  // Python: looked for once, at the first capture or when the header asks
  // (detect_python; no lock held while the loader is asked).
  static constexpr int kPythonUnknown = 0;
  static constexpr int kPythonPublishing = 1;
  static constexpr int kPythonKnown = 2;
  const python::SymbolLookup python_symbols_;
  std::atomic<int> python_state_{kPythonUnknown};
  std::unique_ptr<python::PythonFrames> python_owner_;
  std::atomic<python::PythonFrames*> python_{nullptr};
  std::string python_note_;  // written before python_state_ becomes kPythonKnown
};

}  // namespace cumemtrace::preload
