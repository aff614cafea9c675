#include "analyzer_test_support.h"

#include <string>

namespace cumemtrace::analyzer::testing {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

std::string header_line(int version) {
  return R"({"ev":"header","format":"cumemtrace","version":)" + std::to_string(version) +
         R"(,"pid":4242,"ppid":4100,"host":"node7","exe":"/usr/bin/python3","argv":["python3","train.py"],)"
         R"("start_unix_ns":1763740000123456789,"pool":"caching","config":{"max_split_size":null,"stacks":32}})";
}

std::string alloc_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev, int stack) {
  return R"({"ev":"alloc","t":)" + std::to_string(t) + R"(,"tid":7,"api":"cudaMalloc","kind":"device","dev":)" +
         std::to_string(dev) + R"(,"ptr":")" + ptr + R"(","size":)" + std::to_string(size) +
         R"(,"stack":)" + std::to_string(stack) + "}";
}

std::string free_line(std::uint64_t t, const char* ptr, std::uint64_t size, int dev) {
  return R"({"ev":"free","t":)" + std::to_string(t) + R"(,"tid":7,"api":"cudaFree","kind":"device","dev":)" +
         std::to_string(dev) + R"(,"ptr":")" + ptr + R"(","size":)" + std::to_string(size) + R"(,"stack":0})";
}

std::string end_line(std::uint64_t t) {
  return R"({"ev":"end","t":)" + std::to_string(t) + R"(,"reason":"exit","live":0,"live_bytes":0,"dropped":0})";
}

std::string cli_path() { return CUMEMTRACE_CLI; }

CommandResult cli(std::vector<std::string> args, EnvChanges env) {
  args.insert(args.begin(), cli_path());
  return run_command(args, env);
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string empty_preload(int which) { return which == 1 ? CUMEMTRACE_TEST_PRELOAD1 : CUMEMTRACE_TEST_PRELOAD2; }

}  // namespace cumemtrace::analyzer::testing
