"""Allocates while it is being imported: the innermost Python frame is this
module's <module>, inside importlib's frames (tests/apps/python/README.md)."""
import ctypes
from ctypes import byref

import pystack_support as S
from pystack_support import note, ok

_p = ctypes.c_void_p()
ok(S.CUDA.rt.cudaMalloc(byref(_p), note("cudaMalloc", "import")))
S.CUDA.keep(_p)
