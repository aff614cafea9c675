// Names for call sites that tell them apart (internal).
//
// Sites allocated through one helper share their innermost frames
// (`device_alloc`, `at::detail::empty_cuda`, a framework's allocator
// wrapper); naming a site by its innermost function alone makes them read
// alike. A label is the innermost function and the first frame, counting
// outwards, that no other site of the set shares with it:
//
//   device_alloc ← load_weights
//   at::detail::_empty_strided_generic<…> ← step (optimizers.py:82)
//
// Shared frames in between (the wrappers) are skipped. Where that still
// leaves two different stacks with one label, the labels of those grow,
// step by step, until they differ: the frames' locations (file:line, or
// module+offset); then every frame where the stack parts from another; then
// full function names; then the caller's tag ("stack 7"). Identical stacks
// get identical labels.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer::detail {

// The label for a site without frames.
inline constexpr std::string_view kNoStackLabel = "(no stack captured)";

// A demangled C++ name as a person scans it: no return type, no parameter
// list, no qualifiers after it, template arguments folded to <…>, no
// "(anonymous namespace)::". "at::Tensor at::detail::empty_cuda<float>(c10::ArrayRef<long>) const"
// -> "at::detail::empty_cuda<…>". Names it cannot parse are returned as they are.
std::string short_function_name(std::string_view name);

// One label per entry of `stacks` (innermost frame first; null or empty: no
// stack), unique among them wherever the stacks differ. `tags`, when given
// (one per stack), is the last resort that makes labels unique ("stack 7").
std::vector<std::string> label_call_sites(const std::vector<const std::vector<OwnedFrame>*>& stacks,
                                          const std::vector<std::string>& tags = {});

// The labels of every call site of an analysis (each allocating stack and
// each OOM's stack), so a site reads the same in every section of a report.
class SiteLabels {
 public:
  explicit SiteLabels(const Analysis& analysis);
  // The site's label; a stack the analysis never saw gets a fallback.
  std::string operator()(std::uint64_t stack) const;

 private:
  std::unordered_map<std::uint64_t, std::string> labels_;
};

}  // namespace cumemtrace::analyzer::detail
