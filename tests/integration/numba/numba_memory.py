"""Allocates with Numba the ways a Numba program does, and writes down what
Numba says it got, for check_numba_memory.py to compare with the trace that
cumemtrace wrote meanwhile (README.md here).

    python3 numba_memory.py MANIFEST.json

Each allocation is made on a line of its own, and that line is recorded: the
trace's Python frames must name it. Kernels compute nothing on the simulated
device, so nothing here launches one or reads a result back from one; the
copies (to_device, copy_to_host) are plain memory traffic.
"""
import inspect
import json
import sys

import numpy as np
from numba import cuda


def line_here():
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


def main(manifest_path):
    ctx = cuda.current_context()
    info_start = ctx.get_memory_info()
    record = {"python": sys.executable, "allocations": [], "memory_info": {}}
    record["memory_info"]["start"] = {"free": info_start.free, "total": info_start.total}
    arrays = {}

    def device(name, array, line):
        # Numba's MemoryPointer: the pointer cuMemAlloc gave and the bytes it asked for.
        arrays[name] = array
        record["allocations"].append({
            "name": name, "api": "cuMemAlloc_v2", "kind": "device",
            "ptr": array.device_ctypes_pointer.value, "gpu_data_ptr": array.gpu_data.device_pointer_value,
            "size": array.gpu_data.size, "nbytes": array.nbytes, "line": line})

    def host(name, array, line, mapped):
        # pinned_array / mapped_array: numpy arrays over cuMemHostAlloc memory.
        arrays[name] = array
        entry = {"name": name, "api": "cuMemHostAlloc", "kind": "host_pinned",
                 "ptr": array.ctypes.data, "size": array.nbytes, "nbytes": array.nbytes, "line": line}
        if mapped:
            entry["device_ptr"] = array.device_ctypes_pointer.value
        record["allocations"].append(entry)

    # Device arrays of a few sizes: one element, a small vector, 512 KiB, and
    # 3 MiB + 1 byte (a large block for the caching pool).
    d_scalar, line = cuda.device_array(1, dtype=np.float64), line_here()
    device("device_array_1xf8", d_scalar, line)
    d_vec, line = cuda.device_array(1000, dtype=np.float32), line_here()
    device("device_array_1000xf4", d_vec, line)
    d_mat, line = cuda.device_array((256, 256), dtype=np.float64), line_here()
    device("device_array_256x256xf8", d_mat, line)
    d_big, line = cuda.device_array(3 * 1024 * 1024 + 1, dtype=np.uint8), line_here()
    device("device_array_3MiB+1xu1", d_big, line)
    host_data = np.arange(12345, dtype=np.int16)
    d_copy, line = cuda.to_device(host_data), line_here()
    device("to_device_12345xi2", d_copy, line)
    # Memory traffic only: the copy back must hold what went in.
    back = d_copy.copy_to_host()
    record["round_trip_equal"] = bool(np.array_equal(back, host_data))

    pinned, line = cuda.pinned_array(1000, dtype=np.float64), line_here()
    host("pinned_array_1000xf8", pinned, line, mapped=False)
    mapped, line = cuda.mapped_array(512, dtype=np.int32), line_here()
    host("mapped_array_512xi4", mapped, line, mapped=True)
    managed, line = cuda.managed_array(4096, dtype=np.float32), line_here()
    arrays["managed_array_4096xf4"] = managed
    record["allocations"].append({
        "name": "managed_array_4096xf4", "api": "cuMemAllocManaged", "kind": "managed",
        "ptr": managed.device_ctypes_pointer.value, "host_ptr": managed.ctypes.data,
        "size": managed.nbytes, "nbytes": managed.nbytes, "line": line})

    info_live = ctx.get_memory_info()
    record["memory_info"]["live"] = {"free": info_live.free, "total": info_live.total}

    # Give some back. Numba defers frees (its memory manager's pending
    # deallocations, not the context's own queue of streams and modules) until
    # it has enough of them; clear() makes them now, on the line recorded.
    freed = ["device_array_1xf8", "to_device_12345xi2", "pinned_array_1000xf8"]
    del d_scalar, d_copy, pinned
    for name in freed:
        del arrays[name]
    deallocations = ctx.memory_manager.deallocations
    record["pending_before_clear"] = len(deallocations)
    deallocations.clear(); free_line = line_here()
    record["pending_after_clear"] = len(deallocations)
    for entry in record["allocations"]:
        entry["freed"] = entry["name"] in freed
        if entry["freed"]:
            entry["free_line"] = free_line

    info_end = ctx.get_memory_info()
    record["memory_info"]["end"] = {"free": info_end.free, "total": info_end.total}
    record["file"] = __file__
    record["finished"] = True
    with open(manifest_path, "w") as f:
        json.dump(record, f, indent=1)
    # The arrays still alive stay alive until the process ends: Numba frees
    # nothing more before then (the checker says which frees may follow).
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
