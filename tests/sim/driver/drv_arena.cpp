// The per-device sub-allocator: one virtual reservation, an address-ordered
// free map for coalescing and a (size, address) set for best fit.
#include <sys/mman.h>

#include <cstdio>

#include "drv_internal.h"

namespace sim {

namespace {
// Freed ranges at least this large give their RAM back to the kernel, so a
// long test that churns big buffers does not keep them resident.
constexpr std::size_t kReleaseThreshold = std::size_t{1} << 20;
constexpr std::size_t kPage = 4096;
}  // namespace

bool Arena::init(std::size_t size, bool low_32bit) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_32BIT
  if (low_32bit) flags |= MAP_32BIT;
#else
  if (low_32bit) return false;
#endif
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "simcuda: cannot reserve %zu bytes of address space for a device\n",
                 size);
    return false;
  }
  base_ = reinterpret_cast<std::uintptr_t>(p);
  size_ = size;
  insert_free(base_, size_);
  return true;
}

void Arena::insert_free(std::uintptr_t p, std::size_t n) {
  by_addr_.emplace(p, n);
  by_size_.emplace(n, p);
}

void Arena::erase_free(std::map<std::uintptr_t, std::size_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_addr_.erase(it);
}

std::uintptr_t Arena::alloc(std::size_t size) {
  if (size == 0 || size > size_) return 0;
  // Best fit; among equal sizes the lowest address, so layouts are stable.
  auto it = by_size_.lower_bound({size, 0});
  if (it == by_size_.end()) return 0;
  std::uintptr_t p = it->second;
  std::size_t n = it->first;
  erase_free(by_addr_.find(p));
  if (n > size) insert_free(p + size, n - size);
  return p;
}

void Arena::release(std::uintptr_t p, std::size_t size) {
  std::uintptr_t start = p;
  std::size_t n = size;
  auto next = by_addr_.lower_bound(p);
  if (next != by_addr_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      n += prev->second;
      erase_free(prev);
    }
  }
  next = by_addr_.lower_bound(p);
  if (next != by_addr_.end() && next->first == p + size) {
    n += next->second;
    erase_free(next);
  }
  insert_free(start, n);
  if (size >= kReleaseThreshold) {
    std::uintptr_t a = (p + kPage - 1) & ~(kPage - 1);
    std::uintptr_t b = (p + size) & ~(kPage - 1);
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  }
}

}  // namespace sim
