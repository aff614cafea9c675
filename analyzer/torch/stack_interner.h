// Stacks of a PyTorch snapshot as cumemtrace `stack` lines, interned by
// content (part of the importer, snapshot_import.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "torch/snapshot_values.h"

namespace cumemtrace::analyzer::snapshot {

using pickle::Type;
using pickle::Value;

// Innermost frames of the snapshot's capture machinery and of the caching
// allocator itself: the counterpart of the frames cumemtrace drops from its
// own stacks, so a stack starts where the program asked for memory.
inline bool is_allocator_frame(std::string_view name) {
  return name.starts_with("torch::unwind::") || name.starts_with("torch::CapturedTraceback::") ||
         name.starts_with("torch::cuda::(anonymous namespace)::gather") ||
         name.starts_with("c10::cuda::CUDACachingAllocator::");
}

// A snapshot's frames are Python's and C++'s alike, {filename, line, name}:
// those of a .py file are Python frames.
inline bool is_python_file(std::string_view file) { return file.ends_with(".py"); }

// Stacks, interned by content: a frame is (name, file, line), a stack the
// list of its frame ids. Snapshots share frame dicts and often whole lists
// through the pickle memo; the list's identity is a cache in front.
class StackInterner {
 public:
  StackInterner(std::string& out, std::size_t max_frames) : out_(out), max_frames_(max_frames) {}

  // The stack id for a `frames` list (0 when empty or not a list), writing
  // its `stack` line the first time.
  std::uint64_t intern(const std::optional<Value>& frames) {
    if (!frames || !frames->is(Type::list)) return 0;
    if (const auto it = by_list_.find(frames->id()); it != by_list_.end()) return it->second;
    std::vector<std::uint32_t> ids;
    bool leading = true;
    for (std::size_t i = 0; i < frames->size() && ids.size() < max_frames_; ++i) {
      const Value frame = frames->item(i);
      Frame f;
      if (auto name = frame.get("name")) {
        if (auto text = name->as_string()) {
          f.name = *text;
          f.has_name = true;
        }
      }
      if (leading && f.has_name && is_allocator_frame(f.name)) continue;
      leading = false;
      if (auto file = frame.get("filename")) f.file = file->as_string().value_or("");
      if (f.file == "??") f.file = {};  // PyTorch's spelling of "unknown"
      f.line = as_u64(frame.get("line")).value_or(0);
      ids.push_back(frame_id(f));
    }
    std::uint64_t id = 0;
    if (!ids.empty()) {
      auto [it, inserted] = stack_ids_.try_emplace(std::move(ids), stack_ids_.size() + 1);
      id = it->second;
      if (inserted) write_stack(id, it->first);
    }
    by_list_.emplace(frames->id(), id);
    return id;
  }
  std::uint64_t count() const { return stack_ids_.size(); }

 private:
  struct Frame {
    std::string_view name;
    bool has_name = false;
    std::string_view file;
    std::uint64_t line = 0;
    bool operator==(const Frame&) const = default;
  };
  struct FrameHash {
    std::size_t operator()(const Frame& f) const {
      const std::hash<std::string_view> h;
      return h(f.name) * 31 + h(f.file) * 7 + std::hash<std::uint64_t>()(f.line) + f.has_name;
    }
  };

  std::uint32_t frame_id(const Frame& f) {
    auto [it, inserted] = frame_ids_.try_emplace(f, static_cast<std::uint32_t>(frames_.size()));
    if (inserted) frames_.push_back(f);
    return it->second;
  }

  void write_stack(std::uint64_t id, const std::vector<std::uint32_t>& ids) {
    Json line;
    line["ev"] = "stack";
    line["id"] = id;
    Json list = Json::array();
    for (std::uint32_t fid : ids) {
      const Frame& f = frames_[fid];
      Json frame;
      if (is_python_file(f.file)) {  // a Python frame as TRACE_FORMAT.md writes one
        frame["py"] = true;
        frame["fn"] = f.has_name ? Json(std::string(f.name)) : Json(nullptr);
        frame["file"] = std::string(f.file);
        frame["line"] = f.line > 0 ? Json(f.line) : Json(nullptr);
        list.push_back(std::move(frame));
        continue;
      }
      frame["ip"] = "0x0";  // a snapshot keeps names, not addresses
      frame["fn"] = f.has_name ? Json(std::string(f.name)) : Json(nullptr);
      if (!f.file.empty()) frame["file"] = std::string(f.file);
      if (f.line > 0) frame["line"] = f.line;
      list.push_back(std::move(frame));
    }
    line["frames"] = std::move(list);
    emit(line, out_);
  }

  std::string& out_;
  std::size_t max_frames_;
  std::unordered_map<Frame, std::uint32_t, FrameHash> frame_ids_;
  std::vector<Frame> frames_;
  std::map<std::vector<std::uint32_t>, std::uint64_t> stack_ids_;
  std::unordered_map<std::uint32_t, std::uint64_t> by_list_;
};

}  // namespace cumemtrace::analyzer::snapshot
