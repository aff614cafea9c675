// What a route program did, written by the program itself, one JSON object
// per line: the integration test (tests/integration/routes_test.cpp) checks
// the trace against it event by event. Header-only plain C++, so the route
// programs stay ordinary CUDA programs.
//
//   {"ev":"alloc","api":"cudaMalloc","kind":"device","dev":0,"ptr":"0x…","size":1000}
//   {"ev":"free", …same fields…}          (size: that of the alloc)
//   {"ev":"error","api":"cudaFree","ptr":"0x…","what":"double_free"}
//   {"ev":"map","dev":0,"ptr":"0x…","size":…}   / "unmap"   (VMM mappings)
//   {"ev":"resolve","name":"cuMemAlloc","module":"libcumemtrace.so"}
//
// Optional on alloc/free: "stream":"0x…", "tid":N.
#pragma once

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace route {

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
inline long thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

// Exits with a message: a route program checks what the CUDA calls return.
[[noreturn]] inline void fail(const char* what, long got) {
  std::fprintf(stderr, "route program: %s (got %ld)\n", what, got);
  std::exit(3);
}
inline void check(bool ok, const char* what, long got = 0) {
  if (!ok) fail(what, got);
}

class Manifest {
 public:
  explicit Manifest(const char* path) : out_(std::fopen(path, "w")) {
    if (!out_) fail("cannot open the manifest", 0);
  }
  ~Manifest() { std::fclose(out_); }
  Manifest(const Manifest&) = delete;
  Manifest& operator=(const Manifest&) = delete;

  void alloc(const char* api, const char* kind, int dev, std::uintptr_t ptr, std::size_t size,
             std::optional<std::uintptr_t> stream = std::nullopt, long tid = 0) {
    memory("alloc", api, kind, dev, ptr, size, stream, tid);
  }
  void free(const char* api, const char* kind, int dev, std::uintptr_t ptr, std::size_t size,
            std::optional<std::uintptr_t> stream = std::nullopt, long tid = 0) {
    memory("free", api, kind, dev, ptr, size, stream, tid);
  }
  void error(const char* api, std::uintptr_t ptr, const char* what) {
    std::fprintf(out_, "{\"ev\":\"error\",\"api\":\"%s\",\"ptr\":\"0x%" PRIxPTR "\",\"what\":\"%s\"}\n",
                 api, ptr, what);
  }
  void map(int dev, std::uintptr_t ptr, std::size_t size) { range("map", dev, ptr, size); }
  void unmap(int dev, std::uintptr_t ptr, std::size_t size) { range("unmap", dev, ptr, size); }

  // Which library a function pointer the program was handed lives in.
  void resolve(const char* name, const void* fn) {
    Dl_info info{};
    const char* module = "none";
    if (fn && dladdr(fn, &info) && info.dli_fname) {
      const char* slash = std::strrchr(info.dli_fname, '/');
      module = slash ? slash + 1 : info.dli_fname;
    }
    std::fprintf(out_, "{\"ev\":\"resolve\",\"name\":\"%s\",\"module\":\"%s\"}\n", name, module);
  }

 private:
  void memory(const char* ev, const char* api, const char* kind, int dev, std::uintptr_t ptr,
              std::size_t size, std::optional<std::uintptr_t> stream, long tid) {
    std::fprintf(out_,
                 "{\"ev\":\"%s\",\"api\":\"%s\",\"kind\":\"%s\",\"dev\":%d,\"ptr\":\"0x%" PRIxPTR
                 "\",\"size\":%zu",
                 ev, api, kind, dev, ptr, size);
    if (stream) std::fprintf(out_, ",\"stream\":\"0x%" PRIxPTR "\"", *stream);
    if (tid) std::fprintf(out_, ",\"tid\":%ld", tid);
    std::fputs("}\n", out_);
  }
  void range(const char* ev, int dev, std::uintptr_t ptr, std::size_t size) {
    std::fprintf(out_, "{\"ev\":\"%s\",\"dev\":%d,\"ptr\":\"0x%" PRIxPTR "\",\"size\":%zu}\n", ev, dev,
                 ptr, size);
  }

  std::FILE* out_;
};

}  // namespace route
