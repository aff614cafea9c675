// cuMemcpy* and cuMemset*. Device-side pointers are validated against live
// allocations (an out-of-range or freed pointer is CUDA_ERROR_INVALID_VALUE);
// the work runs on the stream's worker, synchronous calls wait for it.
//
// Pageable host memory follows the CUDA Runtime API's "API synchronization
// behavior": an async copy from pageable memory is staged before the call
// returns, and an async copy to pageable memory completes before it returns.
//
// Device faults. An operation is checked when it is queued, and again when
// it runs (on_device below): memory given back in between (unmapped with
// cuMemUnmap, its access revoked with cuMemSetAccess, freed, its pinned host
// memory freed) is not touched, as the host would crash on a range that is
// no longer mapped; the device raises a fault instead, CUDA_ERROR_ILLEGAL_ADDRESS
// ("While executing a kernel, the device encountered a load or store
// instruction on an invalid memory address", cuda.h), which the context keeps
// (current_ctx, drv_state.cpp). The check and the touch hold remap_lock()
// shared, so no unmap, access change or IPC remap comes between them.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "drv_graph.h"

namespace sim {
namespace {

enum class Side { Host, Device, Any };

struct Ptr {
  std::uintptr_t p;
  Side side;
};

// Whether `p` lies in memory the host may only touch through the stream
// (device, managed, VMM or pinned) rather than pageable memory.
bool is_sim_memory(std::uintptr_t p, std::size_t n, bool* pinned_host) {
  PtrInfo i = lookup_range(p, n ? n : 1);
  *pinned_host = i.found && i.host;
  return i.found;
}

CUresult check_device_side(std::uintptr_t p, std::size_t n) {
  PtrInfo i = lookup_range(p, n);
  // With unified addressing, mapped pinned host memory is also device-visible.
  return i.found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The device-side ranges an operation touches, checked again when it runs.
struct Touches {
  struct Range {
    std::uintptr_t p;
    std::size_t n;
    bool write;
  };
  Range ranges[2] = {};
  int count = 0;
  void add(std::uintptr_t p, std::size_t n, bool write) { ranges[count++] = {p, n, write}; }
  // Whether the device may still touch them all: live allocations, pinned
  // or registered host memory, VMM mappings with access (written ones with
  // write access). Caller holds remap_lock() shared.
  bool accessible() const {
    for (int k = 0; k < count; ++k) {
      const PtrInfo i = lookup_range(ranges[k].p, ranges[k].n);
      if (!i.found || (ranges[k].write && i.read_only)) return false;
    }
    return true;
  }
};

// SIMCUDA_FAULT_LOG=1: each device fault names the range the operation
// touched and what is at its start now, on stderr (off by default: tests
// compare the program's stderr). A GPU's fault names no address to the
// program either; this is for whoever debugs a pool that gave memory back
// too early.
void log_fault(const Touches& touches) {
  static const bool enabled = [] {
    const char* v = std::getenv("SIMCUDA_FAULT_LOG");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  if (!enabled) return;
  for (int k = 0; k < touches.count; ++k) {
    const auto& r = touches.ranges[k];
    const PtrInfo i = lookup_range(r.p, 0);
    std::fprintf(stderr,
                 "simcuda: device fault: %s [0x%zx, +%zu) on the device; at its start: %s (base 0x%zx, %zu bytes, "
                 "range 0x%zx +%zu, vmm %d)\n",
                 r.write ? "writes" : "reads", static_cast<std::size_t>(r.p), r.n,
                 i.found ? "an allocation" : "nothing accessible", static_cast<std::size_t>(i.base), i.size,
                 static_cast<std::size_t>(i.range_base), i.range_size, i.vmm ? 1 : 0);
  }
}

// The work of an operation of ctx's stream: `touch` runs only if the memory
// is still accessible when the operation runs; otherwise it is a device
// fault of ctx (see the top of the file). One lookup per range per operation.
template <typename F>
std::function<void()> on_device(Context* ctx, const Touches& touches, F touch) {
  return [ctx, touches, touch] {
    std::shared_lock<std::shared_mutex> lk(remap_lock());
    if (touches.accessible()) {
      touch();
    } else {
      log_fault(touches);
      raise_device_fault(ctx);
    }
  };
}
CUresult copy(Ptr dst, Ptr src, std::size_t n, CUstream h, bool async, bool pt) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst.p == 0 || src.p == 0) return CUDA_ERROR_INVALID_VALUE;
  if (dst.side == Side::Device) {
    if (CUresult r = check_device_side(dst.p, n)) return r;
  }
  if (src.side == Side::Device) {
    if (CUresult r = check_device_side(src.p, n)) return r;
  }
  bool dst_pinned = false, src_pinned = false;
  bool dst_sim = dst.side == Side::Device || is_sim_memory(dst.p, n, &dst_pinned);
  bool src_sim = src.side == Side::Device || is_sim_memory(src.p, n, &src_pinned);
  void* d = reinterpret_cast<void*>(dst.p);
  const void* sp = reinterpret_cast<const void*>(src.p);
  Touches touches;
  if (dst_sim) touches.add(dst.p, n, true);
  if (src_sim) touches.add(src.p, n, false);
  if (!async || !dst_sim) {
    // Synchronous, or asynchronous into pageable memory: done on return.
    return run_sync(s, on_device(s->ctx, touches, [d, sp, n] { std::memmove(d, sp, n); }), true);
  }
  Op op;
  op.pays_latency = true;
  if (!src_sim) {
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(sp), static_cast<const unsigned char*>(sp) + n);
    op.fn = on_device(s->ctx, touches, [d, staged] { std::memcpy(d, staged->data(), staged->size()); });
  } else {
    op.fn = on_device(s->ctx, touches, [d, sp, n] { std::memmove(d, sp, n); });
  }
  return submit(s, std::move(op), NodeKind::Memcpy);
}

template <typename T>
CUresult set(std::uintptr_t dst, std::size_t pitch, T value, std::size_t width,
             std::size_t height, CUstream h, bool async, bool pt) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;  // D16/D32 alignment
  const std::size_t row = width * sizeof(T);
  if (height > 1 && pitch < row) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t span = (height - 1) * pitch + row;
  if (CUresult r = check_device_side(dst, span)) return r;
  Touches touches;
  touches.add(dst, span, true);
  auto fn = on_device(s->ctx, touches, [dst, pitch, value, width, height] {
    for (std::size_t y = 0; y < height; ++y) {
      T* p = reinterpret_cast<T*>(dst + y * pitch);
      if (sizeof(T) == 1) {
        std::memset(p, static_cast<int>(value), width);
      } else {
        for (std::size_t x = 0; x < width; ++x) p[x] = value;
      }
    }
  });
  if (!async) return run_sync(s, fn, true);
  Op op;
  op.fn = fn;
  op.pays_latency = true;
  return submit(s, std::move(op), NodeKind::Memset);
}

