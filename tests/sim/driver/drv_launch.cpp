// Kernel launches. The sim runs no device code: a launch is validated as
// cuda.h (CUDA 13, cuLaunchKernel / cuLaunchKernelEx /
// cuLaunchCooperativeKernel) documents and then puts a step on its stream
// that does nothing but take SIMCUDA_ASYNC_LATENCY_US, like other
// kernel-like work (Op::pays_latency), in stream order: events recorded
// around it, stream waits and synchronisation see it as a kernel. Also the
// occupancy queries, on the model of drv_module.cpp (active_blocks_per_sm).
#include <algorithm>

#include "drv_graph.h"

using namespace sim;

namespace {

struct Dims {
  unsigned gx, gy, gz, bx, by, bz;
};

// Grid and block limits of the function's device (drv_device.cpp): a zero
// dimension, a dimension past its maximum or more threads per block than the
// function allows is CUDA_ERROR_INVALID_VALUE, as a real launch answers
// (cudaErrorInvalidConfiguration in the runtime).
CUresult check_dims(const LaunchInfo& f, const Dims& d, unsigned shared) {
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    cuDeviceGetAttribute(&v, a, f.ctx->dev->ordinal);
    return static_cast<unsigned>(v);
  };
  if (!d.gx || !d.gy || !d.gz || !d.bx || !d.by || !d.bz) return CUDA_ERROR_INVALID_VALUE;
  if (d.gx > attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X) || d.gy > attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y) ||
      d.gz > attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (d.bx > attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X) || d.by > attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y) ||
      d.bz > attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const unsigned long long threads = 1ull * d.bx * d.by * d.bz;
  if (threads > static_cast<unsigned>(f.max_threads_per_block)) return CUDA_ERROR_INVALID_VALUE;
  // Dynamic shared memory beyond CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  // (48 KiB until the program raises it with cuFuncSetAttribute).
  if (shared > static_cast<unsigned>(f.max_dynamic_shared)) return CUDA_ERROR_INVALID_VALUE;
  // "too many resources requested for launch": registers of the block.
  if (threads * static_cast<unsigned>(f.num_regs) > attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)) {
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  }
  return CUDA_SUCCESS;
}

// "The error CUDA_ERROR_INVALID_VALUE will be returned if kernel parameters
// are specified with both kernelParams and extra"; extra is a list of
// (key, value) pairs "terminated with either NULL or CU_LAUNCH_PARAM_END",
// and CU_LAUNCH_PARAM_BUFFER_SIZE needs CU_LAUNCH_PARAM_BUFFER_POINTER.
CUresult check_params(void** kernelParams, void** extra) {
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  if (!extra) return CUDA_SUCCESS;
  bool pointer = false, size = false;
  for (std::size_t i = 0; extra[i] != nullptr && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      pointer = true;
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      size = true;
      if (!extra[i + 1]) return CUDA_ERROR_INVALID_VALUE;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (size && !pointer) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

struct Launch {
  CUfunction f;
  Dims d;
  unsigned shared;
  CUstream stream;
  void** params;
  void** extra;
  bool cooperative;
  bool per_thread;
  unsigned cluster = 1;  // blocks per cluster (cuLaunchKernelEx)
};

CUresult launch(const Launch& l) {
  if (!l.f) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_init()) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(l.stream, l.per_thread, &s)) return r;
  LaunchInfo f;
  if (CUresult r = function_launch_info(l.f, s->ctx, &f)) return r;
  // "The CUDA context associated with this stream must match that
  // associated with the current context" / the function's module.
  if (f.ctx != s->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_dims(f, l.d, l.shared)) return r;
  if (CUresult r = check_params(l.params, l.extra)) return r;
  const unsigned long long blocks = 1ull * l.d.gx * l.d.gy * l.d.gz;
  if (l.cluster > 1 && blocks % l.cluster != 0) return CUDA_ERROR_INVALID_VALUE;
  if (l.cooperative) {
    // "The total number of blocks launched cannot exceed the maximum number
    // of blocks per multiprocessor as returned by
    // cuOccupancyMaxActiveBlocksPerMultiprocessor ... times the number of
    // multiprocessors" (cuLaunchCooperativeKernel).
    int sms = 0;
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, f.ctx->dev->ordinal);
    const int per_sm = active_blocks_per_sm(f, static_cast<int>(l.d.bx * l.d.by * l.d.bz), l.shared);
    if (blocks > 1ull * per_sm * static_cast<unsigned>(sms)) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  Op op;  // computes nothing: only its place in the stream and its latency
  op.pays_latency = true;
  return submit(s, std::move(op), NodeKind::Kernel);
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra, bool pt) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  if (config->numAttrs && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
  Launch l{f, {config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
               config->blockDimZ},
           config->sharedMemBytes, config->hStream, kernelParams, extra, false, pt};
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    switch (a.id) {
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        l.cooperative = a.value.cooperative != 0;
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: {
        // Each grid dimension "must be an integer multiple" of the cluster's.
        const auto& c = a.value.clusterDim;
        if (!c.x || !c.y || !c.z || l.d.gx % c.x || l.d.gy % c.y || l.d.gz % c.z) return CUDA_ERROR_INVALID_VALUE;
        l.cluster = c.x * c.y * c.z;
        break;
      }
      default:
        break;  // scheduling hints: nothing to schedule here
    }
  }
  return launch(l);
}

}  // namespace

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch(Launch{f, {gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ}, sharedMemBytes,
                       hStream, kernelParams, extra, false, false});
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams, void** extra) {
  return launch(Launch{f, {gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ}, sharedMemBytes,
                       hStream, kernelParams, extra, false, true});
}

