// Small pieces of reading a PyTorch snapshot, shared by the importer's
// parts (snapshot_import.cpp, stack_interner.h): the actions of
// `device_traces` entries, integers and plain values out of pickled ones, and
// writing one trace line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "torch/pickle_reader.h"

namespace cumemtrace::analyzer::snapshot {

using Json = nlohmann::ordered_json;

// What a `device_traces` entry's `action` says PyTorch's allocator did.
enum class Action {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  snapshot,
  oom,
};

std::optional<Action> parse_action(std::string_view s);

// A non-negative integer, or nullopt.
std::optional<std::uint64_t> as_u64(const std::optional<pickle::Value>& v);

// allocator_settings and the like, for the header's config: any plain value,
// with depth and size bounded so a hostile document cannot blow up (memo
// references can make a small pickle describe an exponentially large tree).
Json to_json(const pickle::Value& v, int depth, std::size_t& budget);

// Appends `line` and a newline to `out`, as valid UTF-8.
void emit(const Json& line, std::string& out);

}  // namespace cumemtrace::analyzer::snapshot
