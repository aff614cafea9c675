"""Python's ways out of a process (issue 21), for
tests/integration/exit_ways_test.cpp: the process that leaves allocates ten
1 MiB buffers on the simulated device through ctypes, frees one, prints its
manifest as tests/apps/exit_ways.cpp does, then leaves.

    python3 exit_ways.py WAY

WAY: os_exit (os._exit(7)), sys_exit (sys.exit(7): the interpreter's
shutdown, then libc's exit), mp_fork (a multiprocessing child of the "fork"
start method allocates and returns; multiprocessing ends it with
os._exit(0); the parent, which never touches CUDA, prints "child exit N").
Standard library only.
"""
import sys

sys.dont_write_bytecode = True  # never leave __pycache__ in the source tree

import ctypes
import os


def allocate_and_report():
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    buffers = []
    for _ in range(10):
        p = ctypes.c_void_p()
        if rt.cudaMalloc(ctypes.byref(p), 1 << 20) != 0:
            os._exit(20)
        buffers.append(p)
    if rt.cudaFree(buffers[0]) != 0:
        os._exit(21)
    print("manifest pid=%d allocs=10 frees=1 reason=exit signal=0" % os.getpid())
    sys.stdout.flush()
    return buffers


def main(way):
    if way == "os_exit":
        allocate_and_report()
        os._exit(7)
    if way == "sys_exit":
        kept = allocate_and_report()  # noqa: F841  (live at exit)
        sys.exit(7)
    if way == "mp_fork":
        import multiprocessing
        child = multiprocessing.get_context("fork").Process(target=allocate_and_report)
        child.start()
        child.join()
        print("child exit %d" % child.exitcode)
        return 0
    sys.stderr.write("usage: exit_ways.py os_exit|sys_exit|mp_fork\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