// "Kernel parameters ... kernelParams" only: cooperative launches take no
// extra.
CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void** kernelParams) {
  return launch(Launch{f, {gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ}, sharedMemBytes,
                       hStream, kernelParams, nullptr, true, false});
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX,
                                                unsigned int blockDimY, unsigned int blockDimZ,
                                                unsigned int sharedMemBytes, CUstream hStream,
                                                void** kernelParams) {
  return launch(Launch{f, {gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ}, sharedMemBytes,
                       hStream, kernelParams, nullptr, true, true});
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, false);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                       void** extra) {
  return launch_ex(config, f, kernelParams, extra, true);
}

namespace {
int dev_attr(int ordinal, CUdevice_attribute a) {
  int v = 0;
  cuDeviceGetAttribute(&v, a, ordinal);
  return v;
}
}  // namespace

// ---- occupancy -----------------------------------------------------------------------

namespace {
CUresult occupancy_info(CUfunction func, LaunchInfo* info) {
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  return function_launch_info(func, c, info);
}

CUresult max_active_blocks(int* numBlocks, CUfunction func, int blockSize, size_t dyn, unsigned flags) {
  if (!numBlocks || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) return CUDA_ERROR_INVALID_VALUE;
  LaunchInfo i;
  if (CUresult r = occupancy_info(func, &i)) return r;
  *numBlocks = active_blocks_per_sm(i, blockSize, dyn);
  return CUDA_SUCCESS;
}

// The block size with the most resident threads per SM, the largest such on
// a tie, and the grid that fills every SM with it.
CUresult potential_block_size(int* minGridSize, int* blockSize, CUfunction func, CUoccupancyB2DSize b2d,
                              size_t dyn, int limit, unsigned flags) {
  if (!minGridSize || !blockSize || limit < 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) return CUDA_ERROR_INVALID_VALUE;
  LaunchInfo i;
  if (CUresult r = occupancy_info(func, &i)) return r;
  const int warp = dev_attr(i.ctx->dev->ordinal, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  int top = i.max_threads_per_block;
  if (limit > 0 && limit < top) top = limit;
  int best_bs = 0, best_blocks = 0, best_threads = 0;
  for (int bs = (top + warp - 1) / warp * warp; bs > 0; bs -= warp) {
    const int b = std::min(bs, top);
    const int blocks = active_blocks_per_sm(i, b, b2d ? b2d(b) : dyn);
    if (blocks * b > best_threads) {
      best_threads = blocks * b;
      best_bs = b;
      best_blocks = blocks;
    }
  }
  *blockSize = best_bs;
  *minGridSize = best_blocks * dev_attr(i.ctx->dev->ordinal, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                             size_t dynamicSMemSize) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                      int blockSize, size_t dynamicSMemSize,
                                                                      unsigned int flags) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit) {
  return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                              blockSizeLimit, 0);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize, CUfunction func,
                                                           CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                           size_t dynamicSMemSize, int blockSizeLimit,
                                                           unsigned int flags) {
  return potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                              blockSizeLimit, flags);
}

// "the maximum size of dynamic shared memory to allow numBlocks blocks per SM".
CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func, int numBlocks,
                                                         int blockSize) {
  if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  LaunchInfo i;
  if (CUresult r = occupancy_info(func, &i)) return r;
  if (active_blocks_per_sm(i, blockSize, 0) < numBlocks) {
    *dynamicSmemSize = 0;
    return CUDA_SUCCESS;
  }
  const std::size_t sm = static_cast<std::size_t>(dev_attr(i.ctx->dev->ordinal, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  const std::size_t reserved = static_cast<std::size_t>(dev_attr(i.ctx->dev->ordinal, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK));
  std::size_t per = sm / static_cast<std::size_t>(numBlocks);
  per = per > reserved + i.static_shared ? per - reserved - i.static_shared : 0;
  *dynamicSmemSize = std::min(per, static_cast<std::size_t>(i.max_dynamic_shared));
  return CUDA_SUCCESS;
}

// Clusters of the config's cluster dimension (1 without the attribute) that
// fit on the device at once: SMs x blocks per SM, over the cluster size.
CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func, const CUlaunchConfig* config) {
  if (!numClusters || !config) return CUDA_ERROR_INVALID_VALUE;
  LaunchInfo i;
  if (CUresult r = occupancy_info(func, &i)) return r;
  unsigned cluster = 1;
  for (unsigned a = 0; a < config->numAttrs && config->attrs; ++a) {
    if (config->attrs[a].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& d = config->attrs[a].value.clusterDim;
      cluster = d.x * d.y * d.z;
    }
  }
  if (cluster == 0) return CUDA_ERROR_INVALID_VALUE;
  const int threads = static_cast<int>(config->blockDimX * config->blockDimY * config->blockDimZ);
  const int per_sm = active_blocks_per_sm(i, threads, config->sharedMemBytes);
  *numClusters = per_sm * dev_attr(i.ctx->dev->ordinal, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) / static_cast<int>(cluster);
  return CUDA_SUCCESS;
}
