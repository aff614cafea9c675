// The real CUDA functions behind our hooks, found at run time: the preload
// has no NEEDED entry on libcudart or libcuda (DESIGN.md), so a program that
// never uses CUDA starts as if cumemtrace were absent.
//
// Two kinds of real function:
//  - behind an exported hook (a program linked to libcudart/libcuda binds
//    to ours): the next definition after libcumemtrace.so, found lazily;
//  - behind a wrapper handed out by cuGetProcAddress or dlsym: exactly the
//    pointer the real lookup returned for that name/version/flags, kept in a
//    small table of slots per intercepted ABI (RealSlots, Wrapped below).
#pragma once

#include "hooks/step_aside.h"
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "record/recorder.h"

namespace cumemtrace::preload {

// glibc's dlsym, never ours (libcumemtrace.so exports a dlsym hook).
using DlsymFn = void* (*)(void* handle, const char* name);
DlsymFn real_dlsym();

// The definition of `name` the hooked program would have reached without
// us: the next one after libcumemtrace.so in the global scope (RTLD_NEXT),
// else the first loaded object that defines it. The second covers libraries
// loaded with RTLD_LOCAL (Python extension modules bringing libcudart, the
// runtime's own dlopen of libcuda.so.1), which RTLD_NEXT cannot see. NULL
// if no loaded object defines it.
void* find_real_symbol(const char* name);

// `name` from the same library as the function at `fn` (e.g. cudaGetDevice
// next to the cudaDeviceReset the program called); NULL if it has none.
void* sibling_symbol(const void* fn, const char* name);

// Whether `p` points into libcumemtrace.so itself.
bool inside_cumemtrace(const void* p);

// The real function behind an exported hook, resolved on first use (and
// again while not found: the library may be loaded later).
template <typename Fn>
class NextSymbol {
 public:
  explicit constexpr NextSymbol(const char* name) : name_(name) {}
  Fn get() {
    Fn fn = fn_.load(std::memory_order_acquire);
    return fn ? fn : resolve();
  }

 private:
  Fn resolve() {
    Fn fn = reinterpret_cast<Fn>(find_real_symbol(name_));
    if (fn) fn_.store(fn, std::memory_order_release);
    return fn;
  }
  const char* const name_;
  std::atomic<Fn> fn_{nullptr};
};

// Distinct real implementations of one ABI that one process can meet (one
// libcuda is the rule; a second copy loaded privately is the exception).
inline constexpr std::size_t kRealSlots = 4;

template <typename Fn>
class RealSlots {
 public:
  // The slot holding `real`, claiming a free one; -1 when all are taken.
  int claim(Fn real) {
    for (std::size_t i = 0; i < kRealSlots; ++i) {
      Fn current = slots_[i].load(std::memory_order_acquire);
      if (current == nullptr &&
          slots_[i].compare_exchange_strong(current, real, std::memory_order_acq_rel)) {
        return static_cast<int>(i);
      }
      if (current == real) return static_cast<int>(i);
    }
    return -1;
  }
  Fn get(std::size_t i) const { return slots_[i].load(std::memory_order_acquire); }

 private:
  std::array<std::atomic<Fn>, kRealSlots> slots_{};
};

// For a hook body `R Body(Real real, A... args)` (Real = R(*)(A...)), the
// wrappers handed out instead of a real pointer: entry<I> calls Body with
// the real function of slot I. `wrap(real)` returns the wrapper bound to
// `real`, or `real` itself when every slot is taken (it is then not traced;
// wrap_failed is told so it can warn once).
void wrap_failed(const char* what);

template <typename Body>
struct BodyTraits;
template <typename R, typename... A>
struct BodyTraits<R (*)(R (*)(A...), A...)> {
  using Real = R (*)(A...);
};

template <auto Body, typename Real = typename BodyTraits<decltype(Body)>::Real>
struct Wrapped;

template <auto Body, typename R, typename... A>
struct Wrapped<Body, R (*)(A...)> {
  using Real = R (*)(A...);
  static inline RealSlots<Real> slots;

  template <std::size_t I>
  static R entry(A... args) {
    note_hook_caller(__builtin_return_address(0));
    return Body(slots.get(I), args...);
  }

  template <std::size_t... I>
  static constexpr std::array<Real, kRealSlots> make_entries(std::index_sequence<I...>) {
    return {&entry<I>...};
  }
  static constexpr std::array<Real, kRealSlots> kEntries =
      make_entries(std::make_index_sequence<kRealSlots>{});

  static void* wrap(void* real) {
    const int i = slots.claim(reinterpret_cast<Real>(real));
    if (i < 0) {
      wrap_failed("too many distinct implementations of one CUDA function");
      return real;
    }
    return reinterpret_cast<void*>(kEntries[static_cast<std::size_t>(i)]);
  }
};

template <auto Body>
void* wrap_with(void* real) {
  return Wrapped<Body>::wrap(real);
}

// The device of the calling thread's current context (the one the runtime
// or driver just allocated in), from the driver; 0 if it cannot say.
int current_device();
// The device `ptr` is on (cuPointerGetAttribute); the current one if the
// driver cannot say. Costlier than current_device(): for pool memory only.
int device_of_pointer(std::uintptr_t ptr);

// Name and memory size of a device, from the driver the runtime has loaded.
bool query_device_from_driver(int ordinal, DeviceDescription& out);

}  // namespace cumemtrace::preload
