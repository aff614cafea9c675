// Device address space and physical pages: a best-fit range allocator, and
// per reservation the whole-page and shared-page allocations of the page
// model described in drv_internal.h.
#include <sys/mman.h>

#include <cstdio>

#include "drv_internal.h"

namespace sim {

namespace {
constexpr std::size_t kHostPage = 4096;

// Gives the RAM behind a freed range back to the kernel, so a long test that
// churns big buffers does not keep them resident (the range stays reserved).
void discard(std::uintptr_t p, std::size_t n) {
  std::uintptr_t a = (p + kHostPage - 1) & ~(kHostPage - 1);
  std::uintptr_t b = (p + n) & ~(kHostPage - 1);
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}
}  // namespace

// ---- RangeAllocator ----------------------------------------------------------

void RangeAllocator::insert_free(std::uintptr_t p, std::size_t n) {
  by_addr_.emplace(p, n);
  by_size_.emplace(n, p);
}

void RangeAllocator::erase_free(std::map<std::uintptr_t, std::size_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_addr_.erase(it);
}

std::uintptr_t RangeAllocator::alloc(std::size_t size) {
  if (size == 0) return 0;
  // Best fit; among equal sizes the lowest address, so layouts are stable.
  auto it = by_size_.lower_bound({size, 0});
  if (it == by_size_.end()) return 0;
  std::uintptr_t p = it->second;
  std::size_t n = it->first;
  erase_free(by_addr_.find(p));
  if (n > size) insert_free(p + size, n - size);
  return p;
}

void RangeAllocator::release(std::uintptr_t p, std::size_t size, std::size_t boundary) {
  std::uintptr_t start = p;
  std::size_t n = size;
  auto next = by_addr_.lower_bound(p);
  if (next != by_addr_.begin() && (boundary == 0 || p % boundary != 0)) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      n += prev->second;
      erase_free(prev);
    }
  }
  next = by_addr_.lower_bound(p);
  if (next != by_addr_.end() && next->first == p + size &&
      (boundary == 0 || (p + size) % boundary != 0)) {
    n += next->second;
    erase_free(next);
  }
  insert_free(start, n);
}

void RangeAllocator::remove_within(std::uintptr_t p, std::size_t size) {
  for (auto it = by_addr_.lower_bound(p); it != by_addr_.end() && it->first < p + size;) {
    auto next = std::next(it);
    erase_free(it);
    it = next;
  }
}

// ---- DeviceSpace -------------------------------------------------------------

bool DeviceSpace::init(std::size_t size) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  size = (size + kPageSize - 1) / kPageSize * kPageSize;
  // One page more, so that the space can start on a page boundary: large
  // allocations are page-aligned, as on the real driver.
  void* p = mmap(nullptr, size + kPageSize, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return false;
  base_ = (reinterpret_cast<std::uintptr_t>(p) + kPageSize - 1) & ~(kPageSize - 1);
  size_ = size;
  pages_.release(base_, size_);
  return true;
}

std::uintptr_t DeviceSpace::alloc(std::size_t size, std::size_t free_pages, std::size_t* pages_taken) {
  if (size == 0 || size > size_) return 0;
  if (std::size_t own = own_pages(size)) {
    if (own > free_pages) return 0;
    std::uintptr_t p = pages_.alloc(own * kPageSize);
    if (p) *pages_taken += own;
    return p;
  }
  // A small allocation goes into the best-fitting hole of a page already
  // shared; only when none has room does it open a new page.
  std::uintptr_t p = shared_.alloc(size);
  if (!p) {
    if (free_pages == 0) return 0;
    std::uintptr_t page = pages_.alloc(kPageSize);
    if (!page) return 0;
    *pages_taken += 1;
    shared_.release(page, kPageSize, kPageSize);
    p = shared_.alloc(size);
  }
  shared_used_[p & ~(kPageSize - 1)] += size;
  return p;
}

std::size_t DeviceSpace::release(std::uintptr_t p, std::size_t size, bool keep_hole) {
  if (std::size_t own = own_pages(size)) {
    pages_.release(p, own * kPageSize);
    discard(p, own * kPageSize);
    return own;
  }
  const std::uintptr_t page = p & ~(kPageSize - 1);
  if (!keep_hole) shared_.release(p, size, kPageSize);
  auto it = shared_used_.find(page);
  if ((it->second -= size) != 0) return 0;
  // The last allocation of the page is gone: the page is free again (with
  // every hole in it, kept ones included).
  shared_used_.erase(it);
  shared_.remove_within(page, kPageSize);
  pages_.release(page, kPageSize);
  // Its RAM is kept: small allocations never hold much, and a program that
  // allocates and frees one small buffer in a loop empties and reopens the
  // same page every time; a madvise per cudaFree would make the sim's own
  // cost dominate what scripts/bench.sh measures (1,385 ns per bare pair
  // with it, against 461 ns before the page model).
  return 1;
}

}  // namespace sim
