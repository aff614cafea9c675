"""The simulated CUDA device through ctypes, and the manifest of what each
allocation's Python stack was (tests/apps/python/README.md).

Every allocation, failing request and bad free made by the programs here
goes through note(), note_oom() or note_bad_ptr(), called as an argument ON
THE SAME SOURCE LINE as the ctypes call:

    ok(CUDA.rt.cudaMalloc(byref(p), note("cudaMalloc")))

note() records the caller's Python stack (traceback.extract_stack(), checked
against a walk of sys._getframe() for the qualified names) and returns a size
no other request of the process uses, so the checker maps each trace event to
exactly one manifest entry. Standard library only; runs on CPython 3.8+.
"""
import ctypes
import itertools
import json
import os
import platform
import sys
import threading
import traceback

CUDA = None          # the Cuda object, after setup()
_MANIFEST = None     # the Manifest of this process

# Sizes no other request uses: odd, so no pool rounding or library internal
# size collides with them. Failing requests ask for more than any device.
_counter = itertools.count(1)
_counter_lock = threading.Lock()
_OOM_BASE = 1 << 40
_BAD_PTR_BASE = 0xBAD000


def _next_number():
    with _counter_lock:
        return next(_counter)


class ProgramError(Exception):
    """A CUDA call returned what the program did not expect (not a trace problem)."""


def ok(rc):
    if rc != 0:
        raise ProgramError("CUDA call failed with %d" % rc)
    return rc


def failed(rc):
    if rc == 0:
        raise ProgramError("a request that must fail succeeded")
    return rc


