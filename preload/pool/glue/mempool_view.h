// What a program reads about stream-ordered memory from the device's memory
// pool (cudaMemPoolGetAttribute / cuMemPoolGetAttribute of the device's
// current pool: used and reserved, current and high) stays what it reads
// bare, when the caching pool serves its cudaMallocAsync (issue 30, item 4).
// PyTorch's backend:cudaMallocAsync takes memory_allocated() and
// memory_reserved() from exactly these attributes.
//
// Bare, the driver's pool counts each live allocation at its size rounded up
// to 512 bytes (USED_MEM_CURRENT: measured on an H100, driver 580, by
// scripts/gpu-check.sh's torch.async.passthrough, tolerance 0). Under the
// pool, the driver's figures count instead the segments the pool took from
// that driver pool (Upstream::allocate_stream_ordered, cuMemAllocAsync) and
// nothing of what it serves from its own ranges. So the view is: the
// driver's figure, less the pool's segments in it, plus what the program
// holds through the pool (used: its allocations, each rounded to 512 bytes;
// reserved: the memory the pool holds for stream-ordered requests, never
// less than used). Highs: the driver's high less the pool's segments' high,
// plus the high of the program's part since the last reset (a program
// resets a high by setting it to 0); exact when all stream-ordered memory
// goes through the pool or none does, an upper bound when both happen.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cumemtrace::preload {

// The hooks' side: a stream-ordered allocation the pool served, or its free.
void note_pooled_stream_alloc(int dev, std::size_t size) noexcept;
void note_pooled_stream_free(int dev, std::size_t size) noexcept;

// DriverUpstream's side: its segments taken from (or given back to) the
// driver's pool of `dev` (cuMemAllocAsync / cuMemFreeAsync).
void note_driver_pool_segment(int dev, std::ptrdiff_t bytes) noexcept;

// The attribute `attr` (a CUmemPool_attribute) of the driver pool `pool`
// (a CUmemoryPool) read as `*value`: adjusted when it is a device's current
// pool and the caching pool serves that device.
void adjust_mempool_attribute(void* pool, int attr, void* value) noexcept;
// The program set `attr` of `pool` (a high reset to 0).
void note_mempool_attribute_set(void* pool, int attr) noexcept;

}  // namespace cumemtrace::preload