Ptr H(const void* p) { return {reinterpret_cast<std::uintptr_t>(p), Side::Host}; }
Ptr D(std::uintptr_t p) { return {p, Side::Device}; }
Ptr A(std::uintptr_t p) { return {p, Side::Any}; }

// One side of a CUDA_MEMCPY2D: the first byte it touches and its pitch.
// CUDA arrays do not exist in the sim, so no handle names one.
CUresult side_2d(CUmemorytype type, const void* host, CUdeviceptr dev, std::size_t x,
                 std::size_t y, std::size_t pitch, std::size_t width, std::size_t height,
                 Ptr* out) {
  std::uintptr_t base = 0;
  Side side = Side::Any;
  switch (type) {
    case CU_MEMORYTYPE_HOST: base = reinterpret_cast<std::uintptr_t>(host); side = Side::Host; break;
    case CU_MEMORYTYPE_DEVICE: base = dev; side = Side::Device; break;
    case CU_MEMORYTYPE_UNIFIED: base = dev; side = Side::Any; break;  // inferred from the address
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  // "srcPitch must be greater than or equal to WidthInBytes + srcXInBytes"
  // (cuMemcpy2D), and not above CU_DEVICE_ATTRIBUTE_MAX_PITCH (2^31 - 1).
  if (base == 0 || x > SIZE_MAX - width || x > UINTPTR_MAX - base) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && (pitch < width + x || pitch > 2147483647u)) return CUDA_ERROR_INVALID_VALUE;
  if (y > (UINTPTR_MAX - base - x) / (pitch ? pitch : 1)) return CUDA_ERROR_INVALID_VALUE;
  *out = {base + y * pitch + x, side};
  return CUDA_SUCCESS;
}

