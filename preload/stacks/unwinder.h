// Native call-stack capture for libcumemtrace.so.
//
// By default our CFI walker (frame_walker.h) walks, and hands what it cannot
// walk to libunwind; CUMEMTRACE_UNWINDER=libunwind uses libunwind alone.
// libunwind's unw_backtrace walks a stack in a few hundred nanoseconds (it
// caches each frame's unwind rule), against several microseconds for libgcc's
// _Unwind_Backtrace, which looks up and interprets DWARF for every frame.
//
// libunwind is opened at run time with RTLD_LOCAL instead of being linked:
// Debian's libunwind.a is not position-independent, so it cannot go into a
// shared object, and a NEEDED entry would put libunwind.so.8 in the process's
// global symbol scope, where its _Unwind_RaiseException & co. and its weak
// `backtrace` would take the place of libgcc's and glibc's for every library
// loaded later (C++ exceptions of a Python extension would then unwind
// through libunwind). Loaded locally, nothing but our own calls reach it.
// Without libunwind, capture falls back to the statically linked libgcc
// unwinder: slower, same stacks.
#pragma once

#include "options/config.h"
#include "stacks/stack_recorder.h"

namespace cumemtrace::preload {

// Capture and symbol lookup for the preload. Frames inside libcumemtrace.so
// itself (the hook, the recorder, the capture) are left out of every stack.
// `cfi`: stacks/frame_walker.h walks, libunwind takes what it cannot.
// `python`: automatic merges Python frames into stacks (python_frames.h).
StackPlatform native_stack_platform(contract::Config::Unwinder unwinder, contract::Config::Python python);

}  // namespace cumemtrace::preload
