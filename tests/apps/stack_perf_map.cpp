// Allocates through generated code listed in a perf map, the way CPython
// ≥ 3.12 runs Python functions when its perf trampolines are on: each
// Python function gets a small trampoline in anonymous executable memory
// (push rbp; mov rbp,rsp; call the evaluator; pop rbp; ret), and a line
// "START SIZE py::name:file" in /tmp/perf-PID.map, appended as functions are
// first called. cumemtrace must name the trampoline frames from that file,
// including lines appended after it first read it. No Python needed.
//
//   stack_perf_map       prints "<name> PTR" for each allocation
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

#if defined(__x86_64__)
// void trampoline(void (*callee)(void*), void* arg): calls callee(arg) in a
// frame-pointer frame, without unwind tables, like CPython's.
constexpr unsigned char kTrampoline[] = {
    0x55,              // push %rbp
    0x48, 0x89, 0xe5,  // mov  %rsp,%rbp
    0x48, 0x89, 0xf8,  // mov  %rdi,%rax
    0x48, 0x89, 0xf7,  // mov  %rsi,%rdi
    0xff, 0xd0,        // call *%rax
    0x5d,              // pop  %rbp
    0xc3,              // ret
};
constexpr std::size_t kSlot = 64;  // bytes between trampolines
#endif

using Trampoline = void (*)(void (*)(void*), void*);

std::string g_map_path;

void remove_map() {
  if (!g_map_path.empty()) ::unlink(g_map_path.c_str());
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "stack_perf_map: %s\n", what);
  remove_map();
  std::exit(3);
}

// What the "evaluator" does: allocate. Named in the test.
__attribute__((noinline)) void jit_callee(void* out) {
  if (cudaMalloc(static_cast<void**>(out), 4096) != cudaSuccess) fail("cudaMalloc failed");
  std::fflush(stdout);  // not a tail call
}

void list_in_map(std::uintptr_t start, const char* name) {
  std::FILE* map = std::fopen(g_map_path.c_str(), "a");
  if (!map) fail("cannot write the perf map");
  std::fprintf(map, "%lx %zx %s\n", static_cast<unsigned long>(start), kSlot, name);
  std::fclose(map);
}

}  // namespace

int main() {
#if !defined(__x86_64__)
  std::printf("skip: the trampoline is x86-64 code\n");
  return 77;
#else
  g_map_path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::atexit(remove_map);
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) fail("mmap failed");
  auto* code = static_cast<unsigned char*>(page);
  for (int i = 0; i < 3; ++i) std::memcpy(code + i * kSlot, kTrampoline, sizeof kTrampoline);
  if (::mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) fail("mprotect failed");
  const auto base = reinterpret_cast<std::uintptr_t>(page);
  const auto trampoline = [&](int i) { return reinterpret_cast<Trampoline>(base + i * kSlot); };

  void* train = nullptr;
  void* load = nullptr;
  void* unlisted = nullptr;
  list_in_map(base, "py::train_step:/work/train.py");
  trampoline(0)(&jit_callee, &train);
  // Listed only after cumemtrace has read the map once.
  list_in_map(base + kSlot, "py::load_batch:/work/data.py");
  trampoline(1)(&jit_callee, &load);
  trampoline(2)(&jit_callee, &unlisted);  // never listed
  std::printf("train_step %p\nload_batch %p\nunlisted %p\n", train, load, unlisted);
  for (void* p : {train, load, unlisted}) {
    if (cudaFree(p) != cudaSuccess) fail("cudaFree failed");
  }
  return 0;
#endif
}