// cuMemcpy2D / cuMemcpy2DUnaligned / cuMemcpy2DAsync: Height rows of
// WidthInBytes bytes. Device-side rows are validated as one span (first row
// to end of last row) against live allocations; pageable sources of an
// async copy are staged, pageable destinations complete before return, as
// for the 1D copies.
CUresult copy2d(const CUDA_MEMCPY2D* c, CUstream h, bool async, bool pt) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t w = c->WidthInBytes, rows = c->Height;
  if (w == 0 || rows == 0) return CUDA_SUCCESS;
  Ptr src{}, dst{};
  if (CUresult r = side_2d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY,
                           c->srcPitch, w, rows, &src)) {
    return r;
  }
  if (CUresult r = side_2d(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY,
                           c->dstPitch, w, rows, &dst)) {
    return r;
  }
  const std::size_t sp = rows > 1 ? c->srcPitch : 0, dp = rows > 1 ? c->dstPitch : 0;
  if ((rows - 1) > (SIZE_MAX - w) / (sp > dp ? sp : 1)) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t src_span = (rows - 1) * sp + w, dst_span = (rows - 1) * dp + w;
  if (src.p > UINTPTR_MAX - src_span || dst.p > UINTPTR_MAX - dst_span) return CUDA_ERROR_INVALID_VALUE;
  if (dst.side == Side::Device) {
    if (CUresult r = check_device_side(dst.p, dst_span)) return r;
  }
  if (src.side == Side::Device) {
    if (CUresult r = check_device_side(src.p, src_span)) return r;
  }
  bool pinned = false;
  const bool dst_sim = dst.side == Side::Device || is_sim_memory(dst.p, dst_span, &pinned);
  const bool src_sim = src.side == Side::Device || is_sim_memory(src.p, src_span, &pinned);
  const std::uintptr_t d0 = dst.p, s0 = src.p;
  Touches touches;
  if (dst_sim) touches.add(d0, dst_span, true);
  if (src_sim) touches.add(s0, src_span, false);
  auto rows_fn = on_device(s->ctx, touches, [d0, s0, sp, dp, w, rows] {
    for (std::size_t y = 0; y < rows; ++y) {
      std::memmove(reinterpret_cast<void*>(d0 + y * dp), reinterpret_cast<const void*>(s0 + y * sp), w);
    }
  });
  if (!async || !dst_sim) return run_sync(s, rows_fn, true);
  Op op;
  op.pays_latency = true;
  if (!src_sim) {
    auto staged = std::make_shared<std::vector<unsigned char>>(w * rows);
    for (std::size_t y = 0; y < rows; ++y) {
      std::memcpy(staged->data() + y * w, reinterpret_cast<const void*>(s0 + y * sp), w);
    }
    op.fn = on_device(s->ctx, touches, [d0, dp, w, rows, staged] {
      for (std::size_t y = 0; y < rows; ++y) {
        std::memcpy(reinterpret_cast<void*>(d0 + y * dp), staged->data() + y * w, w);
      }
    });
  } else {
    op.fn = rows_fn;
  }
  return submit(s, std::move(op), NodeKind::Memcpy);
}

}  // namespace

// A memset node's work (cuGraphAddMemsetNode): elementSize 1, 2 or 4, the
// rows validated now against live allocations and again when it runs.
CUresult graph_memset_work(Context* ctx, const CUDA_MEMSET_NODE_PARAMS& p, std::function<void()>* out) {
  const unsigned e = p.elementSize;
  if ((e != 1 && e != 2 && e != 4) || p.width == 0 || p.height == 0 || p.dst % e != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t row = p.width * e;
  if (p.height > 1 && p.pitch < row) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t span = (p.height - 1) * p.pitch + row;
  if (CUresult r = check_device_side(p.dst, span)) return r;
  Touches touches;
  touches.add(p.dst, span, true);
  *out = on_device(ctx, touches, [p, e] {
    for (std::size_t y = 0; y < p.height; ++y) {
      const std::uintptr_t at = p.dst + y * p.pitch;
      for (std::size_t x = 0; x < p.width; ++x) std::memcpy(reinterpret_cast<void*>(at + x * e), &p.value, e);
    }
  });
  return CUDA_SUCCESS;
}

// A memcpy node's work (cuGraphAddMemcpyNode): one row (Height and Depth at
// most 1, no CUDA arrays, which the sim does not have); host memory is read
// or written when the node runs.
CUresult graph_memcpy_work(Context* ctx, const CUDA_MEMCPY3D& c, std::function<void()>* out) {
  if (c.Height > 1 || c.Depth > 1 || c.srcY || c.srcZ || c.dstY || c.dstZ) return CUDA_ERROR_NOT_SUPPORTED;
  const std::size_t n = c.WidthInBytes;
  Ptr src{}, dst{};
  if (CUresult r = side_2d(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, 0, 0, n, 1, &src)) return r;
  if (CUresult r = side_2d(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, 0, 0, n, 1, &dst)) return r;
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (dst.side == Side::Device) {
    if (CUresult r = check_device_side(dst.p, n)) return r;
  }
  if (src.side == Side::Device) {
    if (CUresult r = check_device_side(src.p, n)) return r;
  }
  bool pinned = false;
  Touches touches;
  if (dst.side == Side::Device || is_sim_memory(dst.p, n, &pinned)) touches.add(dst.p, n, true);
  if (src.side == Side::Device || is_sim_memory(src.p, n, &pinned)) touches.add(src.p, n, false);
  const std::uintptr_t d = dst.p, s0 = src.p;
  *out = on_device(ctx, touches, [d, s0, n] {
    std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s0), n);
  });
  return CUDA_SUCCESS;
}

}  // namespace sim

