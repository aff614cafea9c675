"""Device memory for the sample tests: cudaMalloc and cudaFree through
ctypes, on whatever libcudart.so.13 the loader finds (the simulated device
of tests/sim in these tests)."""
import ctypes

_runtime = ctypes.CDLL("libcudart.so.13")
_runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
_runtime.cudaFree.argtypes = [ctypes.c_void_p]

MiB = 1 << 20
KiB = 1 << 10

# What the leaking tests keep: held until the process ends.
KEPT = []


def alloc(nbytes):
    ptr = ctypes.c_void_p()
    status = _runtime.cudaMalloc(ctypes.byref(ptr), nbytes)  # line:alloc
    assert status == 0, "cudaMalloc(%d) returned %d" % (nbytes, status)
    return ptr.value


def free(ptr):
    status = _runtime.cudaFree(ctypes.c_void_p(ptr))
    assert status == 0, "cudaFree returned %d" % status
