"""Binds Numba 0.56's ctypes driver functions as a CUDA 12 driver would give
them (README.md here, "CUDA 13 and Numba 0.56"). On PYTHONPATH for the
numba.* tests only, so that the suite's own subprocesses get it too.

Numba's Driver._find_api looks for `NAME_v2` before `NAME`, which is right
whenever cuda.h maps NAME to NAME_v2 (same arguments, a newer ABI). CUDA 13
added cuCtxGetDevice_v2(CUdevice*, CUcontext) and cuCtxSynchronize_v2
(CUcontext): new functions with an extra argument, which cuda.h does not map
the old names to. Numba 0.56 calls them with the old arguments, so the driver
reads a garbage CUcontext: the sim answers CUDA_ERROR_INVALID_CONTEXT, and
users of Numba's ctypes binding on 580 drivers report a crash in
cuCtxGetDevice_v2 (github.com/dpeerlab/segger/issues/68). Here
those two names bind the exported NAME, as with any CUDA 12 driver, where no
NAME_v2 existed. Nothing else of Numba changes.
"""
import importlib.abc
import importlib.util
import os
import sys

_DRIVER_MODULE = "numba.cuda.cudadrv.driver"
# Functions whose _v2 in CUDA 13 takes other arguments than the name cuda.h
# keeps (cuda.h has no `#define NAME NAME_v2` for them).
CUDA13_NEW_V2 = ("cuCtxGetDevice", "cuCtxSynchronize")


def _patch(module):
    original = module.Driver._find_api

    def _find_api(self, fname):
        if fname in CUDA13_NEW_V2:
            try:
                return getattr(self.lib, fname)
            except AttributeError:
                pass
        return original(self, fname)

    module.Driver._find_api = _find_api


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _DRIVER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())

# This file hides the interpreter's own sitecustomize (Debian's installs
# apport's hook): run the next one on the path as Python would have.
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    if os.path.abspath(_entry or ".") == _here:
        continue
    _candidate = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.isfile(_candidate):
        with open(_candidate) as _f:
            exec(compile(_f.read(), _candidate, "exec"), {"__name__": "sitecustomize", "__file__": _candidate})
        break