using namespace sim;

// ---- copies: sync (plain, _ptds, legacy 32-bit) and async (plain, _ptsz) ----
#define SIM_COPY_SYNC(NAME, PT, DT, DST, ST, SRC)                  \
  CUresult CUDAAPI NAME(DT dst, ST src, size_t n) {                \
    return copy(DST, SRC, n, nullptr, false, PT);                  \
  }
#define SIM_COPY_ASYNC(NAME, PT, DT, DST, ST, SRC)                 \
  CUresult CUDAAPI NAME(DT dst, ST src, size_t n, CUstream h) {    \
    return copy(DST, SRC, n, h, true, PT);                         \
  }

SIM_COPY_SYNC(cuMemcpy, false, CUdeviceptr, A(dst), CUdeviceptr, A(src))
SIM_COPY_SYNC(cuMemcpy_ptds, true, CUdeviceptr, A(dst), CUdeviceptr, A(src))
SIM_COPY_ASYNC(cuMemcpyAsync, false, CUdeviceptr, A(dst), CUdeviceptr, A(src))
SIM_COPY_ASYNC(cuMemcpyAsync_ptsz, true, CUdeviceptr, A(dst), CUdeviceptr, A(src))

SIM_COPY_SYNC(cuMemcpyHtoD_v2, false, CUdeviceptr, D(dst), const void*, H(src))
SIM_COPY_SYNC(cuMemcpyHtoD_v2_ptds, true, CUdeviceptr, D(dst), const void*, H(src))
SIM_COPY_SYNC(cuMemcpyDtoH_v2, false, void*, H(dst), CUdeviceptr, D(src))
SIM_COPY_SYNC(cuMemcpyDtoH_v2_ptds, true, void*, H(dst), CUdeviceptr, D(src))
SIM_COPY_SYNC(cuMemcpyDtoD_v2, false, CUdeviceptr, D(dst), CUdeviceptr, D(src))
SIM_COPY_SYNC(cuMemcpyDtoD_v2_ptds, true, CUdeviceptr, D(dst), CUdeviceptr, D(src))

SIM_COPY_ASYNC(cuMemcpyHtoDAsync_v2, false, CUdeviceptr, D(dst), const void*, H(src))
SIM_COPY_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, true, CUdeviceptr, D(dst), const void*, H(src))
SIM_COPY_ASYNC(cuMemcpyDtoHAsync_v2, false, void*, H(dst), CUdeviceptr, D(src))
SIM_COPY_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, true, void*, H(dst), CUdeviceptr, D(src))
SIM_COPY_ASYNC(cuMemcpyDtoDAsync_v2, false, CUdeviceptr, D(dst), CUdeviceptr, D(src))
SIM_COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, true, CUdeviceptr, D(dst), CUdeviceptr, D(src))

