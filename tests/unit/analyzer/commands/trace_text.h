// Hand-written traces for the replay and advice tests, built line by line
// with a running clock, written to a file and loaded for replay.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "analyzer_test_support.h"
#include "commands/replay.h"

namespace cumemtrace::analyzer::testing {

inline std::string hex(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

class TraceText {
 public:
  // `header`: the first line; header_line() (python3 train.py, caching pool)
  // by default.
  explicit TraceText(std::string header = header_line()) { lines_.push_back(std::move(header)); }
  TraceText& device(int dev, std::uint64_t total) {
    lines_.push_back(R"({"ev":"device","t":)" + tick() + R"(,"dev":)" + std::to_string(dev) +
                     R"(,"name":"sim","total":)" + std::to_string(total) + "}");
    return *this;
  }
  // A stack of one native frame in `module`.
  TraceText& stack(std::uint64_t id, const std::string& module) {
    lines_.push_back(R"({"ev":"stack","t":)" + tick() + R"(,"id":)" + std::to_string(id) +
                     R"(,"frames":[{"ip":"0x1000","fn":"f","module":")" + module + R"(","off":"0x10"}]})");
    return *this;
  }
  TraceText& alloc(std::uint64_t ptr, std::uint64_t size, int dev = 0, std::optional<std::uint64_t> stream = {},
                   const char* kind = "device", std::uint64_t stack = 0) {
    lines_.push_back(op("alloc", ptr, size, dev, stream, kind, stack));
    return *this;
  }
  TraceText& free(std::uint64_t ptr, std::uint64_t size, int dev = 0, std::optional<std::uint64_t> stream = {},
                  const char* kind = "device") {
    lines_.push_back(op("free", ptr, size, dev, stream, kind, 0));
    return *this;
  }
  TraceText& segment(std::uint64_t ptr, std::uint64_t size) {
    lines_.push_back(R"({"ev":"segment_alloc","t":)" + tick() + R"(,"dev":0,"ptr":")" + hex(ptr) +
                     R"(","size":)" + std::to_string(size) + R"(,"api":"cudaMalloc"})");
    return *this;
  }
  // A request the run could not serve, with the figures the preload writes.
  TraceText& oom(std::uint64_t size, std::uint64_t reserved, std::uint64_t device_free, int dev = 0) {
    lines_.push_back(R"({"ev":"oom","t":)" + tick() + R"(,"tid":1,"api":"cudaMalloc","dev":)" + std::to_string(dev) +
                     R"(,"size":)" + std::to_string(size) + R"(,"block":)" + std::to_string(size) +
                     R"(,"allocated":0,"reserved":)" + std::to_string(reserved) +
                     R"(,"cached_free":0,"largest_free":0,"device_free":)" + std::to_string(device_free) +
                     R"(,"device_total":0,"cause":"capacity","stack":0})");
    return *this;
  }
  TraceText& mark(const std::string& name, const char* kind = "instant") {
    lines_.push_back(R"({"ev":"mark","t":)" + tick() + R"(,"tid":1,"name":")" + name + R"(","kind":")" + kind + R"("})");
    return *this;
  }
  // A CUDA graph launch: an instant mark that names its executable graph.
  TraceText& launch(std::uint64_t exec) {
    lines_.push_back(R"({"ev":"mark","t":)" + tick() + R"(,"tid":1,"name":"cuGraphLaunch","kind":"instant","exec":")" +
                     hex(exec) + R"("})");
    return *this;
  }
  std::string text() const { return join_lines(lines_) + end_line(t_ + 1) + "\n"; }
  // Writes the trace and loads it for replay.
  ReplayTrace load(const TempDir& dir, const std::string& name = "t.jsonl") const {
    write_file(dir / name, text());
    return load_replay_trace(dir / name);
  }

 private:
  std::string tick() { return std::to_string(++t_); }
  std::string op(const char* ev, std::uint64_t ptr, std::uint64_t size, int dev, std::optional<std::uint64_t> stream,
                 const char* kind, std::uint64_t stack) {
    std::string line = R"({"ev":")" + std::string(ev) + R"(","t":)" + tick() +
                       R"(,"tid":1,"api":"x","kind":")" + kind + R"(","dev":)" + std::to_string(dev) +
                       R"(,"ptr":")" + hex(ptr) + R"(","size":)" + std::to_string(size) + R"(,"stack":)" +
                       std::to_string(stack);
    if (stream) line += R"(,"stream":")" + hex(*stream) + R"(")";
    return line + "}";
  }
  std::vector<std::string> lines_;
  std::uint64_t t_ = 0;
};

}  // namespace cumemtrace::analyzer::testing
