"""cudaMalloc/cudaFree pairs from Python through ctypes, DEPTH Python frames
deep, as a framework's allocator reached from a training script would be
(scripts/bench.sh's Python rows).

    python3 bench_python_pairs.py PAIRS WARMUP [DEPTH]

Prints "<ns per timed pair> <pairs> <untimed pairs>", as the C++ loops do.
The sim's libcudart must be on LD_LIBRARY_PATH.
"""
import ctypes
import sys
import time

runtime = ctypes.CDLL("libcudart.so.13")  # CDLL: the GIL is released around each call
runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
runtime.cudaFree.argtypes = [ctypes.c_void_p]


def pairs(n):
    pointer = ctypes.c_void_p()
    malloc = runtime.cudaMalloc
    free = runtime.cudaFree
    where = ctypes.byref(pointer)
    for _ in range(n):
        if malloc(where, 4096) != 0:
            raise SystemExit("cudaMalloc failed")
        free(pointer)


def nested(depth, body):
    # One Python frame per level: the stack the hook sees is DEPTH frames deep.
    if depth <= 1:
        return body()
    return nested(depth - 1, body)


def main():
    n = int(sys.argv[1])
    warm_up = int(sys.argv[2])
    depth = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    # Our own frames (main, this lambda, nested's) count towards the depth.
    nested(depth - 3, lambda: pairs(warm_up))
    start = time.perf_counter_ns()
    nested(depth - 3, lambda: pairs(n))
    elapsed = time.perf_counter_ns() - start
    print(f"{elapsed / n:.1f} {n} {warm_up}")


main()