// Legacy 32-bit ABIs (CUDA 2.0): 32-bit pointers and sizes.
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dst, const void* src, unsigned int n) {
  return copy(D(dst), H(src), n, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr_v1 src, unsigned int n) {
  return copy(H(dst), D(src), n, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr_v1 dst, CUdeviceptr_v1 src, unsigned int n) {
  return copy(D(dst), D(src), n, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr_v1 dst, const void* src, unsigned int n,
                                   CUstream h) {
  return copy(D(dst), H(src), n, h, true, false);
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr_v1 src, unsigned int n, CUstream h) {
  return copy(H(dst), D(src), n, h, true, false);
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr_v1 dst, CUdeviceptr_v1 src, unsigned int n,
                                   CUstream h) {
  return copy(D(dst), D(src), n, h, true, false);
}

// Peer copies: every simulated device shares the host address space.
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return copy(D(dst), D(src), n, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                   size_t n) {
  return copy(D(dst), D(src), n, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                   size_t n, CUstream h) {
  return copy(D(dst), D(src), n, h, true, false);
}
CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                        size_t n, CUstream h) {
  return copy(D(dst), D(src), n, h, true, true);
}

// ---- 2D copies (CUDA_MEMCPY2D; the legacy 32-bit CUDA_MEMCPY2D_v1 ABIs are not modelled) --
CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* c) { return copy2d(c, nullptr, false, false); }
CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* c) { return copy2d(c, nullptr, false, true); }
// "cuMemcpy2DUnaligned() does not have these restrictions" (the pitches of
// intra-device copies): the sim has none either, so it is the same copy.
CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* c) {
  return copy2d(c, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* c) {
  return copy2d(c, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream h) {
  return copy2d(c, h, true, false);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* c, CUstream h) {
  return copy2d(c, h, true, true);
}

// ---- memsets ------------------------------------------------------------------
#define SIM_SET_SYNC(NAME, PT, T, PTR)                                  \
  CUresult CUDAAPI NAME(PTR dst, T v, size_t n) {                       \
    return set<T>(dst, 0, v, n, 1, nullptr, false, PT);                 \
  }
#define SIM_SET_ASYNC(NAME, PT, T)                                      \
  CUresult CUDAAPI NAME(CUdeviceptr dst, T v, size_t n, CUstream h) {   \
    return set<T>(dst, 0, v, n, 1, h, true, PT);                        \
  }
#define SIM_SET2D_SYNC(NAME, PT, T)                                             \
  CUresult CUDAAPI NAME(CUdeviceptr dst, size_t pitch, T v, size_t w, size_t h) { \
    return set<T>(dst, pitch, v, w, h, nullptr, false, PT);                     \
  }
#define SIM_SET2D_ASYNC(NAME, PT, T)                                                \
  CUresult CUDAAPI NAME(CUdeviceptr dst, size_t pitch, T v, size_t w, size_t h,     \
                        CUstream s) {                                               \
    return set<T>(dst, pitch, v, w, h, s, true, PT);                                \
  }

SIM_SET_SYNC(cuMemsetD8_v2, false, unsigned char, CUdeviceptr)
SIM_SET_SYNC(cuMemsetD8_v2_ptds, true, unsigned char, CUdeviceptr)
SIM_SET_SYNC(cuMemsetD16_v2, false, unsigned short, CUdeviceptr)
SIM_SET_SYNC(cuMemsetD16_v2_ptds, true, unsigned short, CUdeviceptr)
SIM_SET_SYNC(cuMemsetD32_v2, false, unsigned int, CUdeviceptr)
SIM_SET_SYNC(cuMemsetD32_v2_ptds, true, unsigned int, CUdeviceptr)
SIM_SET_ASYNC(cuMemsetD8Async, false, unsigned char)
SIM_SET_ASYNC(cuMemsetD8Async_ptsz, true, unsigned char)
SIM_SET_ASYNC(cuMemsetD16Async, false, unsigned short)
SIM_SET_ASYNC(cuMemsetD16Async_ptsz, true, unsigned short)
SIM_SET_ASYNC(cuMemsetD32Async, false, unsigned int)
SIM_SET_ASYNC(cuMemsetD32Async_ptsz, true, unsigned int)
SIM_SET2D_SYNC(cuMemsetD2D8_v2, false, unsigned char)
SIM_SET2D_SYNC(cuMemsetD2D8_v2_ptds, true, unsigned char)
SIM_SET2D_SYNC(cuMemsetD2D32_v2, false, unsigned int)
SIM_SET2D_SYNC(cuMemsetD2D32_v2_ptds, true, unsigned int)
SIM_SET2D_ASYNC(cuMemsetD2D8Async, false, unsigned char)
SIM_SET2D_ASYNC(cuMemsetD2D8Async_ptsz, true, unsigned char)
SIM_SET2D_ASYNC(cuMemsetD2D32Async, false, unsigned int)
SIM_SET2D_ASYNC(cuMemsetD2D32Async_ptsz, true, unsigned int)

CUresult CUDAAPI cuMemsetD8(CUdeviceptr_v1 dst, unsigned char v, unsigned int n) {
  return set<unsigned char>(dst, 0, v, n, 1, nullptr, false, false);
}
CUresult CUDAAPI cuMemsetD16(CUdeviceptr_v1 dst, unsigned short v, unsigned int n) {
  return set<unsigned short>(dst, 0, v, n, 1, nullptr, false, false);
}
CUresult CUDAAPI cuMemsetD32(CUdeviceptr_v1 dst, unsigned int v, unsigned int n) {
  return set<unsigned int>(dst, 0, v, n, 1, nullptr, false, false);
}
