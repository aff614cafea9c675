// Stream-ordered allocation (cuMemAllocAsync / cuMemFreeAsync) and memory
// pools. The sim's pools do not cache: an allocation takes capacity when it is
// made and gives it back when the stream reaches the free, which is the
// behaviour of a real pool with a release threshold of 0 after a sync.
#include "drv_graph.h"

namespace sim {
namespace {

CUresult find_pool(CUmemoryPool h, Pool** out) {
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(G().mu);
  Pool* p = reinterpret_cast<Pool*>(h);
  if (!p || !G().pools.count(p)) return CUDA_ERROR_INVALID_VALUE;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult alloc_async(CUdeviceptr* dptr, std::size_t size, Pool* pool, CUstream h, bool pt) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  // On a capturing stream the request becomes an allocation node of the
  // capture's graph ("Stream Capture" in the guide's Graph Memory Nodes
  // section); its memory belongs to the graph, not to the pool.
  if (capture_of(s.get()) || (s->is_legacy && captures_active())) return capture_mem_alloc(s, size, dptr);
  if (!pool) {
    std::lock_guard<std::mutex> lk(G().mu);
    pool = s->ctx->dev->current_pool;
  }
  // A pool's memory lives on its device; the stream only orders the work.
  Context* owner = s->ctx;
  if (pool->dev != s->ctx->dev) owner = pool->dev->primary;
  std::uintptr_t p = 0;
  if (CUresult r = alloc_device(owner, size, AllocKind::Async, pool, &p)) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr dptr, CUstream h, bool pt) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (capture_of(s.get()) || (s->is_legacy && captures_active())) return capture_mem_free(s, dptr);
  CUresult outside = CUDA_SUCCESS;
  if (graph_mem_free_outside(dptr, &s, &outside)) return outside;
  if (CUresult r = mark_free_pending(dptr)) return r;
  // The memory is released when the stream reaches this point, so work
  // queued before the free still sees valid memory.
  Op op;
  op.fn = [dptr] { free_device(dptr, true); };
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult check_pool_props(const CUmemPoolProps* props) {
  if (!props) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  if (!device_at(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace sim

using namespace sim;

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t n, CUstream h) {
  count(Counter::mem_alloc_async);
  return alloc_async(dptr, n, nullptr, h, false);
}
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t n, CUstream h) {
  count(Counter::mem_alloc_async);
  return alloc_async(dptr, n, nullptr, h, true);
}
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t n, CUmemoryPool pool,
                                         CUstream h) {
  count(Counter::mem_alloc_async);
  Pool* p = nullptr;
  if (CUresult r = find_pool(pool, &p)) return r;
  return alloc_async(dptr, n, p, h, false);
}
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t n, CUmemoryPool pool,
                                              CUstream h) {
  count(Counter::mem_alloc_async);
  Pool* p = nullptr;
  if (CUresult r = find_pool(pool, &p)) return r;
  return alloc_async(dptr, n, p, h, true);
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream h) {
  count(Counter::mem_free_async);
  return free_async(dptr, h, false);
}
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h) {
  count(Counter::mem_free_async);
  return free_async(dptr, h, true);
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = reinterpret_cast<CUmemoryPool>(d->default_pool);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(G().mu);
  *pool = reinterpret_cast<CUmemoryPool>(d->current_pool);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  Pool* p = nullptr;
  if (CUresult r = find_pool(pool, &p)) return r;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (p->dev != d) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(G().mu);
  d->current_pool = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  if (CUresult r = check_pool_props(props)) return r;
  auto* p = new Pool;
  p->dev = device_at(props->location.id);
  std::lock_guard<std::mutex> lk(G().mu);
  G().pools.insert(p);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  Pool* p = nullptr;
  if (CUresult r = find_pool(pool, &p)) return r;
  if (p->is_default) return CUDA_ERROR_INVALID_VALUE;  // default pools cannot be destroyed
  std::lock_guard<std::mutex> lk(G().mu);
  // Allocations still outstanding keep working ("the pool is destroyed once
  // they are freed"); the object is retired so they can still point at it.
  if (p->dev->current_pool == p) p->dev->current_pool = p->dev->default_pool;
  G().pools.erase(p);
  G().retired_pools.push_back(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t) {
  Pool* p = nullptr;
  return find_pool(pool, &p);  // nothing is cached, so nothing to trim
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Pool* p = nullptr;
  if (CUresult r = find_pool(pool, &p)) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  auto* u64 = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *u64 = p->release_threshold.load();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *u64 = p->used_current.load();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *u64 = p->used_high.load();
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Pool* p = nullptr;
  if (CUresult r = find_pool(pool, &p)) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return CUDA_SUCCESS;  // accepted; the sim never reuses across streams early
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold.store(*static_cast<cuuint64_t*>(value));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      // "It is illegal to set this attribute to a non-zero value."
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high.store(p->used_current.load());
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
