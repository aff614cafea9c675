"""Frames in a second file: the nested-calls case crosses files, and a class
with methods of every kind (tests/apps/python/README.md)."""
import ctypes
from ctypes import byref

import pystack_support as S
from pystack_support import note, ok


def level_three(api):
    if api == "cuMemAlloc_v2":
        d = ctypes.c_uint64()
        ok(S.CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "nested")))
        return S.CUDA.keep(d, "cuMemAlloc_v2")
    p = ctypes.c_void_p()
    ok(S.CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "nested")))
    return S.CUDA.keep(p)


class DeviceBuffer:
    """Allocates in __init__, an instance method, a classmethod, a
    staticmethod, a property and a nested class's method."""

    def __init__(self):
        self.p = ctypes.c_void_p()
        ok(S.CUDA.rt.cudaMalloc(byref(self.p), note("cudaMalloc", "method")))
        S.CUDA.keep(self.p)

    def grow(self):
        p = ctypes.c_void_p()
        ok(S.CUDA.rt_py.cudaMalloc(byref(p), note("cudaMalloc", "method")))
        return S.CUDA.keep(p)

    @classmethod
    def make(cls):
        p = ctypes.c_void_p()
        ok(S.CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "method")))
        S.CUDA.keep(p)
        return cls()

    @staticmethod
    def raw():
        d = ctypes.c_uint64()
        ok(S.CUDA.drv.cuMemAlloc_v2(byref(d), note("cuMemAlloc_v2", "method")))
        return S.CUDA.keep(d, "cuMemAlloc_v2")

    @property
    def scratch(self):
        p = ctypes.c_void_p()
        ok(S.CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "method")))
        return S.CUDA.keep(p)

    class Shard:
        def place(self):
            p = ctypes.c_void_p()
            ok(S.CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc", "method")))
            return S.CUDA.keep(p)
