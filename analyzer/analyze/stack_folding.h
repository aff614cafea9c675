// Stacks as a person reads them (internal): the user's frames, with the
// runs of framework and interpreter frames between them folded.
//
// A PyTorch allocation's stack is dozens of at::/c10:: dispatch templates,
// each hundreds of characters long, then CPython's evaluation loop, then
// the program's own Python lines, which a report that shows the innermost
// eight frames never reaches. Here every frame gets an owner: the user's
// (Python frames, and native code outside the frameworks), or a framework
// (libtorch, CPython, libffi, CUDA, the C++ and C libraries). A run of two
// or more framework frames becomes one line ("… 7 frames in libtorch,
// CPython"); the innermost frame always shows, as it is what asked for the
// memory. `report --full-stacks` prints every frame as recorded instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer::detail {

enum class FrameOwner : std::uint8_t { user, libtorch, cpython, libffi, cuda, cxx_library, libc };

// "libtorch", "CPython", …; "" for user.
std::string_view owner_name(FrameOwner owner);

// Whose code a frame is, from its object file where the trace has one, else
// from its function's name (imported PyTorch snapshots name no object file).
// Python frames are always the user's.
FrameOwner frame_owner(bool py, std::string_view fn, std::string_view module);
FrameOwner frame_owner(const OwnedFrame& frame);

// One line of a folded stack: a frame (`count` 1, `folded` false) or a run
// of `count` framework frames starting at `first`, with their owners in
// the order they first appear.
struct StackLine {
  std::size_t first = 0;
  std::size_t count = 1;
  bool folded = false;
  std::vector<FrameOwner> owners;
};

// The lines of a stack whose frames have these owners, innermost first.
std::vector<StackLine> fold_stack(const std::vector<FrameOwner>& owners);

// "… 7 frames in libtorch, CPython".
std::string folded_text(const StackLine& line);

// A frame's name as a folded stack shows it: names longer than
// kLongName characters as short_function_name() gives them (no return
// type, parameters or template arguments), shorter ones as recorded.
inline constexpr std::size_t kLongName = 100;
std::string readable_function_name(std::string_view name);

}  // namespace cumemtrace::analyzer::detail
