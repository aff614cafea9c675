// The marker API of include/cumemtrace/cumemtrace.h, exported by
// libcumemtrace.so (programs declare these functions weak and call them
// only when this library is loaded).
#define CUMEMTRACE_IMPLEMENTATION
#include "cumemtrace/cumemtrace.h"

#include "markers/api.h"

#include "hooks/hook_support.h"
#include "markers/markers.h"

namespace cumemtrace::preload {
namespace {

RangeStack& open_ranges() {
  static thread_local RangeStack ranges;
  return ranges;
}

}  // namespace

void record_mark(std::string_view name) noexcept {
  try {
    recorder().on_mark(format::MarkKind::instant, name);
  } catch (...) {
    // Out of host memory: the mark is lost, the program goes on.
  }
}

int record_range_push(const void* domain, std::string_view name) noexcept {
  try {
    const int level = open_ranges().push(domain, name);
    recorder().on_mark(format::MarkKind::push, name);
    return level;
  } catch (...) {
    return -1;
  }
}

int record_range_pop(const void* domain) noexcept {
  try {
    const auto closed = open_ranges().pop(domain);
    // An unmatched pop is recorded too, unnamed: the program's ranges are
    // unbalanced, which a reader may want to know.
    recorder().on_mark(format::MarkKind::pop, closed ? std::string_view(closed->name) : "");
    return closed ? closed->level : -1;
  } catch (...) {
    return -1;
  }
}

}  // namespace cumemtrace::preload

using namespace cumemtrace::preload;

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))

CUMEMTRACE_EXPORT void cumemtrace_mark(const char* name) { record_mark(name ? name : ""); }

CUMEMTRACE_EXPORT int cumemtrace_range_push(const char* name) {
  return record_range_push(nullptr, name ? name : "");
}

CUMEMTRACE_EXPORT int cumemtrace_range_pop(void) { return record_range_pop(nullptr); }
