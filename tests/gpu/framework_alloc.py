#!/usr/bin/env python3
"""CuPy or JAX, unchanged, under cumemtrace (scripts/gpu-check.sh, issue 7).

CuPy links the CUDA runtime statically (cumemtrace sees it through
cuGetProcAddress); JAX's XLA dlopens the driver and dlsyms it. Each program
allocates arrays of several sizes, computes with them, frees some, and after
each round samples its framework's own accounting (CuPy's memory pool
total_bytes/used_bytes, JAX's device memory_stats) with a cumemtrace mark
"sample N" at the same moment, like torch_train.py.

  framework_alloc.py cupy|jax --samples OUT.json
Exit 77 when the framework is not installed or sees no GPU.
"""
import argparse
import ctypes
import json
import sys

NOT_AVAILABLE = 77
ROUNDS = 6


def cumemtrace_marker():
    try:
        mark = ctypes.CDLL(None).cumemtrace_mark
    except (AttributeError, OSError):
        return lambda name: None
    mark.argtypes = [ctypes.c_char_p]
    mark.restype = None
    return lambda name: mark(name.encode())


def run_cupy(mark):
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as error:  # ImportError, or CUDARuntimeError without a GPU
        print(f"framework_alloc: CuPy unavailable: {error}")
        sys.exit(NOT_AVAILABLE)
    pool = cp.get_default_memory_pool()
    kept, samples = [], []
    for round_ in range(ROUNDS):
        n = (1 << 18) * (round_ + 1)
        a = cp.random.random(n, dtype=cp.float32)
        b = cp.sqrt(a) * 2.0 + a
        kept.append(cp.asnumpy(b.sum()))
        if round_ % 2 == 0:
            kept.append(cp.empty(3 << 20, dtype=cp.uint8))  # 3 MiB kept alive
        del a, b
        cp.cuda.Stream.null.synchronize()
        samples.append({"step": round_, "reserved": pool.total_bytes(), "allocated": pool.used_bytes()})
        mark(f"sample {round_}")
    return {"framework": "cupy", "version": cp.__version__, "samples": samples}


def run_jax(mark):
    try:
        import jax
        import jax.numpy as jnp
        device = jax.devices("gpu")[0]
    except Exception as error:  # ImportError, or RuntimeError without a GPU backend
        print(f"framework_alloc: JAX unavailable: {error}")
        sys.exit(NOT_AVAILABLE)
    kept, samples = [], []
    key = jax.random.PRNGKey(0)
    for round_ in range(ROUNDS):
        key, sub = jax.random.split(key)
        n = (1 << 18) * (round_ + 1)
        a = jax.device_put(jax.random.uniform(sub, (n,)), device)
        b = jnp.sqrt(a) * 2.0 + a
        if round_ % 2 == 0:
            kept.append(jnp.zeros((3 << 20,), dtype=jnp.uint8, device=device))
        b.block_until_ready()
        del a, b
        stats = device.memory_stats() or {}
        samples.append({"step": round_, "allocated": stats.get("bytes_in_use", 0),
                        "reserved": stats.get("pool_bytes", stats.get("bytes_reserved", 0))})
        mark(f"sample {round_}")
    return {"framework": "jax", "version": jax.__version__, "device": str(device), "samples": samples}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("framework", choices=("cupy", "jax"))
    parser.add_argument("--samples", required=True)
    args = parser.parse_args()
    mark = cumemtrace_marker()
    result = run_cupy(mark) if args.framework == "cupy" else run_jax(mark)
    with open(args.samples, "w") as out:
        json.dump(result, out)
    last = result["samples"][-1]
    print(f"framework_alloc: {args.framework} {result['version']}: {ROUNDS} rounds, "
          f"its accounting at the end: allocated {last['allocated']} B, reserved {last['reserved']} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