class Cuda:
    """libcudart.so.13 and libcuda.so.1 from LD_LIBRARY_PATH (the sim's):
    rt/drv through ctypes.CDLL (the GIL is released during the call),
    rt_py/drv_py through ctypes.PyDLL (the GIL is held)."""

    def __init__(self):
        self.rt = ctypes.CDLL("libcudart.so.13")
        self.rt_py = ctypes.PyDLL("libcudart.so.13")
        self.drv = ctypes.CDLL("libcuda.so.1")
        self.drv_py = ctypes.PyDLL("libcuda.so.1")
        for lib in (self.rt, self.rt_py):
            lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            lib.cudaMalloc.restype = ctypes.c_int
            lib.cudaFree.argtypes = [ctypes.c_void_p]
            lib.cudaFree.restype = ctypes.c_int
        for lib in (self.drv, self.drv_py):
            lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
            lib.cuMemAlloc_v2.restype = ctypes.c_int
            lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
            lib.cuMemFree_v2.restype = ctypes.c_int
        self.drv.cuInit.argtypes = [ctypes.c_uint]
        self.drv.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        self.drv.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        self.drv.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        self._context = None
        self._context_lock = threading.Lock()
        self._live = []          # (api family, pointer) to free at the end
        self._live_lock = threading.Lock()
        _require_sim()

    def use_driver_here(self):
        """cuInit, the primary context retained once, made current on this
        thread (the driver's context is per thread; the runtime sets its own)."""
        with self._context_lock:
            if self._context is None:
                ok(self.drv.cuInit(0))
                device = ctypes.c_int()
                ok(self.drv.cuDeviceGet(ctypes.byref(device), 0))
                context = ctypes.c_void_p()
                ok(self.drv.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
                self._context = context
        ok(self.drv.cuCtxSetCurrent(self._context))

    def keep(self, pointer, api="cudaMalloc"):
        value = pointer.value if hasattr(pointer, "value") else pointer
        with self._live_lock:
            self._live.append((api, value))
        return pointer

    def free_all(self):
        """Frees everything kept (noted: checked when free stacks are kept)."""
        with self._live_lock:
            live, self._live = self._live, []
        for api, value in live:
            if api == "cuMemAlloc_v2":
                ok(self.drv.cuMemFree_v2(note_free(value, "cuMemFree_v2", "free_all")))
            else:
                ok(self.rt.cudaFree(note_free(value, "cudaFree", "free_all")))


def _require_sim():
    with open("/proc/self/maps") as maps:
        text = maps.read()
    if "sim/libcudart.so.13" not in text or "sim/libcuda.so.1" not in text:
        sys.stderr.write("pystack: libcudart.so.13 / libcuda.so.1 are not the simulated "
                         "device's (set LD_LIBRARY_PATH to the build's sim/ folder)\n")
        sys.exit(3)


def setup():
    global CUDA
    CUDA = Cuda()
    return CUDA


# ---------------------------------------------------------------- manifest

_callbacks = threading.local()   # frames where Python was entered from native code


def enter_callback():
    """Called first thing by a Python function that native code (a ctypes
    CFUNCTYPE callback) called: its frame marks a native boundary."""
    stack = getattr(_callbacks, "frames", None)
    if stack is None:
        stack = _callbacks.frames = []
    stack.append(sys._getframe(1))


def exit_callback():
    _callbacks.frames.pop()


def _qualname(code):
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: 3.11+


def _frames_of(frame, full):
    """The stack from `frame` outwards, innermost first, as
    [{"fn","name","file","line"}]. full: also through traceback.extract_stack,
    which must agree frame for frame."""
    walked = []
    f = frame
    while f is not None:
        code = f.f_code
        walked.append({"fn": _qualname(code), "name": code.co_name,
                       "file": code.co_filename, "line": f.f_lineno})
        f = f.f_back
    if full:
        summary = list(reversed(traceback.extract_stack(frame)))
        if len(summary) != len(walked):
            raise ProgramError("extract_stack gave %d frames, the frame walk %d"
                               % (len(summary), len(walked)))
        for got, mine in zip(summary, walked):
            if (got.name, got.filename, got.lineno) != (mine["name"], mine["file"], mine["line"]):
                raise ProgramError("extract_stack %r differs from the frame walk %r" % (got, mine))
    boundaries = []
    marks = getattr(_callbacks, "frames", None) or []
    if marks:
        f, index = frame, 0
        while f is not None:
            if any(f is m for m in marks):
                boundaries.append(index + 1)  # native code between frame index and index+1
            f, index = f.f_back, index + 1
    return walked, boundaries


class Manifest:
    def __init__(self, path, group):
        self.path = path
        self.group = group
        self.entries = []
        self.stacks = []       # distinct Python stacks, innermost frame first
        self.stack_index = {}
        self.lock = threading.Lock()
        self.extra = {}
        self.expect_end = True

    def record(self, frame, kind, api, case, full, size=None, ptr=None):
        frames, boundaries = _frames_of(frame, full)
        key = tuple((f["fn"], f["name"], f["file"], f["line"]) for f in frames)
        entry = {"kind": kind, "api": api, "case": case,
                 "tid": threading.get_native_id(),
                 "thread": threading.current_thread().name}
        if size is not None:
            entry["size"] = size
        if ptr is not None:
            entry["ptr"] = "0x%x" % ptr
        if boundaries:
            entry["native_between"] = boundaries
        with self.lock:
            # Stacks are interned: "py_stack" indexes the document's "py_stacks".
            index = self.stack_index.get(key)
            if index is None:
                index = self.stack_index[key] = len(self.stacks)
                self.stacks.append(frames)
            entry["py_stack"] = index
            self.entries.append(entry)

    def write(self):
        document = {
            "format": "pystack-manifest", "version": 1,
            "pid": os.getpid(), "group": self.group,
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
            "qualnames": hasattr(sys._getframe().f_code, "co_qualname"),
            "expect_end": self.expect_end,
            "py_stacks": self.stacks,
            "entries": self.entries,
        }
        document.update(self.extra)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as out:
            out.write(json.dumps(document, separators=(",", ":")))  # dumps: the C encoder
        os.rename(tmp, self.path)


def start_manifest(directory, group):
    """The manifest of this process (a forked child calls it again)."""
    global _MANIFEST
    _MANIFEST = Manifest(os.path.join(directory, "manifest.%d.json" % os.getpid()), group)
    return _MANIFEST


def manifest():
    return _MANIFEST


def note(api="cudaMalloc", case=None, full=True):
    """A fresh size for an allocation that must succeed, recorded with the
    caller's Python stack."""
    size = 10001 + 2 * _next_number()
    _MANIFEST.record(sys._getframe(1), "alloc", api, case, full, size=size)
    return size


def note_oom(api="cudaMalloc", case=None):
    """A fresh size larger than the device: the request fails, an oom event."""
    size = _OOM_BASE + 1 + 2 * _next_number()
    _MANIFEST.record(sys._getframe(1), "oom", api, case, True, size=size)
    return size


def note_bad_ptr(api="cudaFree", case=None):
    """A pointer never allocated: its free is an error event."""
    ptr = _BAD_PTR_BASE + 16 * _next_number()
    _MANIFEST.record(sys._getframe(1), "error", api, case, True, ptr=ptr)
    return ptr


def note_free(ptr, api="cudaFree", case=None, full=True):
    """A pointer about to be freed, recorded with the caller's Python stack
    (checked when the trace keeps free stacks, CUMEMTRACE_FREE_STACKS=1)."""
    _MANIFEST.record(sys._getframe(1), "free", api, case, full, ptr=ptr)
    return ptr
