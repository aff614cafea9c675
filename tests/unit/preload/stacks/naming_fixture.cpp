// A library as cuBLAS ships: its own functions not exported, its .symtab
// stripped (linked with -s; see preload_tests.cmake). Only the extern "C"
// functions below are in .dynsym. Emitted in source order
// (-fno-toplevel-reorder), so the hidden function lies just above an export
// that does not hold it: the nearest symbol dladdr can offer.
#include <cstdint>

#define FIXTURE_EXPORT extern "C" __attribute__((visibility("default"), noinline, used))

FIXTURE_EXPORT int naming_fixture_exported(int x) { return x * 3 + 1; }

namespace {
__attribute__((noinline, used)) int hidden_worker(int x) {
  volatile int sum = 0;
  for (int i = 0; i < x; ++i) sum = sum + i * x;
  return sum;
}
}  // namespace

// Where the hidden function starts, for the test to name a frame inside it.
FIXTURE_EXPORT std::uintptr_t naming_fixture_hidden_address() {
  return reinterpret_cast<std::uintptr_t>(&hidden_worker);
}
